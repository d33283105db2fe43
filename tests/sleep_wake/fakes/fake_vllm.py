"""A fake vLLM HTTP server for CPU tests of the suite: FakeEngine (fake_engine.py) behind the routes
and response shapes of a vLLM release.

The routes and their bodies follow vllm/entrypoints/serve/dev/{sleep,cache,rpc,rlhf}/api_router.py,
serve/instrumentator/{basic,health}.py and openai/completion/{serving,protocol}.py of the release
named by `version` (0.24.0, 0.25.0 or 0.26.0). Where the releases differ in shape, so does the fake:
  * POST /reset_prefix_cache: an empty 200 before 0.26.0, {"success": bool} from 0.26.0 on (through an
    in-process door always the bool, which the door host answers from the door's own method);
  * /v1/completions: "metrics": null from 0.25.0 on; "ec_transfer_params": null and
    usage.prompt_tokens_details.created_cache_tokens: null from 0.26.0 on.
tests/sleep_wake/fakes/unit/release_responses.py holds the same shapes as literals, with the source lines.
/collective_rpc serves the methods the suite calls on a worker: reload_weights, the worker extension's
pushes (PUSHES) and the workers' own sleep and wake_up (FakeEngine.worker_sleep / worker_wake_up).
Prompts are tokenized as whitespace-separated words.

With `door` other than http, the fake stands for the door host (tools/launcher/door_host.py) serving an
in-process door: what that door cannot do (door_host.CANNOT) answers 501 with the host's reason, so the fake
tier finds the classes a door cannot run before a GPU does; the rest is served as over HTTP.
"""

import itertools
import json
import select
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.core import metrics, releases, thresholds
from tests.sleep_wake.fakes import fake_checkpoint
from tests.sleep_wake.fakes.fake_engine import MAX_HOLD_S, PAUSE_MODES, EngineDeadError, FakeEngine, GpuMemory
from tools.launcher import door_host, weight_receiver
from tools.matrix import release_key

GiB = 1 << 30
MODEL = "fake"
_HOST = "127.0.0.1"  # loopback only, as the launcher's default


class FakeVllm:
    """The HTTP server. `engine` holds the state; `requests` every request seen (method, path, query,
    body); `hang_paths` paths that never answer (until stop), for timeout tests. checkpoint, host and
    log go to FakeEngine (what it serves, where it pins host copies, where it logs)."""

    def __init__(
        self,
        token_delay_s: float = 0.0,
        defects=(),
        memory: GpuMemory | None = None,
        version: str = "0.26.0",
        port: int = 0,
        checkpoint=fake_checkpoint.NONE,
        host=None,
        log=None,
        door: str = "http",
    ):
        if door != "http" and door not in door_host.CANNOT:
            raise ValueError(f"the fake serves http or a door of {sorted(door_host.CANNOT)}, not {door!r}")
        if version not in releases.SUPPORTED:
            raise ValueError(f"the fake serves the shapes of vLLM {', '.join(releases.SUPPORTED)}, not {version!r}")
        memory = memory or GpuMemory(weights=checkpoint.total_bytes, kv_cache=2 * GiB)
        self.engine = FakeEngine(memory, token_delay_s, defects, checkpoint, host, log)
        self.version = version
        self.door = door
        self._door_busy = False  # a door call in flight (the llm door makes one at a time)
        self._door_lock = threading.Lock()
        self.port = port
        self.requests: list[dict] = []
        # The llm doors' enqueued requests (/enqueue) not yet collected by /wait_for_completion, in order:
        # (request id, the event set once it ended, the completion body it ended with).
        self.enqueued: list[tuple[str, threading.Event, dict]] = []
        self._enqueued_ids = itertools.count()
        self.hang_paths: set[str] = set()
        self._httpd: ThreadingHTTPServer | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "FakeVllm":
        fake = self

        class Handler(_Handler):
            server_fake = fake

        httpd = self._httpd = ThreadingHTTPServer((_HOST, self.port), Handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the fake vLLM server is not serving: start() it first")
        return f"http://{_HOST}:{self._httpd.server_port}"

    def stop(self) -> None:
        self.engine.stopping.set()
        with self.engine.cond:
            self.engine.cond.notify_all()
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- shapes of the release ------------------------------------------------------------------
    def metrics_text(self) -> str:
        e = self.engine
        labels = f'engine="0",model_name="{MODEL}"'
        lines = ["# HELP vllm:engine_sleep_state Engine sleep state", "# TYPE vllm:engine_sleep_state gauge"]
        gauge = e.gauge_values()
        lines += [
            f'vllm:engine_sleep_state{{{labels},sleep_state="{k}"}} {gauge[k]:.1f}' for k in metrics.SLEEP_STATE_LABELS
        ]
        lines += [
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {float(e.generated_tokens)}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(e.running)}",
        ]
        return "\n".join(lines) + "\n"

    def usage(self, prompt_tokens: int, completion_tokens: int, cached: int) -> dict:
        details: dict[str, int | None] = {"cached_tokens": cached}
        if release_key(self.version) >= (0, 26, 0):
            details["created_cache_tokens"] = None
        details["multimodal_tokens"] = None
        return {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": details,
        }

    def completion_body(self, choices: list, usage: dict) -> dict:
        body = {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": int(time.time()),
            "model": MODEL,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
            "kv_transfer_params": None,
        }
        if release_key(self.version) >= (0, 26, 0):
            body["ec_transfer_params"] = None
        if release_key(self.version) >= (0, 25, 0):
            body["metrics"] = None
        return body


