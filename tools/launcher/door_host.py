"""The door host: vLLM's in-process front doors (`vllm.LLM`, `AsyncLLM`) behind the HTTP API the suite speaks.

RL frameworks do not call vLLM's OpenAI server: TRL holds a `vllm.LLM` and calls sleep / wake_up /
collective_rpc on it; NeMo-RL and verl hold an `AsyncLLM` and await the same methods, plus
reset_prefix_cache and pause_generation / resume_generation. So that the suite's tests and state walk,
which talk HTTP through tests/core/client.py, drive those doors unchanged, this process builds
the door's engine object and answers the subset of the server's API that the client uses, each endpoint
by calling the door's own Python method (never vLLM's routers):

    python -m tools.launcher.door_host --door {llm,async_llm} <the vLLM server's flags: --model X --port N ...>

An endpoint answers what the method returned, and a method that raised answers with its message and the
status vLLM's server gives that exception (400 for a ValueError, else 500), so a defect of the in-process
path shows through HTTP. What a door cannot do is listed once, in CANNOT, and
answered 501 with the reason: never imitated. The engine comes from ENGINE_FACTORY (--engine_factory), so
the engine tier can host its CPU engines; that module is imported before vLLM, since it may have to pin
vLLM's platform first.
"""

import argparse
import asyncio
import concurrent.futures
import dataclasses
import importlib
import inspect
import json
import queue
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

DOORS = ("llm", "async_llm", "llm_colocate")
# vLLM's own weight-transfer API (serve/dev/rlhf/api_router.py): route -> the body key it needs, if any.
WEIGHT_TRANSFER = {
    "init_weight_transfer_engine": "init_info",
    "start_weight_update": None,
    "update_weights": "update_info",
    "finish_weight_update": None,
}
WITH_BODY = {route for route, key in WEIGHT_TRANSFER.items() if key}
# vllm.LLM as TRL's colocate mode builds it (trl/generation/vllm_generation.py:334-370): the engine in the trainer's own
# process (distributed_executor_backend="external_launcher", VLLM_ENABLE_V1_MULTIPROCESSING=0, so vLLM
# takes InprocClient), a torch.distributed world of one that the trainer's launcher set up.
COLOCATE = "llm_colocate"
NOT_IMPLEMENTED = 501
GRACEFUL_STOP_S = 5  # what a stop waits for open requests before it ends them

IN_PROCESS_LOAD = (
    "the door's engine core runs in a process of its own, so no tensor of this process reaches the model's "
    "load_weights: push through collective_rpc and the worker extension instead"
)
# door -> {capability: why the door cannot provide it}. A request that needs one answers 501 with the reason.
CANNOT: dict[str, dict[str, str]] = {
    "llm": {
        "stream": "vllm.LLM.generate returns finished outputs only; the offline door has no streaming API",
        "concurrent_calls": (
            "vllm.LLM runs one call at a time on its caller's thread (TRL's trainer loop); a second call "
            "while one is in flight, such as a /sleep racing a completion, cannot be made through it"
        ),
        "pause": "vllm.LLM has no pause_generation / resume_generation / is_paused; LLM.sleep(level=0) is its pause",
        "in_process_load": IN_PROCESS_LOAD,
    },
    "async_llm": {
        "in_process_load": IN_PROCESS_LOAD,
        "enqueue": (
            "AsyncLLM has no enqueue / wait_for_completion: a request is its generate() coroutine, which the host "
            "awaits beside the door's other calls, so a request sent while scheduling is paused waits in "
            "/v1/completions"
        ),
    },
}
CANNOT[COLOCATE] = {k: v for k, v in CANNOT["llm"].items() if k != "in_process_load"}

# The /v1/completions fields the host maps onto SamplingParams; any other field is refused (400), since
# ignoring it would answer a request other than the one sent.
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "ignore_eos", "n", "seed", "logprobs")
ACCEPTED_FIELDS = (*SAMPLING_FIELDS, "prompt", "model", "stream", "stream_options", "return_token_ids")


