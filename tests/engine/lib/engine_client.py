"""QueueEngineClient: the part of AsyncLLM that vLLM's sleep routes call, over EngineCoreProc's queues.

vllm/entrypoints/serve/dev/sleep/api_router.py calls `engine_client.sleep(level, mode)`,
`.wake_up(tags)` and `.is_sleeping()` on app.state.engine_client, an AsyncLLM in a server. Each of
AsyncLLM's three methods awaits one utility call on the engine core (`sleep_async`, `wake_up_async`,
`is_sleeping_async` of the EngineCoreClient), which the engine's input thread turns into
(UTILITY, (client index, call id, method name, args)) on EngineCoreProc.input_queue and whose answer,
a UtilityOutput, comes back on output_queue. This class does exactly that exchange, without ZMQ and
msgpack, and raises a failed call's `failure_message` as the MP client does (core_client.py
`_process_utility_output`).

Left out of AsyncLLM.sleep/wake_up, on purpose: clearing the renderer's multimodal cache (no
multimodal inputs here) and `record_sleep_state` (the vllm:engine_sleep_state gauge, which the GPU
matrix's flags class covers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading

from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: pins the platform)
from tests.core import liveness
from vllm.v1.engine import EngineCoreOutput, EngineCoreRequestType
from vllm.v1.engine.core import EngineCoreProc
from vllm.v1.engine.exceptions import EngineDeadError

CALL_TIMEOUT_S = 30.0  # a utility call the loop never answers is liveness.NoAnswer instead of hanging the test


class QueueEngineClient:
    def __init__(self, proc: EngineCoreProc, loop_error=lambda: None) -> None:
        self._proc = proc
        self._loop_error = loop_error  # the busy loop's fatal error, for EngineDeadError's text
        self._call_ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._finished: dict[str, EngineCoreOutput] = {}
        self._finished_changed = threading.Condition()
        self._dead = False
        self._reader = threading.Thread(target=self._read_outputs, name="output reader", daemon=True)
        self._reader.start()

    # --- what the sleep router calls (AsyncLLM.sleep / wake_up / is_sleeping) --------------------
    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        await self._call("sleep", level, mode)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await self._call("wake_up", tags)

    async def is_sleeping(self) -> bool:
        return await self._call("is_sleeping")

    # --- what the tests use besides -----------------------------------------------------------
    def call(self, method: str, *args):
        """A utility call from a plain thread (the is_scheduler_paused probe, a settle barrier); no answer
        within CALL_TIMEOUT_S is _unanswered's."""
        try:
            return self._submit(method, args).result(CALL_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise self._unanswered(method) from None

    def wait_finished(self, request_id: str, timeout_s: float = CALL_TIMEOUT_S) -> EngineCoreOutput:
        """The request's last output; a dead engine raises EngineDeadError (errored), a live one that has
        not finished it within timeout_s liveness.NoAnswer: a wall-clock wait on the busy loop's thread,
        which a loaded host runs out as surely as a hang (errored; a catalogued hang may count it)."""
        with self._finished_changed:
            ended = self._finished_changed.wait_for(lambda: request_id in self._finished or self._dead, timeout_s)
        self._raise_if_dead()
        if not ended:
            raise liveness.NoAnswer(f"request {request_id}: unfinished after {timeout_s} s on a live engine")
        return self._finished[request_id]

    def finished(self, request_id: str) -> EngineCoreOutput | None:
        with self._finished_changed:
            return self._finished.get(request_id)

    def close(self) -> None:
        self._proc.output_queue.put_nowait(None)  # ends the reader
        self._reader.join(CALL_TIMEOUT_S)

    # --- the exchange ---------------------------------------------------------------------------
    async def _call(self, method: str, *args):
        future = self._submit(method, args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), CALL_TIMEOUT_S)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            raise self._unanswered(method) from None

    def _unanswered(self, method: str) -> Exception:
        """A utility call the busy loop did not answer within CALL_TIMEOUT_S: EngineDeadError if it died
        (errored), else liveness.NoAnswer (api.answers: a wall-clock wait, which a loaded host runs out as
        surely as a hang; errored, a catalogued hang may count it), never an error answer of the engine."""
        if self._dead:
            return EngineDeadError(f"the engine's busy loop died: {self._loop_error()!r}")
        return liveness.NoAnswer(f"utility call {method}: no answer in {CALL_TIMEOUT_S:g} s on a live engine")

    def _submit(self, method: str, args: tuple) -> concurrent.futures.Future:
        self._raise_if_dead()
        call_id = next(self._call_ids)
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._pending[call_id] = future
        self._proc.input_queue.put_nowait((EngineCoreRequestType.UTILITY, (0, call_id, method, args)))
        return future

    def _raise_if_dead(self) -> None:
        if self._dead:
            raise EngineDeadError(f"the engine's busy loop died: {self._loop_error()!r}")

    def _read_outputs(self) -> None:
        while True:
            item = self._proc.output_queue.get()
            if item is None:
                return
            if item == EngineCoreProc.ENGINE_CORE_DEAD:
                self._dead = True
                for future in self._pending.values():
                    future.set_exception(EngineDeadError(f"{self._loop_error()!r}"))
                with self._finished_changed:
                    self._finished_changed.notify_all()
                return
            _, outputs = item
            if outputs.utility_output is not None:
                result = outputs.utility_output
                future = self._pending.pop(result.call_id)
                if result.failure_message is not None:
                    future.set_exception(Exception(result.failure_message))
                else:
                    future.set_result(result.result.result)
            with self._finished_changed:
                for output in outputs.outputs or ():
                    if output.finish_reason is not None:
                        self._finished[output.request_id] = output
                self._finished_changed.notify_all()
