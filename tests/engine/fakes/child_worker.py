"""ChildWorker: the fake worker as it runs inside a forked EngineCoreProc (the AsyncLLM door), where the
test cannot read its attributes: it answers two extra worker methods that the test calls through
AsyncLLM.collective_rpc, the only way into that process, as a trainer's own RPCs go.

- sleepwake_report(): the pools' residency, whether the weights are intact and the timeline's events,
  as plain lists (the RPC's answer crosses msgpack); besides the worker's own events, the timeline holds
  what left the engine by its output queue (hand_over): each request's end ("output", id, reason) and
  each answer to a call ("answer", call id), so a test sees whether a drain ended before a call answered;
  and the tokens each forward pass scheduled per request, so a test sees a request computed again (a
  preempted one's prompt and tokens so far) from one decoding on its KV (one token a step);
- sleepwake_hold_in_flight(die=False): the next request to reach its second forward pass waits there
  until a call is on the engine's input queue (or the scheduler is paused), once: lib/engine_server.py's
  InFlightGate, here in the engine's own process, so a pause lands mid-decode however loaded the host.
  With die, that forward pass then fails (EngineDeath) and the engine process dies with the call queued:
  #45520's sleep during decode, made deterministic.
"""

from __future__ import annotations

import collections
import time

from tests.engine.fakes.worker import FakeWorker

HOLD_S = 10.0  # a call that never reaches the engine lets the request go (reported as hold_timed_out)
POLL_S = 0.0005


def hand_over(engine) -> None:
    """In the forked engine process, once EngineCoreProc is built: its worker watches its input queue (the
    hold) and records what it puts on its output queue (every put is put_nowait, core.py)."""
    ChildWorker.engine = engine
    timeline = engine.model_executor.driver_worker.worker.timeline
    put = engine.output_queue.put_nowait

    def recorded(item) -> None:
        if isinstance(item, tuple):  # else ENGINE_CORE_DEAD, a bytes sentinel
            outputs = item[1]
            for output in outputs.outputs or ():
                if output.finish_reason is not None:
                    timeline.add("output", output.request_id, output.finish_reason.name)
            if outputs.utility_output is not None:
                timeline.add("answer", outputs.utility_output.call_id)
        put(item)

    engine.output_queue.put_nowait = recorded


class EngineDeath(RuntimeError):
    """The forward pass that sleepwake_hold_in_flight(die=True) fails: on a GPU a fault in a kernel."""


class ChildWorker(FakeWorker):
    # The engine core of this process: hand_over sets it in the forked child.
    engine = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._hold = False
        self._die = False
        self._forwards: collections.Counter = collections.Counter()
        self.hold_timed_out = False
        self.scheduled: dict[str, list[int]] = collections.defaultdict(list)

    def sleepwake_report(self) -> dict:
        return {
            "resident": dict(self.resident),
            "weights_intact": self.weights_intact,
            "events": [[e.kind, *e.detail] for e in self.timeline.events],
            "hold_timed_out": self.hold_timed_out,
            "scheduled": dict(self.scheduled),
        }

    def sleepwake_hold_in_flight(self, die: bool = False) -> None:
        self._hold, self._die, self.hold_timed_out = True, die, False
        self._forwards.clear()

    def execute_model(self, scheduler_output):
        for request_id, tokens in scheduler_output.num_scheduled_tokens.items():
            self.scheduled[request_id].append(tokens)
        if self._hold:
            self._forwards.update(list(scheduler_output.num_scheduled_tokens))  # one per request, not per token
            if max(self._forwards.values(), default=0) >= 2:
                self._hold = False
                self._wait_for_a_call()
                if self._die:
                    raise EngineDeath(
                        "the forward pass sleepwake_hold_in_flight(die=True) fails once a call is queued: "
                        "the engine process dies with it unanswered"
                    )
        return super().execute_model(scheduler_output)

    def _wait_for_a_call(self) -> None:
        engine = self.engine
        if engine is None:
            raise RuntimeError(
                "ChildWorker has no engine to watch: build it with engines.build_async_llm, whose hook sets it"
            )
        deadline = time.monotonic() + HOLD_S
        while engine.input_queue.empty() and not engine.is_scheduler_paused():
            if time.monotonic() > deadline:
                self.hold_timed_out = True
                return
            time.sleep(POLL_S)