class Cannot(Exception):
    """A request needs a capability its door lacks (CANNOT)."""

    def __init__(self, door: str, capability: str) -> None:
        super().__init__(f"the {door} door cannot serve this: {capability}: {CANNOT[door][capability]}")
        self.capability = capability


def cannot(door: str, capability: str) -> str | None:
    """Why `door` cannot provide capability (CANNOT), as the host answers it; None if it can (http: always)."""
    return str(Cannot(door, capability)) if capability in CANNOT.get(door, {}) else None


class BadRequest(ValueError):
    """A request the host cannot turn into a call of the door (a malformed parameter or body)."""


def build_engine(door: str, server_argv: list[str]) -> Any:
    """The production factory: the door's engine object from the server's flags (parsed by vLLM's own server
    parser), as an RL framework builds it. For `llm`, LLM(**the EngineArgs fields the flags set) with stats
    logging as the flags say (LLM turns it off unless told); for `async_llm`, AsyncLLM.from_engine_args,
    called on the serving loop it binds to."""
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(server_argv)
    if door == COLOCATE:
        _as_colocated_trainer()
    if door in ("llm", COLOCATE):
        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs

        engine_args = EngineArgs.from_cli_args(args)
        defaults = EngineArgs(model=engine_args.model)
        kwargs = {
            f.name: getattr(engine_args, f.name)
            for f in dataclasses.fields(engine_args)
            if getattr(engine_args, f.name) != getattr(defaults, f.name)
        }
        kwargs["model"] = engine_args.model
        kwargs["disable_log_stats"] = engine_args.disable_log_stats
        if door == COLOCATE:
            kwargs["distributed_executor_backend"] = "external_launcher"
        return LLM(**kwargs)
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs.from_cli_args(args), usage_context=UsageContext.ENGINE_CONTEXT)


def _as_colocated_trainer() -> None:
    """This process as TRL's trainer is when it builds its colocated engine: a torch.distributed world of
    one (its launcher, accelerate or torchrun, exported these), and vLLM's engine kept in this process."""
    import os
    import socket

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1")):
        os.environ[name] = value
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)


# (door, the server's flags) -> the door's engine object, or an awaitable of it (awaited on the serving loop).
ENGINE_FACTORY: Callable[[str, list[str]], Any] = build_engine


