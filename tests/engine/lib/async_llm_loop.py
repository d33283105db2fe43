"""AsyncLlmLoop: an AsyncLLM (engines.build_async_llm) on an event loop of its own, for synchronous tests.

RL actors (NeMo-RL, verl) await AsyncLLM's coroutines on their actor's loop; a test here hands each of
its scenarios to `run`, which bounds it: a call that never answers is liveness.NoAnswer (api.answers:
#45326's hang, or a host too loaded; errored, a catalogued hang may count it), one that raises is judged
by checks.error_answer (the engine's error answer is api.status), as the GPU tier's client reads a server.
The fake worker lives in the forked engine process, so what crossed its boundary comes back through
`report` (a collective_rpc).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

from tests.engine.fakes.timeline import Timeline
from tests.engine.lib import checks, engines
from tests.core import liveness, thresholds


@dataclasses.dataclass
class WorkerReport:
    """What the forked fake worker reports: a stand-in for the worker object checks.py reads."""

    resident: dict
    weights_intact: bool
    timeline: Timeline
    hold_timed_out: bool
    scheduled: dict  # engine request id -> the tokens each forward pass scheduled for it


class Request:
    """A request's generate() async generator, drained by a task as a rollout worker drains it."""

    def __init__(self, llm, request_id: str, prompt: dict, params) -> None:
        self.id = request_id
        self.outputs: list = []
        self.started = asyncio.Event()  # its first output reached the caller: it is in flight
        self.task = asyncio.create_task(self._drain(llm.generate(prompt, params, request_id=request_id)))

    async def _drain(self, generator) -> None:
        async for out in generator:
            self.outputs.append(out)
            self.started.set()

    async def ended_within(self, seconds: float) -> bool:
        """Whether the caller's generator ended (or raised) within `seconds`: the bounded wait of a check."""
        done, _ = await asyncio.wait({self.task}, timeout=seconds)
        return bool(done)

    def end(self) -> dict:
        """What the caller got: its last output's finish reason and token ids, the cached prompt tokens the
        first output reported, or the error its generator raised."""
        error = self.task.exception() if self.task.done() and not self.task.cancelled() else None
        last = self.outputs[-1] if self.outputs else None
        return {
            "finished": bool(last and last.finished),
            "finish_reason": last.outputs[0].finish_reason if last else None,
            "token_ids": list(last.outputs[0].token_ids) if last else [],
            "cached": self.outputs[0].num_cached_tokens if self.outputs else None,
            "error": repr(error) if error else None,
        }


class AsyncLlmLoop:
    def __init__(self, model_dir: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.llm = self.loop.run_until_complete(engines.build_async_llm(model_dir))
        self.tasks: list[asyncio.Future] = []
        self._ids = itertools.count()

    def generate(self, prompt: dict, params) -> Request:
        """One request through AsyncLLM.generate, consumed by a task of its own (call inside `run`)."""
        request = Request(self.llm, f"req{next(self._ids)}", prompt, params)
        self.spawn(request.task)
        return request

    def spawn(self, awaitable) -> asyncio.Future:
        """A task the door cancels at shutdown if the test left it open (a call that never answers)."""
        task = asyncio.ensure_future(awaitable)
        self.tasks.append(task)
        return task

    def run(self, coro):
        """The scenario `coro` on the door's loop, within race_timeout_s: longer than each of its own waits
        (request_completion_s_max), so a request that hangs is reported by its own wait first."""
        bound = thresholds.get("race_timeout_s")
        try:
            return self.loop.run_until_complete(asyncio.wait_for(coro, bound))
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            raise liveness.NoAnswer(
                f"the AsyncLLM scenario: not over after {bound} s (a call or a request hung)"
            ) from None

    async def call(self, what: str, coro):
        """One awaited AsyncLLM call: no answer within request_completion_s_max is liveness.NoAnswer, an
        exception is judged by checks.error_answer (the engine's error answer is api.status, its death
        liveness.EngineDead, the test's own error re-raised as it is)."""
        bound = thresholds.get("request_completion_s_max")
        try:
            return await asyncio.wait_for(coro, bound)
        except asyncio.TimeoutError:  # before Exception: it is one
            raise liveness.NoAnswer(f"{what}: no answer in {bound} s") from None
        except Exception as e:
            checks.error_answer(what, e)
            raise

    async def report(self) -> WorkerReport:
        [answer] = await self.call("collective_rpc('sleepwake_report')", self.llm.collective_rpc("sleepwake_report"))
        timeline = Timeline()
        for kind, *detail in answer["events"]:
            timeline.add(kind, *detail)
        return WorkerReport(
            answer["resident"], answer["weights_intact"], timeline, answer["hold_timed_out"], answer["scheduled"]
        )

    def shutdown(self) -> None:
        """Cancels the tasks the test left open (a request's generate() aborts it on a live engine), then
        ends the engine process and the loop: AsyncLLM.shutdown cancels its output handler task on it."""
        try:
            pending = [t for t in self.tasks if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending, timeout=thresholds.get("request_completion_s_max")))
            self.llm.shutdown()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()
