"""Runs EngineCoreProc's busy loop: one iteration at a time from the test, or in a thread.

EngineCoreProc.run_busy_loop is `while self._handle_shutdown(): self._process_input_queue();
self._process_engine_step()`. `iterate` is that body; with `process_input_queue_block` False the
input step returns at once when there is nothing to do, so a test can interleave its own actions
(a new request, a sleep) between iterations. `BackgroundLoop` runs the real run_busy_loop in a
thread, as the engine core process runs it, for the HTTP tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: pins the platform)
from tests.engine.fakes.timeline import Timeline
from tests.core import measure, oracle
from vllm.v1.engine import EngineCoreRequestType
from vllm.v1.engine.core import EngineCoreProc, EngineShutdownState

# Each iteration steps the engine at most once; the tests' requests need a handful of steps.
MAX_ITERATIONS = 50
STOP_TIMEOUT_S = 30.0


def iterate(proc: EngineCoreProc) -> None:
    """One pass of EngineCoreProc.run_busy_loop's body."""
    proc._process_input_queue()
    proc._process_engine_step()


def drive(
    proc: EngineCoreProc, until: Callable[[], bool], what: str, timeline: Timeline, oracle_id: str | None = None
) -> int:
    """Iterates the loop until `until()` holds; returns the iterations it took. After MAX_ITERATIONS the
    oracle `oracle_id` fails (what it waits for is what it checks), or measure.WaitTimeout when the wait
    only sets a test up (errored)."""
    for done in range(MAX_ITERATIONS + 1):
        if until():
            return done
        iterate(proc)
    where = f"{what}; timeline: {timeline}"
    if oracle_id is not None:
        oracle.fail(oracle_id, where, "not reached", f"{MAX_ITERATIONS} busy-loop iterations", "within")
    raise measure.WaitTimeout(f"{where}: not reached after {MAX_ITERATIONS} busy-loop iterations")


class BackgroundLoop:
    """EngineCoreProc.run_busy_loop in a thread, stopped the way a SIGTERM stops the engine process.

    Like run_engine_core, a fatal error in the loop is kept and announced to the client with
    ENGINE_CORE_DEAD on the output queue.
    """

    def __init__(self, proc: EngineCoreProc) -> None:
        self.proc = proc
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="EngineCore busy loop", daemon=True)

    def _run(self) -> None:
        try:
            self.proc.run_busy_loop()
        except SystemExit:
            pass  # run_busy_loop's normal end after a shutdown request
        except BaseException as e:  # noqa: BLE001 (kept for the client and the test report)
            self.error = e
            self.proc.output_queue.put_nowait(EngineCoreProc.ENGINE_CORE_DEAD)

    def start(self) -> BackgroundLoop:
        self.proc.process_input_queue_block = True
        self._thread.start()
        return self

    def stop(self) -> None:
        # run_engine_core's SIGTERM handler: request shutdown, then wake the blocked input queue.
        self.proc.shutdown_state = EngineShutdownState.REQUESTED
        self.proc.input_queue.put_nowait((EngineCoreRequestType.WAKEUP, None))
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError(f"the engine's busy loop did not stop within {STOP_TIMEOUT_S} s of a shutdown request")