class CallThread:
    """One daemon thread that runs calls in order. Daemon, unlike a ThreadPoolExecutor's, which the interpreter
    joins at exit: a call that never returns (LLM.generate while the scheduler is paused at level 0 steps until
    its request ends) must not keep the host from stopping."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, future = self._calls.get()
            if fn is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001  the caller's to see, as a ThreadPoolExecutor hands it on
                future.set_exception(e)

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((fn, future))
        return future

    def stop(self) -> None:
        self._calls.put((None, None))


class LlmDoor:
    """vllm.LLM: each call runs on one thread of its own, as a trainer's loop makes them, one at a time."""

    def __init__(self, llm, name: str = "llm") -> None:
        self.name = name
        self.llm = llm
        self._thread = CallThread("llm-door")
        self._busy = False
        self._dead: BaseException | None = None

    async def _call(self, fn, *args, **kwargs):
        # Checked and set on the event loop's thread, with no await between: atomic for the handlers.
        if self._busy:
            raise Cannot(self.name, "concurrent_calls")
        self._busy = True
        try:
            return await asyncio.wrap_future(self._thread.submit(lambda: fn(*args, **kwargs)))
        except Exception as e:
            from vllm.v1.engine.exceptions import EngineDeadError

            if isinstance(e, EngineDeadError):
                self._dead = e
            raise
        finally:
            self._busy = False

    async def check_health(self) -> None:
        # LLM has no health check; the host knows only whether a call of it raised EngineDeadError.
        if self._dead is not None:
            raise self._dead

    async def sleep(self, level: int, mode: str) -> Any:
        return await self._call(self.llm.sleep, level=level, mode=mode)

    async def wake_up(self, tags: list[str] | None) -> Any:
        return await self._call(self.llm.wake_up, tags)

    async def is_sleeping(self) -> Any:
        # LLM itself has no is_sleeping; its engine's is the one TRL reads (llm.llm_engine.is_sleeping()).
        return await self._call(self.llm.llm_engine.is_sleeping)

    async def reset_prefix_cache(self, reset_running_requests: bool, reset_connector: bool) -> Any:
        return await self._call(self.llm.reset_prefix_cache, reset_running_requests, reset_connector)

    async def collective_rpc(self, method: str, timeout: float | None, args: tuple, kwargs: dict) -> Any:
        return await self._call(self.llm.collective_rpc, method, timeout, args, kwargs)

    async def pause(self, mode: str, clear_cache: bool) -> Any:
        raise Cannot(self.name, "pause")

    async def resume(self) -> Any:
        raise Cannot(self.name, "pause")

    async def is_paused(self) -> Any:
        raise Cannot(self.name, "pause")

    async def generate(self, prompt: dict, params, request_id: str):
        [output] = await self._call(self.llm.generate, [prompt], params, use_tqdm=False)
        return output

    async def enqueue(self, prompt: dict, params) -> list:
        # LLM.enqueue adds the request and returns at once (entrypoints/llm.py): the door's call is free again,
        # so a request can wait while scheduling is paused and a wake still follow it.
        return await self._call(self.llm.enqueue, [prompt], params, use_tqdm=False)

    async def wait_for_completion(self) -> list:
        # Steps the engine until every request ended (offline_utils.py _run_engine): the outputs of every
        # request enqueued since the last call, in the order they were added.
        return await self._call(self.llm.wait_for_completion, use_tqdm=False)

    async def weight_transfer(self, route: str, body: dict) -> Any:
        # LLM's methods take the request as the route's body (a dict with init_info or update_info).
        method = getattr(self.llm, route)
        return await self._call(method, body) if route in WITH_BODY else await self._call(method)

    async def load_weights(self, checkpoint: str) -> int:
        if self.name != COLOCATE:
            raise Cannot(self.name, "in_process_load")
        return await self._call(self._load_weights, checkpoint)

    def _load_weights(self, checkpoint: str) -> int:
        """TRL's push (trl/generation/vllm_generation.py:387-392 _push_param_to_vllm): the trainer's tensors,
        on the GPU in this process, straight into the model's load_weights, past the executor and
        collective_rpc. The tensors are this stand-in trainer's only: given back once loaded, so the door's
        device bytes stay the engine's."""
        import torch

        from tools.launcher.weight_receiver import checkpoint_tensors, give_back_host_memory, load_counted

        # TRL's own attribute path (the executor's WorkerWrapperBase hands model_runner on to its worker).
        model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        weights = checkpoint_tensors(checkpoint, torch.device("cuda", torch.cuda.current_device()))
        try:
            return load_counted(model, weights, torch.accelerator.synchronize)
        finally:
            del weights
            torch.accelerator.empty_cache()
            give_back_host_memory()

    def stream(self, prompt: dict, params, request_id: str) -> AsyncIterator:
        raise Cannot(self.name, "stream")

    def shutdown(self) -> None:
        # LLM has no shutdown of its own: its engine core lives in this process and ends with it.
        self._thread.stop()


