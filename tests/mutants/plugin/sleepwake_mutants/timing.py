"""Mutants of sleep and wake latency (vllm/v1/worker/gpu_worker.py Worker of vLLM 0.26.0), each about
twice the latency bound it should trip (tests/sleep_wake/lib/thresholds.py)."""

import time

from .shared import wrap

SLEEP_DELAY_S = 0.9   # sleep_s_max is 0.5 s; measured medians 0.018-0.107 s
WAKE_DELAY_S = 0.45   # wake_s_max is 0.25 s; measured medians 0.026-0.069 s


def slow_sleep():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def sleep(self, level=1):
            time.sleep(SLEEP_DELAY_S)
            return original(self, level)
        return sleep
    wrap(Worker, "sleep", make)


def slow_wake():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def wake_up(self, tags=None):
            time.sleep(WAKE_DELAY_S)
            return original(self, tags)
        return wake_up
    wrap(Worker, "wake_up", make)
