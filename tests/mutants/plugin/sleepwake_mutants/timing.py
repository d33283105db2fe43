"""Mutants of sleep and wake latency (vllm/v1/worker/gpu_worker.py Worker of vLLM 0.26.0), each 1.5
times the latency bound it should trip (tests/sleep_wake/lib/thresholds.py) over a typical median."""

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