class AsyncLlmDoor:
    """AsyncLLM: its coroutines awaited on the serving loop, which built it, as a rollout actor awaits them."""

    name = "async_llm"

    def __init__(self, engine) -> None:
        self.engine = engine

    async def check_health(self) -> None:
        await self.engine.check_health()

    async def sleep(self, level: int, mode: str) -> Any:
        return await self.engine.sleep(level, mode)

    async def wake_up(self, tags: list[str] | None) -> Any:
        return await self.engine.wake_up(tags)

    async def is_sleeping(self) -> Any:
        return await self.engine.is_sleeping()

    async def reset_prefix_cache(self, reset_running_requests: bool, reset_connector: bool) -> Any:
        return await self.engine.reset_prefix_cache(reset_running_requests, reset_connector)

    async def collective_rpc(self, method: str, timeout: float | None, args: tuple, kwargs: dict) -> Any:
        return await self.engine.collective_rpc(method, timeout, args, kwargs)

    async def pause(self, mode: str, clear_cache: bool) -> Any:
        return await self.engine.pause_generation(mode=mode, clear_cache=clear_cache)

    async def resume(self) -> Any:
        return await self.engine.resume_generation()

    async def is_paused(self) -> Any:
        return await self.engine.is_paused()

    async def weight_transfer(self, route: str, body: dict) -> Any:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest, WeightTransferUpdateRequest

        method = getattr(self.engine, route)
        if route == "init_weight_transfer_engine":
            return await method(WeightTransferInitRequest(init_info=body["init_info"]))
        if route == "update_weights":
            return await method(WeightTransferUpdateRequest(update_info=body["update_info"]))
        return await method()

    async def load_weights(self, checkpoint: str) -> int:
        raise Cannot(self.name, "in_process_load")

    async def enqueue(self, prompt: dict, params) -> list:
        raise Cannot(self.name, "enqueue")

    async def wait_for_completion(self) -> list:
        raise Cannot(self.name, "enqueue")

    async def generate(self, prompt: dict, params, request_id: str):
        from vllm.sampling_params import RequestOutputKind

        # The one output with every choice, as vLLM's server asks for a request that does not stream
        # (CompletionRequest.to_sampling_params); with the default CUMULATIVE kind and n > 1 each output
        # holds only the choice that moved, so the last one would lack the others.
        params.output_kind = RequestOutputKind.FINAL_ONLY
        last = None
        async for out in self.engine.generate(prompt, params, request_id=request_id):
            last = out
        return last

    def stream(self, prompt: dict, params, request_id: str) -> AsyncIterator:
        from vllm.sampling_params import RequestOutputKind

        params.output_kind = RequestOutputKind.DELTA
        return self.engine.generate(prompt, params, request_id=request_id)

    def shutdown(self) -> None:
        self.engine.shutdown()  # ends the engine core's process


def door_of(name: str, engine) -> LlmDoor | AsyncLlmDoor:
    return AsyncLlmDoor(engine) if name == "async_llm" else LlmDoor(engine, name)


# --- /v1/completions: the body to a door call, the door's RequestOutput to the body the client reads -----------
def prompt_of(body: dict) -> dict:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return {"prompt": prompt}
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return {"prompt_token_ids": prompt}
    raise BadRequest(f"prompt must be a string or a list of token ids, got {prompt!r}: send one prompt per request")


def sampling_params_of(body: dict):
    from vllm import SamplingParams

    unknown = sorted(set(body) - set(ACCEPTED_FIELDS))
    if unknown:
        raise BadRequest(
            f"fields {unknown} are not mapped by the door host (it maps {list(ACCEPTED_FIELDS)}): drop them"
        )
    if body.get("return_token_ids") is False:
        raise BadRequest("the door host always returns token ids: send return_token_ids true or leave it out")
    return SamplingParams(**{k: body[k] for k in SAMPLING_FIELDS if k in body})


def choice_of(completion, with_logprobs: bool) -> dict:
    logprobs = None
    if with_logprobs:
        # The sampled token's logprob at each position, from the door's per-position {token: Logprob}.
        per_token = completion.logprobs
        token_logprobs = (
            None
            if per_token is None
            else [lp[t].logprob for t, lp in zip(completion.token_ids, per_token, strict=True)]
        )
        logprobs = {"token_logprobs": token_logprobs}
    return {
        "index": completion.index,
        "text": completion.text,
        "token_ids": list(completion.token_ids),
        "logprobs": logprobs,
        "finish_reason": completion.finish_reason,
    }


