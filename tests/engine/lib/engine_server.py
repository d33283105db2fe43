"""EngineServer: the engine tier's most server-like setup. vLLM 0.26.0's EngineCoreProc with its real
busy loop in a thread, around the fake worker, and vLLM's own routers (/sleep, /wake_up, /is_sleeping;
/reset_prefix_cache; /collective_rpc; /pause, /resume, /is_paused) over HTTP on a QueueEngineClient that
stands for AsyncLLM.
Requests go to the engine core's input queue as EngineCoreRequests, as the front end's input socket
thread puts them there. test_http_routes.py and the state walk (engine_walk.py) run on it.

InFlightGate makes a request in flight deterministic: the request's second forward pass waits until
the next call is on the engine's input queue, so a /sleep lands mid-decode however loaded the machine is.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time

from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: pins the platform)
from tests.engine.fakes.output_queue import RecordingOutputQueue
from tests.engine.lib.engine_client import QueueEngineClient
from tests.engine.lib.engines import WORKER_CLS, Built, build_engine_core_proc
from tests.engine.lib.loop import BackgroundLoop
from tests.core import liveness
from vllm.entrypoints.serve.dev.cache.api_router import attach_router as attach_cache_router
from vllm.entrypoints.serve.dev.rlhf.api_router import attach_router as attach_rlhf_router
from vllm.entrypoints.serve.dev.rpc.api_router import attach_router as attach_rpc_router
from vllm.entrypoints.serve.dev.sleep.api_router import attach_router as attach_sleep_router
from vllm.sampling_params import SamplingParams
from vllm.v1.engine import EngineCoreRequest, EngineCoreRequestType, FinishReason
from vllm.v1.engine.core import EngineCoreProc
from vllm.v1.engine.exceptions import EngineDeadError

WAIT_S = 30.0  # any wait for the engine; the fake worker's steps take microseconds
POLL_S = 0.0005


class OutputRecord(RecordingOutputQueue):
    """The output queue, also keeping each request's stream: (tokens, finish reason) per output, and
    the prompt tokens its first output reports cached (PrefillStats, what usage.cached_tokens reads)."""

    def __init__(self, timeline) -> None:
        super().__init__(timeline)
        self.streams: dict[str, list] = collections.defaultdict(list)
        self.cached: dict[str, int] = {}
        self.dead = False
        self._changed = threading.Condition()

    def put(self, item, block=True, timeout=None) -> None:
        with self._changed:
            if isinstance(item, tuple):
                for out in item[1].outputs or ():
                    self.streams[out.request_id].append((list(out.new_token_ids), out.finish_reason))
                    if out.prefill_stats is not None:
                        self.cached[out.request_id] = out.prefill_stats.num_local_cached_tokens
            elif item == EngineCoreProc.ENGINE_CORE_DEAD:
                self.dead = True
            self._changed.notify_all()
        super().put(item, block, timeout)

    def end(self, request_id: str) -> FinishReason | None:
        with self._changed:
            stream = self.streams.get(request_id, [])
            return stream[-1][1] if stream else None

    def tokens(self, request_id: str) -> list[int]:
        with self._changed:
            return [t for tokens, _ in self.streams.get(request_id, []) for t in tokens]

    def wait_ended(self, request_ids, timeout_s: float = WAIT_S) -> bool:
        """True once every request has a finish reason; False on timeout or if the engine died."""
        with self._changed:
            return (
                self._changed.wait_for(lambda: self.dead or all(self._ended(r) for r in request_ids), timeout_s)
                and not self.dead
            )

    def _ended(self, request_id: str) -> bool:
        stream = self.streams.get(request_id)
        if not stream:
            return False
        return stream[-1][1] is not None


class RouteClient(QueueEngineClient):
    """QueueEngineClient with the other AsyncLLM calls the cache, RPC and RLHF routes make, each one utility
    call on the engine core, as AsyncLLM.reset_prefix_cache, collective_rpc, pause_generation,
    resume_generation and is_paused do (async_llm.py:750-801; pause_generation's renderer cache reset is
    left out: no multimodal inputs); it keeps
    the last failed call's message, which the routes' 500 answers do not carry, and the liveness.NoAnswer
    of a call the engine never answered (the route answers it with a 500 too: EngineServer raises it)."""

    last_failure: str | None = None
    unanswered: liveness.NoAnswer | None = None

    async def _call(self, method: str, *args):
        try:
            return await super()._call(method, *args)
        except liveness.NoAnswer as e:
            self.last_failure, self.unanswered = f"{method}{args}: {e}", e
            raise
        except Exception as e:
            self.last_failure = f"{method}{args}: {e}"
            raise

    async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        return await self._call("reset_prefix_cache", reset_running_requests, reset_connector)

    async def collective_rpc(
        self, method: str, timeout: float | None = None, args: tuple = (), kwargs: dict | None = None
    ):
        return await self._call("collective_rpc", method, timeout, args, kwargs)

    async def pause_generation(
        self, *, mode: str = "abort", wait_for_inflight_requests: bool | None = None, clear_cache: bool = True
    ) -> None:
        await self._call("pause_scheduler", "wait" if wait_for_inflight_requests else mode, clear_cache)

    async def resume_generation(self) -> None:
        await self._call("resume_scheduler")

    async def is_paused(self) -> bool:
        return await self._call("is_scheduler_paused")


class InFlightGate:
    """Holds one request's second forward pass until a call is waiting on the engine's input queue.

    Wraps the fake worker's execute_model (the executor looks the method up on the worker by name).
    Armed for a request, it lets the prefill through, then makes the next forward of the request wait
    until the /sleep the test sends is on the input queue (or already handled: the scheduler paused),
    once. After GATE_S it lets go anyway and says so (timed_out): the walk then cannot tell that the
    sleep landed mid-decode, a Precondition, not a verdict.
    """

    GATE_S = 10.0

    def __init__(self, built: Built) -> None:
        self._proc = built.engine
        self._worker = built.worker
        self._original = built.worker.execute_model
        self._armed: str | None = None
        self._late_sent: threading.Event | None = None
        self._forwards = 0
        self.timed_out = False
        built.worker.execute_model = self._execute_model  # type: ignore[method-assign]  # the gate

    def arm(self, request_id: str, late_sent: threading.Event | None = None) -> None:
        """late_sent: also hold the request's forwards after the pause (a wait sleep's drain) until the
        event is set, so a request sent during the drain arrives before the drain ends."""
        self._armed, self._forwards, self.timed_out = request_id, 0, False
        self._late_sent = late_sent

    def disarm(self) -> None:
        self._armed = None
        self._late_sent = None

    def _execute_model(self, scheduler_output):
        rid = self._armed
        if rid is not None and rid in scheduler_output.num_scheduled_tokens:
            self._forwards += 1
            if self._forwards >= 2:
                deadline = time.monotonic() + self.GATE_S
                while self._proc.input_queue.empty() and not self._proc.is_scheduler_paused():
                    if time.monotonic() > deadline:
                        self.timed_out = True
                        break
                    time.sleep(POLL_S)
                late = self._late_sent
                if late is None or late.is_set() or self._proc.is_scheduler_paused():
                    self._armed = None
                if late is not None and self._proc.is_scheduler_paused() and not late.wait(self.GATE_S):
                    self.timed_out = True
        return self._original(scheduler_output)


class EngineServer:
    """EngineCoreProc's busy loop in a thread behind vLLM's own sleep, cache and RPC routers."""

    def __init__(self, model_dir: str, worker_cls: str = WORKER_CLS, worker_extension_cls: str = "") -> None:
        self.built = build_engine_core_proc(model_dir, worker_cls, worker_extension_cls)
        self.proc = self.built.engine
        self.timeline = self.built.timeline
        self.worker = self.built.worker
        self.record = OutputRecord(self.timeline)  # replaces the builder's queue before anything ran
        self.proc.output_queue = self.record
        self.gate = InFlightGate(self.built)
        self.loop = BackgroundLoop(self.proc).start()
        self.client = RouteClient(self.proc, loop_error=lambda: self.loop.error)
        app = FastAPI()
        for attach in (attach_sleep_router, attach_cache_router, attach_rpc_router, attach_rlhf_router):
            attach(app)
        app.state.engine_client = self.client
        self._http_cm = TestClient(app, raise_server_exceptions=False)
        self.http = self._http_cm.__enter__()
        self._ids = itertools.count()

    def close(self) -> None:
        try:
            self._http_cm.__exit__(None, None, None)
        finally:
            try:
                self.loop.stop()
            finally:
                self.client.close()
                self.built.shutdown()

    # --- the boundary's calls ---------------------------------------------------------------------
    def post(self, path: str, params=None, json=None):
        return self._route("POST", path, params=params, json=json)

    def get(self, path: str, params=None):
        return self._route("GET", path, params=params)

    def _route(self, method: str, path: str, **kw):
        """The route's answer; a 500 for an engine call that got no answer within CALL_TIMEOUT_S is that
        call's liveness.NoAnswer instead (errored, api.answers), never an error answer for api.status."""
        self.client.unanswered = None
        response = self.http.request(method, path, **kw)
        unanswered = self.client.unanswered
        if unanswered is not None and response.status_code != 200:
            raise liveness.NoAnswer(f"{method} {path}: {unanswered}")
        return response

    def http_is_sleeping(self):
        response = self.get("/is_sleeping")
        return response.json()["is_sleeping"] if response.status_code == 200 else f"HTTP {response.status_code}"

    def http_is_paused(self):
        response = self.get("/is_paused")
        return response.json()["is_paused"] if response.status_code == 200 else f"HTTP {response.status_code}"

    def settle(self) -> None:
        """Returns once the busy loop handled everything sent so far and had a chance to step (the
        first utility call is answered with the queued input, the second after that step), or once it
        died: the caller reads alive()."""
        try:
            self.client.call("is_scheduler_paused")
            self.client.call("is_scheduler_paused")
        except EngineDeadError:
            pass

    def send(self, prompt: list[int], max_tokens: int, seed: int | None = None, kind: str = "req") -> str:
        """What the input socket thread does with an ADD: preprocess, then queue it."""
        rid = f"{kind}-{next(self._ids)}"
        params = SamplingParams(
            max_tokens=max_tokens, ignore_eos=True, seed=seed, temperature=1.0 if seed is not None else 0.0
        )
        request = EngineCoreRequest(
            request_id=rid,
            prompt_token_ids=prompt,
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
        )
        self.proc.input_queue.put_nowait((EngineCoreRequestType.ADD, self.proc.preprocess_add_request(request)))
        return rid

    def abort(self, request_ids: list[str]) -> None:
        """What the front end sends when its client goes away (EngineCoreRequestType.ABORT)."""
        self.proc.input_queue.put_nowait((EngineCoreRequestType.ABORT, request_ids))

    def alive(self) -> BaseException | None:
        """The busy loop's fatal error, if it died (the fake worker raises on released memory)."""
        if self.loop.error is not None:
            return self.loop.error
        if self.record.dead:
            return RuntimeError("the engine announced ENGINE_CORE_DEAD")
        return None

    def wait_for(self, until, what: str) -> None:
        """Returns once until() holds. The engine's death meanwhile is liveness.EngineDead (errored,
        server.healthy: it proves nothing about the step); a live engine that has not got there within
        WAIT_S is liveness.NoAnswer (errored, api.answers: a wall-clock wait, never an oracle)."""
        deadline = time.monotonic() + WAIT_S
        while not until():
            if self.alive() is not None:
                raise liveness.EngineDead(f"{what}: the engine's busy loop died: {self.alive()!r}", "server.healthy")
            if time.monotonic() > deadline:
                raise liveness.NoAnswer(f"{what}: not reached within {WAIT_S:g} s on a live engine")
            time.sleep(POLL_S)

    def unfinished(self) -> int:
        """Requests the scheduler still holds (read after settle(), with the busy loop idle)."""
        return len(self.proc.scheduler.requests)

    def forwards(self, request_id: str) -> int:
        return sum(request_id in e.detail for e in self.timeline.of("forward"))