def _error(status: int, message: str, err_type: str) -> dict:
    return {"error": {"message": message, "type": err_type, "param": None, "code": status}}


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeVllm

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, status: int, body=None, content_type="application/json"):
        # The door host's call has returned before it answers: the next call may come as soon as this arrives.
        self._release_door()
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str):
        fake = self.server_fake
        parsed = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)  # as Starlette does
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        fake.requests.append({"method": method, "path": parsed.path, "query": query, "body": body})
        if parsed.path in fake.hang_paths:
            fake.engine.stopping.wait(MAX_HOLD_S)
            return
        handler = ROUTES.get((method, parsed.path))
        if handler is None or (fake.door == "http" and (method, parsed.path) in DOOR_HOST_ONLY):
            return self._send(404, {"detail": "Not Found"})
        capability = _door_needs(method, parsed.path, body)
        refused = capability and door_host.cannot(fake.door, capability)
        if refused:
            return self._send(501, _error(501, refused, "Cannot"))
        one_call = door_host.cannot(fake.door, "concurrent_calls")
        if one_call and (method, parsed.path) in DOOR_CALLS:
            with fake._door_lock:
                busy, fake._door_busy = fake._door_busy, True
            if busy:
                return self._send(501, _error(501, one_call, "Cannot"))
            self._holds_door = True
        try:
            self._dispatch(handler, fake, query, body)
        finally:
            self._release_door()

    _holds_door = False

    def _release_door(self) -> None:
        if self._holds_door:
            self._holds_door = False
            self.server_fake._door_busy = False

    def _dispatch(self, handler, fake, query, body):
        try:
            handler(self, fake, query, body)
        except _Unprocessable as e:
            self._send(422, {"detail": str(e)})
        except EngineDeadError as e:  # serve/utils engine_error_handler
            self._send(500, _error(500, str(e), "InternalServerError"))
        except (ValueError, TypeError) as e:  # create_error_response: user input errors are 400
            self._send(400, _error(400, str(e), "BadRequestError"))
        except RuntimeError as e:  # anything else the engine raises is a 500
            self._send(500, _error(500, str(e), "InternalServerError"))

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")


def _sleep(h, fake, query, body):
    level = int(query.get("level", ["1"])[0])  # the router's int(level): ValueError is a 400
    mode = query.get("mode", ["abort"])[0]
    if mode == "wait" and fake.door in thresholds.KNOWN_DIVERGENCES[WAIT_REFUSED].doors:
        # InprocClient.sleep (v1/engine/core_client.py:326): the door host answers its ValueError 400.
        raise ValueError("'wait' pause mode is not supported in inproc-engine mode")
    fake.engine.sleep(level, mode)
    h._send(200)


WAIT_REFUSED = "llm_door_wait_mode_refused"  # the in-process engine's refusal (lib/thresholds.py)


def _wake_up(h, fake, query, body):
    fake.engine.wake_up(query.get("tags") or None)
    h._send(200)


def _health(h, fake, query, body):
    h._send(503 if fake.engine.dead else 200)