def usage_of(output, prompt_tokens_details: bool) -> dict:
    prompt_tokens = len(output.prompt_token_ids or ())
    completion_tokens = sum(len(c.token_ids) for c in output.outputs)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if prompt_tokens_details:  # as vLLM's server: reported only with --enable-prompt-tokens-details
        usage["prompt_tokens_details"] = {"cached_tokens": output.num_cached_tokens}
    return usage


# --- the HTTP app -------------------------------------------------------------------------------------------
def build_app(door, args: argparse.Namespace):
    import prometheus_client
    import vllm
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    app = FastAPI()
    model_name = (args.served_model_name or [args.model])[0]
    details = args.enable_prompt_tokens_details

    def error(status: int, e: BaseException, kind: str = "") -> JSONResponse:
        body = {"message": str(e) or repr(e), "type": kind or type(e).__name__, "param": None, "code": status}
        return JSONResponse({"error": body}, status)

    @app.exception_handler(Cannot)
    async def cannot(request: Request, e: Cannot):
        return error(NOT_IMPLEMENTED, e)

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, e: BadRequest):
        return error(400, e)

    @app.exception_handler(Exception)
    async def raised(request: Request, e: Exception):
        # What the door's method raised, with the status vLLM's server gives it: every supported release
        # answers a ValueError 400 (its exception_handler), anything else 500.
        if isinstance(e, ValueError):
            return error(400, e, "BadRequestError")
        return error(500, e)

    @app.get("/health")
    async def health():
        try:
            await door.check_health()
        except Exception as e:  # noqa: BLE001  an unhealthy engine is a 503, as vLLM's /health answers
            return error(503, e)
        return Response(status_code=200)

    @app.get("/version")
    async def version():
        return JSONResponse({"version": vllm.__version__})

    @app.get("/metrics")
    async def metrics():
        # What vLLM's stat loggers recorded in this process (the gauge exists only with stats logging on).
        return Response(prometheus_client.generate_latest(), media_type=prometheus_client.CONTENT_TYPE_LATEST)

    # /load as vLLM's server counts it (its load_aware_call decorator, --enable-server-load-tracking): the
    # completion requests this HTTP front has taken and not yet answered to the end, streams included. The
    # count belongs to the front, not to the door, so the host keeps it as vLLM's server does.
    in_flight = [0]

    @app.get("/load")
    async def load():
        return JSONResponse({"server_load": in_flight[0]})

    @app.post("/sleep")
    async def sleep(request: Request):
        level = request.query_params.get("level", "1")
        try:
            level_int = int(level)
        except ValueError:
            raise BadRequest(f"level must be an integer, got {level!r}") from None
        await door.sleep(level_int, request.query_params.get("mode", "abort"))
        return Response(status_code=200)

    @app.post("/wake_up")
    async def wake_up(request: Request):
        tags = request.query_params.getlist("tags") or None  # none given: wake every tag, as vLLM's router
        await door.wake_up(tags)
        return Response(status_code=200)

    @app.get("/is_sleeping")
    async def is_sleeping():
        return JSONResponse({"is_sleeping": await door.is_sleeping()})

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache(request: Request):
        q = request.query_params
        reset_running = q.get("reset_running_requests", "false").lower() == "true"
        reset_external = q.get("reset_external", "false").lower() == "true"
        return JSONResponse({"success": await door.reset_prefix_cache(reset_running, reset_external)})

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request):
        try:
            body = await request.json()
        except json.JSONDecodeError as e:
            raise BadRequest(
                f"the body is not JSON ({e}): send {{'method': name, 'args': [], 'kwargs': {{}}}}"
            ) from None
        if not isinstance(body, dict) or body.get("method") is None:
            raise BadRequest(f"no 'method' in the body {body!r}: name the worker method to call")
        results = await door.collective_rpc(
            body["method"], body.get("timeout"), tuple(body.get("args", [])), body.get("kwargs", {})
        )
        if results is None:
            return Response(status_code=200)
        # As vLLM's router: JSON-able results as they are, anything else as its str.
        return JSONResponse({"results": [r if r is None or isinstance(r, dict | list) else str(r) for r in results]})

    @app.post("/pause")
    async def pause(request: Request):
        q = request.query_params
        await door.pause(q.get("mode", "abort"), q.get("clear_cache", "true").lower() == "true")
        return JSONResponse({"status": "paused"})

    @app.post("/resume")
    async def resume():
        await door.resume()
        return JSONResponse({"status": "resumed"})

    @app.get("/is_paused")
    async def is_paused():
        return JSONResponse({"is_paused": await door.is_paused()})

    def weight_transfer_route(route: str, key: str | None):
        async def call(request: Request):
            body = await request.json() if key else {}
            if key and (not isinstance(body, dict) or body.get(key) is None):
                raise BadRequest(f"no {key!r} in the body of /{route}: send {{{key!r}: {{...}}}}")
            await door.weight_transfer(route, body)
            return JSONResponse({"message": f"{route} done"})

        app.post(f"/{route}")(call)

    for route, key in WEIGHT_TRANSFER.items():
        weight_transfer_route(route, key)

    @app.post("/load_weights")
    async def load_weights(request: Request):
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("checkpoint"), str):
            raise BadRequest(f"no 'checkpoint' in the body {body!r}: name the checkpoint directory to load")
        return JSONResponse({"loaded": await door.load_weights(body["checkpoint"])})

    @app.post("/enqueue")
    async def enqueue(request: Request):
        """vllm.LLM.enqueue of one /v1/completions body (no stream): the request ids it added."""
        body = await request.json()
        if not isinstance(body, dict) or body.get("stream"):
            raise BadRequest(f"send one /v1/completions body without stream to /enqueue, got {body!r}")
        return JSONResponse({"request_ids": list(await door.enqueue(prompt_of(body), sampling_params_of(body)))})

    @app.post("/wait_for_completion")
    async def wait_for_completion():
        """vllm.LLM.wait_for_completion: each enqueued request's output as a completion's body, in order."""
        outputs = await door.wait_for_completion()
        return JSONResponse(
            {
                "outputs": [
                    {
                        "id": o.request_id,
                        "object": "text_completion",
                        "model": model_name,
                        "choices": [choice_of(c, False) for c in o.outputs],
                        "usage": usage_of(o, details),
                    }
                    for o in outputs
                ]
            }
        )

    @app.post("/v1/completions")
    async def completions(request: Request):
        in_flight[0] += 1
        streaming = False
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise BadRequest(f"the body must be a JSON object, got {body!r}")
            prompt, params = prompt_of(body), sampling_params_of(body)
            request_id = f"cmpl-{uuid.uuid4().hex}"
            head = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model_name}
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                # Raises Cannot before the 200 starts where the door has no stream.
                outputs = door.stream(prompt, params, request_id)
                events = _sse(outputs, head, include_usage, details, on_end=_ended)
                streaming = True
                return StreamingResponse(events, media_type="text/event-stream")
            output = await door.generate(prompt, params, request_id)
            choices = [choice_of(c, body.get("logprobs") is not None) for c in output.outputs]
            return JSONResponse({**head, "choices": choices, "usage": usage_of(output, details)})
        finally:
            if not streaming:  # a stream ends in _sse
                _ended()

    def _ended() -> None:
        in_flight[0] -= 1

    return app


