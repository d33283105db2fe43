"""Mutants of sleep and wake latency (vllm/v1/worker/gpu_worker.py Worker of vLLM 0.26.0) and of how long
an abort takes to reach the client (vllm/v1/engine/core.py EngineCoreProc), each 1.5 times the latency
bound it should trip (tests/core/thresholds.py) over a typical median or healthy extreme."""

import threading
import time

from .shared import wrap

# Each delay puts a healthy median (their noise: docs/thresholds.md) past the bound that judges it.
SLEEP_DELAY_S = 0.58  # sleep_s_max is 0.4 s
WAKE_DELAY_S = 0.42  # wake_s_max is 0.30 s
TAGGED_WAKE_DELAY_S = 0.195  # staged_wake_s_max is 0.30 s for two tagged wakes
# The same defects sized against the bounds that judge wakes beside a neighbour's start step.
BESIDE_START_WAKE_DELAY_S = 0.70  # wake_beside_start_s_max is 0.60 s
BESIDE_START_TAGGED_WAKE_DELAY_S = 0.345  # staged_wake_beside_start_s_max is 0.60 s for two tagged wakes
FIRST_FORWARD_DELAY_S = 2.15  # cycle_s_max is 1.5 s
# abort_s_max (10 s) is a contract bound far above its noise (a stream ends within tens of ms of
# /sleep?mode=abort), so it carries a mutant of its own: the healthy time plus this is 1.5x the bound.
ABORT_OUTPUT_DELAY_S = 15.0


def slow_sleep():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def sleep(self, level=1):
            time.sleep(SLEEP_DELAY_S)
            return original(self, level)

        return sleep

    wrap(Worker, "sleep", make)


def _slow_wake(delay_s: float, tagged: bool) -> None:
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def wake_up(self, tags=None):
            if (tags is not None) == tagged:
                time.sleep(delay_s)
            return original(self, tags)

        return wake_up

    wrap(Worker, "wake_up", make)


def slow_wake():
    _slow_wake(WAKE_DELAY_S, tagged=False)


def slow_staged_wake():
    _slow_wake(TAGGED_WAKE_DELAY_S, tagged=True)


def slower_wake():
    _slow_wake(BESIDE_START_WAKE_DELAY_S, tagged=False)


def slower_staged_wake():
    _slow_wake(BESIDE_START_TAGGED_WAKE_DELAY_S, tagged=True)


def slow_first_request():
    from vllm.v1.worker.gpu_worker import Worker

    woken = []

    def make_wake(original):
        def wake_up(self, tags=None):
            woken.append(True)
            return original(self, tags)

        return wake_up

    def make_step(original):
        def execute_model(self, *args, **kwargs):
            if woken:
                woken.clear()
                time.sleep(FIRST_FORWARD_DELAY_S)
            return original(self, *args, **kwargs)

        return execute_model

    wrap(Worker, "wake_up", make_wake)
    wrap(Worker, "execute_model", make_step)


def abort_delayed():
    from vllm.v1.engine.core import EngineCoreProc

    def make(original):
        def send_abort_outputs(self, aborted_reqs):
            # The scheduler has already finished the requests (pause_scheduler's finish_requests), so the
            # abort still frees them and the sleep goes on at once; only their abort outputs, which
            # vLLM queues before the sleep answers, reach the front end ABORT_OUTPUT_DELAY_S later, and
            # the client's stream stays open until then. output_queue is a queue.Queue, so the late put
            # from the timer's thread is safe; daemon, so a shutdown's aborts do not hold the process.
            timer = threading.Timer(ABORT_OUTPUT_DELAY_S, original, args=(self, aborted_reqs))
            timer.daemon = True
            timer.start()

        return send_abort_outputs

    wrap(EngineCoreProc, "_send_abort_outputs", make)