def _collective_rpc(h, fake, query, body):
    if not body or "method" not in body:
        return h._send(400, {"detail": "Missing 'method' in request body"})
    method = body["method"]
    kwargs = dict(body.get("kwargs") or {})
    if method in WORKER_SLEEP:
        if body.get("args") or set(kwargs) - {WORKER_SLEEP[method]}:
            raise RuntimeError(f"Worker.{method} takes only kwargs.{WORKER_SLEEP[method]}, not {body!r}")
        if method == "sleep":
            fake.engine.worker_sleep(int(kwargs.get("level", 1)))
        else:
            fake.engine.worker_wake_up(kwargs.get("tags"))
        return h._send(200, {"results": [None]})  # one worker; Worker.sleep and wake_up return None
    if method in PUSHES:
        fake.engine.load_weights(PUSHES[method](kwargs))
        return h._send(200, {"results": [1]})  # one worker; the count of what it loaded stands for the real one's
    if method != "reload_weights":
        raise RuntimeError(
            f"the fake implements collective_rpc reload_weights, {sorted(WORKER_SLEEP)} and {sorted(PUSHES)}, "
            f"not {method!r}"
        )
    weights_path = kwargs.pop("weights_path", None)
    if kwargs or body.get("args"):  # Worker.reload_weights would reject them too
        raise RuntimeError(f"the fake's reload_weights takes only kwargs.weights_path, not {body!r}")
    fake.engine.reload_weights(weights_path)
    h._send(200, {"results": [None]})  # one worker; Worker.reload_weights returns None


# The workers' own sleep methods (gpu_worker.py Worker.sleep, Worker.wake_up) -> the kwarg each takes.
WORKER_SLEEP = {"sleep": "level", "wake_up": "tags"}


def _ipc_checkpoint(kwargs: dict) -> str:
    [(name, args)] = weight_receiver.decode_handles(kwargs["handles"])
    if name != FAKE_IPC_TENSOR:
        raise RuntimeError(f"load_ipc_tensors: the fake opens only its own trainer's handles, not {name!r}")
    return args[0]


# The worker extension's pushes (tools/launcher/weight_receiver.py) -> the checkpoint their kwargs carry.
FAKE_IPC_TENSOR = "fake:checkpoint"  # what the fake tier's trainer (fake_server.FakeTrainer) hands over
PUSHES = {
    "load_checkpoint_tensors": lambda kwargs: kwargs["checkpoint"],
    "load_ipc_tensors": _ipc_checkpoint,
}


def _load_weights(h, fake, query, body):
    """The colocated door host's POST /load_weights (TRL's push into the model in its own process)."""
    fake.engine.load_weights(body["checkpoint"])
    h._send(200, {"loaded": 1})


def _reset_prefix_cache(h, fake, query, body):
    success = fake.engine.reset_prefix_cache(_query_bool(query, "reset_running_requests", False))
    if fake.door == "http" and release_key(fake.version) < (0, 26, 0):
        return h._send(200)  # the router drops the engine's result (dev/cache/api_router.py before 0.26.0)
    h._send(200, {"success": success})


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")  # what FastAPI reads as a bool


def _query_bool(query, name: str, default: bool) -> bool:
    """A bool query parameter as FastAPI's Query(bool) reads it; anything else is its 422."""
    value = query.get(name, [None])[0]
    if value is None:
        return default
    if value.lower() not in _TRUE + _FALSE:
        raise _Unprocessable(f"{name}: Input should be a valid boolean, unable to interpret input {value!r}")
    return value.lower() in _TRUE


class _Unprocessable(Exception):
    """A query parameter FastAPI's validation refuses (422), before the route runs."""


def _pause(h, fake, query, body):
    """POST /pause (serve/dev/rlhf/api_router.py pause_generation -> AsyncLLM.pause_generation)."""
    mode = query.get("mode", ["abort"])[0]
    if mode not in PAUSE_MODES:  # PauseMode is a Literal: FastAPI refuses any other value
        raise _Unprocessable(f"mode: Input should be {', '.join(repr(m) for m in PAUSE_MODES)}, not {mode!r}")
    if _query_bool(query, "wait_for_inflight_requests", False):  # deprecated: AsyncLLM reads it as mode wait
        mode = "wait"
    fake.engine.pause(mode, _query_bool(query, "clear_cache", True))
    h._send(200, {"status": "paused"})


def _resume(h, fake, query, body):
    fake.engine.resume()
    h._send(200, {"status": "resumed"})