async def _sse(outputs: AsyncIterator, head: dict, include_usage: bool, details: bool, on_end: Callable[[], None]):
    """The door's delta outputs as the server's SSE events, the usage of the whole stream last when asked; an
    exception mid-stream is an error event, as vLLM's server sends one, then [DONE]. on_end runs once the
    stream is over, sent to the end or dropped by its client."""
    try:
        async for event in _events(outputs, head, include_usage, details):
            yield event
    finally:
        on_end()


async def _events(outputs: AsyncIterator, head: dict, include_usage: bool, details: bool):
    first, completion_tokens = None, 0
    try:
        async for out in outputs:
            first = first or out
            completion_tokens += sum(len(c.token_ids) for c in out.outputs)
            chunk = {**head, "choices": [choice_of(c, False) for c in out.outputs]}
            yield f"data: {json.dumps(chunk)}\n\n"
        if include_usage and first is not None:
            prompt_tokens = len(first.prompt_token_ids or ())
            usage: dict[str, Any] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
            if details:
                usage["prompt_tokens_details"] = {"cached_tokens": first.num_cached_tokens}
            yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n"
    except Exception as e:  # noqa: BLE001  the door's error, reported in the stream
        yield f"data: {json.dumps({'error': {'message': str(e) or repr(e), 'type': type(e).__name__}})}\n\n"
    yield "data: [DONE]\n\n"


