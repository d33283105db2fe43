"""Ten level-1 sleep/wake cycles: the server's NVML bytes asleep and awake stay flat and the output
stays golden (#21336 grew every cycle until garbage at cycle 4; #36651, #34600)."""

from tests.sleep_wake.lib import measure, metrics, oracles
from tests.sleep_wake.lib.prompts import PROMPTS
from tests.sleep_wake.lib.memory import settled_gpu_bytes

CYCLES = 10
ISSUE = "#21336/#36651 leak across cycles"


class TestMemoryLeakCycle:
    def test_bytes_flat_over_ten_cycles(self, server, client, golden, recorder, cell):
        test = measure.current_test()
        recorder.record(test, "awake_bytes_before_cycles", settled_gpu_bytes(server, "before cycle 1"),
                        "bytes")
        series = {"asleep": [], "awake": []}
        for cycle in range(1, CYCLES + 1):
            client.sleep(level=1)
            oracles.expect_state(client, sleeping=True, gauge=metrics.GAUGE_LEVEL1,
                                 step=f"cycle {cycle}: sleep level 1", issue=ISSUE)
            series["asleep"].append(settled_gpu_bytes(server, f"asleep in cycle {cycle}"))
            client.wake_up()
            oracles.expect_awake(client, step=f"cycle {cycle}: full wake", issue=ISSUE)
            series["awake"].append(settled_gpu_bytes(server, f"awake in cycle {cycle}"))
            # A request every cycle: a leak may need the KV cache to be written between cycles.
            prompt = PROMPTS[cycle % len(PROMPTS)]
            oracles.expect_tokens(client.complete(prompt), golden[prompt], prompt=prompt,
                                  step=f"cycle {cycle}", issue=ISSUE)
            for state, values in series.items():
                recorder.record(test, f"{state}_bytes", values[-1], "bytes", cycle=cycle)
        # The steady leak first: its bound is the tighter, so it is the one that names a leak per cycle.
        for state, values in series.items():
            measure.check_at_most(recorder, "leak_bytes_per_cycle_max", measure.median_increment(values),
                                  cell.id, f"[{ISSUE}] median growth per cycle of {state} bytes over "
                                  f"{CYCLES} cycles: {values}")
        for state, values in series.items():
            measure.check_at_most(recorder, "cycle_bytes_flat_max", measure.spread(values[1:]), cell.id,
                                  f"[{ISSUE}] max - min of {state} bytes over cycles 2..{CYCLES}: {values}")
        oracles.expect_golden(client, golden, step=f"{CYCLES} sleep/wake cycles", issue=ISSUE)