def _completions(h, fake, query, body):
    engine = fake.engine
    _check_sampling(body)
    ticket = engine.accept()
    stream = None
    try:
        stream = _Stream(h, fake) if body.get("stream") else None
        ran = _run(fake, body, ticket, stream, gone=lambda: _client_gone(h))
        if ran is None:
            return  # nobody to answer: the request ends with its connection
        choices, usage = ran
        if stream:
            return stream.end(usage)
        h._send(200, _body(fake, body, choices, usage))
    except EngineDeadError as e:
        if stream is None:
            raise
        stream.error(str(e))
    finally:
        engine.finish()


def _run(fake, body, ticket, stream=None, gone=lambda: False):
    """A request the engine accepted (ticket), scheduled, prefilled and decoded: (its choices, its usage), or
    None where its client went away while it waited (gone)."""
    engine = fake.engine
    n, temperature = body.get("n", 1), body.get("temperature")
    prompt, max_tokens = body["prompt"], body.get("max_tokens", 16)
    seed = body.get("seed") if temperature else None  # greedy output does not depend on the seed
    scheduled = engine.wait_scheduled(ticket, gone=gone)
    if ticket.aborted and gone():
        return None
    words, cached = engine.prefill(prompt) if scheduled else (len(prompt.split()), 0)
    choices = engine.plan(prompt, max_tokens, n, seed)
    if scheduled:
        try:
            _decode(engine, choices, ticket, stream)
        finally:
            engine.end_decode(ticket)
    else:
        for c in choices:
            c.finish_reason = "abort"
    return choices, fake.usage(words, sum(len(c.token_ids) for c in choices), cached)


def _check_sampling(body) -> None:
    if body.get("n", 1) > 1 and not body.get("temperature"):
        raise ValueError("n must be 1 when using greedy sampling.")


def _body(fake, body, choices, usage) -> dict:
    out = []
    for c in choices:
        out.append(
            {
                "index": c.index,
                "text": " ".join(f"w{t}" for t in c.token_ids),
                "logprobs": _logprobs(c) if body.get("logprobs") is not None else None,
                "finish_reason": c.finish_reason,
                "stop_reason": None,
                "token_ids": c.token_ids if body.get("return_token_ids") else None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
            }
        )
    return fake.completion_body(out, usage)


def _enqueue(h, fake, query, body):
    """The door host's POST /enqueue (vllm.LLM.enqueue): the request added and its id answered at once. Its
    engine core steps it on its own (a thread here) once scheduling runs; its body waits for
    /wait_for_completion."""
    if not isinstance(body, dict) or body.get("stream"):
        raise ValueError(f"send one /v1/completions body without stream to /enqueue, got {body!r}")
    _check_sampling(body)
    rid, ended = str(next(fake._enqueued_ids)), threading.Event()
    answer: dict[str, Any] = {}
    ticket = fake.engine.accept()

    def run():
        try:
            choices, usage = _run(fake, body, ticket)
            answer.update(_body(fake, {**body, "return_token_ids": True}, choices, usage), id=rid)
        except Exception as e:  # noqa: BLE001  wait_for_completion raises it, as LLM's loop would
            answer["error"] = e
        finally:
            fake.engine.finish()
            ended.set()

    fake.enqueued.append((rid, ended, answer))
    threading.Thread(target=run, name=f"enqueued-{rid}", daemon=True).start()
    h._send(200, {"request_ids": [rid]})


def _wait_for_completion(h, fake, query, body):
    """The door host's POST /wait_for_completion (vllm.LLM.wait_for_completion): every enqueued request's
    output once all ended, in the order they were added."""
    pending, fake.enqueued = fake.enqueued, []
    for _, ended, _ in pending:
        ended.wait(MAX_HOLD_S)
    for _, _, answer in pending:
        if "error" in answer:
            raise answer["error"]
    h._send(200, {"outputs": [answer for _, _, answer in pending]})


def _client_gone(h) -> bool:
    """The client closed its connection (it sends nothing more while it waits for the answer, so a readable
    socket with no bytes is its end): what vLLM's server listens for (serve/utils/api_utils.py
    with_cancellation, a StreamingResponse's listen_for_disconnect)."""
    sock = h.connection
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:  # reset by the client: gone as well
        return True


def _logprobs(choice) -> dict:
    words = [f"w{t}" for t in choice.token_ids]
    offsets = [sum(len(w) + 1 for w in words[:i]) for i in range(len(words))]
    return {
        "text_offset": offsets,
        "token_logprobs": choice.logprobs,
        "tokens": words,
        "top_logprobs": [{w: lp} for w, lp in zip(words, choice.logprobs)],
    }