# --- the process --------------------------------------------------------------------------------------------
def _host_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Every other flag is the vLLM server's, handed to the engine factory.",
    )
    parser.add_argument("--door", choices=DOORS, required=True, help="the in-process front door to host")
    parser.add_argument(
        "--engine_factory",
        default=None,
        help="module:function that builds the door's engine from (door, the server's flags), instead of "
        "vLLM's own constructors; its module is imported before vLLM (the engine tier pins vLLM's platform there)",
    )
    return parser


def _front_end_parser() -> argparse.ArgumentParser:
    """The server flags the host itself serves by; vLLM's parser reads them all again in the factory."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model", required=True, help="the checkpoint, also the model name answered")
    parser.add_argument("--host", default=None, help="the address to listen on (default: every interface)")
    parser.add_argument("--port", type=int, default=8000, help="the port to listen on")
    parser.add_argument("--served-model-name", nargs="+", default=None, help="the model name answered")
    parser.add_argument(
        "--enable-prompt-tokens-details", action="store_true", help="report usage.prompt_tokens_details"
    )
    return parser


def resolve_factory(spec: str) -> Callable[[str, list[str]], Any]:
    module, sep, function = spec.partition(":")
    if not sep or not module or not function:
        raise SystemExit(f"--engine_factory {spec!r} is not module:function: name a function, e.g. pkg.mod:build")
    return getattr(importlib.import_module(module), function)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the host's and front end's flags, the server's flags for the factory)."""
    host, server_argv = _host_parser().parse_known_args(argv)
    front, _ = _front_end_parser().parse_known_args(server_argv)
    return argparse.Namespace(**vars(host), **vars(front)), server_argv


async def serve(args: argparse.Namespace, server_argv: list[str]) -> None:
    import uvicorn

    factory = resolve_factory(args.engine_factory) if args.engine_factory else ENGINE_FACTORY
    engine = factory(args.door, server_argv)
    if inspect.isawaitable(engine):
        engine = await engine
    door = door_of(args.door, engine)
    try:
        config = uvicorn.Config(
            build_app(door, args),
            host=args.host or "0.0.0.0",
            port=args.port,
            log_level="warning",
            lifespan="off",
            # A request whose door call never returns (see CallThread) must not hold the stop forever.
            timeout_graceful_shutdown=GRACEFUL_STOP_S,
        )
        await uvicorn.Server(config).serve()
    finally:
        door.shutdown()


def main(argv: list[str] | None = None) -> None:
    args, server_argv = parse_args(sys.argv[1:] if argv is None else argv)
    asyncio.run(serve(args, server_argv))


if __name__ == "__main__":
    main()
