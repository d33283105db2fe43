"""Sleep and wake latency: the median of REPEATS samples within the thresholds (all samples recorded).

A sample is vLLM's time, not the time spent queueing behind GPU neighbours: each sleep and wake is its
HTTP call alone, inside the memory phase the client takes for it (client.last_call_s), so the test
holds no window of its own and keeps no neighbour out. Where the server's worker brackets its own calls,
this class's client still takes each call's phase itself (covering the worker's): the worker's wait
would otherwise be inside the HTTP call.

A wake shares the GPU with a neighbour's start step (a weight load, a profile run, a graph capture) now and
then in the main job and all the time in one `bazel test` of the whole suite, and is 2-5x slower beside
one: each sample records whether a neighbour was in a start step when its call began or ended, and
oracle.bounded_median judges the samples of the condition most of them ran under by that condition's bound.

Mechanism layer: a failure is first compared with a baseline run of the same cell. Graph-mode wake is
known to be slower (#45648); per-mode bounds go into thresholds.py only once measured.
"""

import pytest

from tests.core import expect, measure, oracle
from tests.core.client import client_of
from tests.core.prompts import GOLDEN_MAX_TOKENS, PROMPTS

REPEATS = 5


def _record(recorder, key, samples, beside=None):
    for i, s in enumerate(samples):
        extra = {} if beside is None else {"beside_start": beside[i]}
        recorder.record(measure.current_test(), key, s, "s", repeat=i, **extra)


@pytest.fixture(scope="class")
def client(server):
    return client_of(server, phases_in_server=False)


class TestSleepWakeLatency:
    def test_sleep_latency(self, client, golden, recorder, cell):
        samples = []
        for _ in range(REPEATS):
            client.sleep(level=1)
            samples.append(client.last_call_s)
            expect.asleep(client, 1, step="timed sleep", issue="sleep latency")
            client.wake_up()
        _record(recorder, "sleep_s", samples)
        oracle.bounded(
            recorder, "latency.sleep", measure.median(samples), cell.id, f"median sleep level 1 of {REPEATS}: {samples}"
        )
        expect.golden(client, golden, step="timed sleeps", issue="sleep latency")

    def test_full_and_staged_wake_latency(self, client, golden, recorder, cell):
        full, staged, full_beside, staged_beside = [], [], [], []
        for _ in range(REPEATS):
            client.sleep(level=1)
            client.wake_up()
            full.append(client.last_call_s)
            full_beside.append(client.last_call_beside_start)
            expect.awake(client, step="timed full wake", issue="#45648 wake latency")
            client.sleep(level=1)
            client.wake_up(["weights"])
            weights_s, weights_beside = client.last_call_s, client.last_call_beside_start
            client.wake_up(["kv_cache"])
            staged.append(weights_s + client.last_call_s)
            staged_beside.append(weights_beside or client.last_call_beside_start)
            expect.awake(client, step="timed staged wake", issue="#45648 wake latency")
        _record(recorder, "wake_full_s", full, full_beside)
        _record(recorder, "wake_staged_s", staged, staged_beside)
        with oracle.together():
            oracle.bounded_median(
                recorder,
                "latency.wake",
                full,
                full_beside,
                cell.id,
                f"full wakes of {REPEATS}: {full}, beside a start step {full_beside} (#45648)",
            )
            oracle.bounded_median(
                recorder,
                "latency.staged_wake",
                staged,
                staged_beside,
                cell.id,
                f"staged wakes of {REPEATS}: {staged}, beside a start step {staged_beside} (#45648)",
            )
        expect.golden(client, golden, step="timed wakes", issue="#45648")

    def test_cycle_latency(self, client, golden, recorder, cell):
        """Sleep + full wake + the first request after it: the three calls' own times."""
        samples, prompt = [], PROMPTS[0]
        for i in range(REPEATS):
            client.sleep(level=1)
            sleep_s = client.last_call_s
            client.wake_up()
            wake_s = client.last_call_s
            completion, request_s = measure.timed(client.complete, prompt, GOLDEN_MAX_TOKENS)
            samples.append(sleep_s + wake_s + request_s)
            expect.tokens(
                completion, golden[prompt], prompt=prompt, step=f"timed cycle {i}", issue="first request after wake"
            )
        _record(recorder, "cycle_s", samples)
        oracle.bounded(
            recorder,
            "latency.cycle",
            measure.median(samples),
            cell.id,
            f"median sleep+wake+first request of {REPEATS}: {samples}",
        )
        expect.awake(client, step="timed cycles", issue="cycle latency")