def _without_nulls(value):
    """model_dump_json(exclude_none=True), as vLLM writes the final usage chunk of a stream."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _decode(engine, choices, ticket, stream) -> None:
    while any(c.finish_reason is None for c in choices):
        for choice, ids in engine.decode_step(choices, ticket):
            if stream:
                stream.chunk(choice, ids)


class _Stream:
    """Server-sent events as vLLM writes them: one chunk per choice per step; a choice aborted before
    its first token sends nothing (completion/serving.py skips empty deltas); usage, then [DONE]."""

    def __init__(self, h, fake):
        self.h, self.fake = h, fake
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()

    def _write(self, event) -> None:
        data = event if isinstance(event, str) else json.dumps(event)
        self.h.wfile.write(f"data: {data}\n\n".encode())
        self.h.wfile.flush()

    def chunk(self, choice, ids) -> None:
        if not ids and not choice.token_ids:
            return
        if (
            choice.finish_reason == "abort"
            and choice.index > 0
            and "abort_leaves_choices_running" in self.fake.engine.defects
        ):
            return  # the child's abort never reaches the front end
        self._write(
            {
                "id": "cmpl-fake",
                "object": "text_completion",
                "model": MODEL,
                "choices": [
                    {
                        "index": choice.index,
                        "text": "".join(f"w{t}" for t in ids),
                        "logprobs": None,
                        "finish_reason": choice.finish_reason,
                        "stop_reason": None,
                        "prompt_token_ids": None,
                        "token_ids": ids,
                    }
                ],
            }
        )

    def end(self, usage) -> None:
        self._write(
            {
                "id": "cmpl-fake",
                "object": "text_completion",
                "model": MODEL,
                "choices": [],
                "usage": _without_nulls(usage),
            }
        )
        self._write("[DONE]")

    def error(self, message: str) -> None:
        self._write(_error(500, message, "InternalServerError"))
        self._write("[DONE]")


def _door_needs(method: str, path: str, body) -> str | None:
    """The door_host.CANNOT capability a request needs beyond the door's calls, or None."""
    if path == "/v1/completions" and isinstance(body, dict) and body.get("stream"):
        return "stream"
    if path in ("/pause", "/resume", "/is_paused"):
        return "pause"
    if path == "/load_weights":
        return "in_process_load"
    if path in ("/enqueue", "/wait_for_completion"):
        return "enqueue"
    return None


# The door host's own routes, which vLLM's OpenAI server does not have.
DOOR_HOST_ONLY = {("POST", "/load_weights"), ("POST", "/enqueue"), ("POST", "/wait_for_completion")}

# The routes that call the door's engine object (door_host.py: /health, /metrics, /version and /load do not).
DOOR_CALLS = {
    ("POST", "/sleep"),
    ("POST", "/wake_up"),
    ("GET", "/is_sleeping"),
    ("POST", "/collective_rpc"),
    ("POST", "/load_weights"),
    ("POST", "/reset_prefix_cache"),
    ("POST", "/v1/completions"),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("GET", "/is_paused"),
    ("POST", "/enqueue"),
    ("POST", "/wait_for_completion"),
}

ROUTES = {
    ("POST", "/sleep"): _sleep,
    ("POST", "/wake_up"): _wake_up,
    ("GET", "/is_sleeping"): lambda h, f, q, b: h._send(200, {"is_sleeping": f.engine.is_sleeping()}),
    ("GET", "/metrics"): lambda h, f, q, b: h._send(
        200, f.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8"
    ),
    ("GET", "/load"): lambda h, f, q, b: h._send(200, {"server_load": f.engine.load}),
    ("GET", "/version"): lambda h, f, q, b: h._send(200, {"version": f.version}),
    ("GET", "/health"): _health,
    ("POST", "/collective_rpc"): _collective_rpc,
    ("POST", "/load_weights"): _load_weights,
    ("POST", "/reset_prefix_cache"): _reset_prefix_cache,
    ("POST", "/v1/completions"): _completions,
    ("POST", "/pause"): _pause,
    ("POST", "/resume"): _resume,
    ("POST", "/enqueue"): _enqueue,
    ("POST", "/wait_for_completion"): _wait_for_completion,
    ("GET", "/is_paused"): lambda h, f, q, b: h._send(200, {"is_paused": f.engine.is_paused()}),
}
