"""Response bodies of the endpoints the client reads, per vLLM release, for CPU tests of the client.

Not captured from a running server (the CPU machines have no vLLM): written from each release's source,
read in the wheels of 0.24.0, 0.25.0 and 0.26.0 (`pip download --no-deps vllm==X`), with the line
that builds each body. The releases agree on every endpoint the client uses except these two:

  POST /reset_prefix_cache (serve/dev/cache/api_router.py)
    0.24.0, 0.25.0  line 43: Response(status_code=200), an empty body; the engine's bool is dropped
    0.26.0          line 44: JSONResponse({"success": bool(success)}), false while requests hold blocks
  POST /v1/completions, non-streaming (openai/completion/protocol.py CompletionResponse, dumped whole
  by completion/api_router.py: unset fields appear as null)
    0.24.0  no "metrics" (added in 0.25.0, line 562)
    0.25.0  "metrics": null
    0.26.0  "metrics": null, "ec_transfer_params": null (line 617), and usage.prompt_tokens_details
            gains "created_cache_tokens": null (openai/engine/protocol.py:107)

Identical in all three (file diffs empty or unrelated): /sleep and /wake_up (empty 200,
serve/dev/sleep/api_router.py:29/42), /is_sleeping, /collective_rpc, /load, /version, /health, the
vllm:engine_sleep_state gauge and vllm:generation_tokens_total (v1/metrics/loggers.py, 36 metric names
each), usage.prompt_tokens_details.cached_tokens (present with --enable-prompt-tokens-details, null
without), choices[].token_ids with return_token_ids, the streamed chunks and the final usage chunk
(exclude_none: an absent field, never a null), and the 400 error body of an invalid level.
"""

RELEASES = ("0.24.0", "0.25.0", "0.26.0")

# POST /reset_prefix_cache on an idle server.
RESET_PREFIX_CACHE = {"0.24.0": b"", "0.25.0": b"", "0.26.0": b'{"success":true}'}
RESET_PREFIX_CACHE_BUSY_0_26_0 = b'{"success":false}'  # running requests hold blocks

_CHOICE = {
    "index": 0,
    "text": " the the",
    "logprobs": {
        "text_offset": [0, 4],
        "token_logprobs": [-0.25, -0.5],
        "tokens": [" the", " the"],
        "top_logprobs": [{" the": -0.25}, {" the": -0.5}],
    },
    "finish_reason": "length",
    "stop_reason": None,
    "token_ids": [11, 11],
    "prompt_logprobs": None,
    "prompt_token_ids": None,
    "routed_experts": None,
}


def _completion(version: str) -> dict:
    details = {"cached_tokens": 16, "multimodal_tokens": None}
    if version == "0.26.0":
        details = {"cached_tokens": 16, "created_cache_tokens": None, "multimodal_tokens": None}
    body = {
        "id": "cmpl-8f1c",
        "object": "text_completion",
        "created": 1764460800,
        "model": "synthetic_qwen3",
        "choices": [dict(_CHOICE)],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {"prompt_tokens": 20, "total_tokens": 22, "completion_tokens": 2, "prompt_tokens_details": details},
        "kv_transfer_params": None,
    }
    if version == "0.26.0":
        body["ec_transfer_params"] = None
    if version in ("0.25.0", "0.26.0"):
        body["metrics"] = None
    return body


# POST /v1/completions {"prompt": <20 words>, "max_tokens": 2, "logprobs": 1, "return_token_ids": true},
# the prompt's first 16-token block served from the prefix cache.
COMPLETION = {v: _completion(v) for v in RELEASES}

# The same request with --enable-prompt-tokens-details off: details null, so cached_tokens is unknown.
COMPLETION_WITHOUT_DETAILS = dict(
    COMPLETION["0.26.0"],
    usage={"prompt_tokens": 20, "total_tokens": 22, "completion_tokens": 2, "prompt_tokens_details": None},
)

# Streamed (stream_options.include_usage): a token chunk (exclude_unset), the final usage chunk
# (exclude_none), [DONE]. The same in the three releases.
STREAM = (
    'data: {"id":"cmpl-8f1c","object":"text_completion","created":1764460800,"model":"synthetic_qwen3",'
    '"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null,'
    '"prompt_token_ids":null,"token_ids":[11]}]}\n\n'
    'data: {"id":"cmpl-8f1c","object":"text_completion","created":1764460800,"model":"synthetic_qwen3",'
    '"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":"length","stop_reason":null,'
    '"prompt_token_ids":null,"token_ids":[11]}]}\n\n'
    'data: {"id":"cmpl-8f1c","object":"text_completion","created":1764460800,"model":"synthetic_qwen3",'
    '"choices":[],"usage":{"prompt_tokens":20,"total_tokens":22,"completion_tokens":2,'
    '"prompt_tokens_details":{"cached_tokens":16}}}\n\n'
    "data: [DONE]\n\n"
)

IS_SLEEPING = b'{"is_sleeping":true}'
COLLECTIVE_RPC_RELOAD = b'{"results":[null]}'  # one worker; Worker.reload_weights returns None
LOAD = b'{"server_load":1}'
VERSION = {v: ('{"version":"%s"}' % v).encode() for v in RELEASES}
SLEEP_LEVEL_NOT_INTEGER = (
    b'{"error":{"message":"invalid literal for int() with base 10: \'abc\'",'
    b'"type":"BadRequestError","param":null,"code":400}}'
)

METRICS = """\
# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine="0",model_name="synthetic_qwen3",sleep_state="awake"} 0.0
vllm:engine_sleep_state{engine="0",model_name="synthetic_qwen3",sleep_state="weights_offloaded"} 1.0
vllm:engine_sleep_state{engine="0",model_name="synthetic_qwen3",sleep_state="discard_all"} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="synthetic_qwen3"} 4096.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="synthetic_qwen3"} 1.7644608e+09
"""
