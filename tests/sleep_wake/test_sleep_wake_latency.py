"""Sleep and wake latency: the median of REPEATS samples within the thresholds (all samples recorded).

Mechanism layer: a failure is first compared with a baseline run of the same cell. Graph-mode wake is
known to be slower (#45648); per-mode bounds go into thresholds.py only once measured.
"""

import pytest

from tests.sleep_wake.lib import expect, measure, oracle
from tests.sleep_wake.lib.prompts import GOLDEN_MAX_TOKENS, PROMPTS

REPEATS = 5


def _record(recorder, key, samples):
    for i, s in enumerate(samples):
        recorder.record(measure.current_test(), key, s, "s", repeat=i)


@pytest.fixture(autouse=True)
def _no_neighbour_waits(client):
    """The timings are vLLM's, not the time spent queueing behind GPU neighbours' starts and wakes:
    the test holds its GPU's exclusive memory phase throughout (client.sleep_window(exclusive=True))."""
    with client.sleep_window(exclusive=True):
        yield


class TestSleepWakeLatency:
    def test_sleep_latency(self, client, golden, recorder, cell):
        samples = []
        for _ in range(REPEATS):
            samples.append(measure.timed(client.sleep, level=1)[1])
            expect.asleep(client, 1, step="timed sleep", issue="sleep latency")
            client.wake_up()
        _record(recorder, "sleep_s", samples)
        oracle.bounded(recorder, "latency.sleep", measure.median(samples), cell.id,
                       f"median sleep level 1 of {REPEATS}: {samples}")
        expect.golden(client, golden, step="timed sleeps", issue="sleep latency")

    def test_full_and_staged_wake_latency(self, client, golden, recorder, cell):
        full, staged = [], []
        for _ in range(REPEATS):
            client.sleep(level=1)
            full.append(measure.timed(client.wake_up)[1])
            expect.awake(client, step="timed full wake", issue="#45648 wake latency")
            client.sleep(level=1)
            staged.append(measure.timed(client.wake_up, ["weights"])[1]
                          + measure.timed(client.wake_up, ["kv_cache"])[1])
            expect.awake(client, step="timed staged wake", issue="#45648 wake latency")
        _record(recorder, "wake_full_s", full)
        _record(recorder, "wake_staged_s", staged)
        with oracle.together():
            oracle.bounded(recorder, "latency.wake", measure.median(full), cell.id,
                           f"median full wake of {REPEATS}: {full} (#45648)")
            oracle.bounded(recorder, "latency.staged_wake", measure.median(staged), cell.id,
                           f"median staged wake of {REPEATS}: {staged} (#45648)")
        expect.golden(client, golden, step="timed wakes", issue="#45648")

    def test_cycle_latency(self, client, golden, recorder, cell):
        """Sleep + full wake + the first request after it, end to end."""
        samples, prompt = [], PROMPTS[0]

        def cycle():
            client.sleep(level=1)
            client.wake_up()
            return client.complete(prompt, GOLDEN_MAX_TOKENS)

        for i in range(REPEATS):
            completion, seconds = measure.timed(cycle)
            samples.append(seconds)
            expect.tokens(completion, golden[prompt], prompt=prompt, step=f"timed cycle {i}",
                          issue="first request after wake")
        _record(recorder, "cycle_s", samples)
        oracle.bounded(recorder, "latency.cycle", measure.median(samples), cell.id,
                       f"median sleep+wake+first request of {REPEATS}: {samples}")
        expect.awake(client, step="timed cycles", issue="cycle latency")
