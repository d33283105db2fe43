"""Ten level-1 sleep/wake cycles: the server's NVML bytes asleep and awake stay flat and the output
stays golden (#21336 grew every cycle until garbage at cycle 4; #36651, #34600)."""

from tests.core import expect, measure, oracle
from tests.core.memory import settled_gpu_bytes
from tests.core.prompts import PROMPTS

CYCLES = 10
ISSUE = "#21336/#36651 leak across cycles"


class TestMemoryLeakCycle:
    FRESH_SERVER = (
        "a one-off jump happens at a server's first cycles, which a lent server has had (tests/core/server_reuse.py)"
    )

    def test_bytes_flat_over_ten_cycles(self, server, client, golden, recorder, cell):
        test = measure.current_test()
        recorder.record(
            test, "awake_bytes_before_cycles", settled_gpu_bytes(server, "before cycle 1", recorder=recorder), "bytes"
        )
        series: dict[str, list[int]] = {"asleep": [], "awake": []}
        for cycle in range(1, CYCLES + 1):
            client.sleep(level=1)
            expect.asleep(client, 1, step=f"cycle {cycle}: sleep level 1", issue=ISSUE)
            series["asleep"].append(settled_gpu_bytes(server, f"asleep in cycle {cycle}", recorder=recorder))
            client.wake_up()
            expect.awake(client, step=f"cycle {cycle}: full wake", issue=ISSUE)
            series["awake"].append(settled_gpu_bytes(server, f"awake in cycle {cycle}", recorder=recorder))
            # A request every cycle: a leak may need the KV cache to be written between cycles.
            prompt = PROMPTS[cycle % len(PROMPTS)]
            expect.tokens(client.complete(prompt), golden[prompt], prompt=prompt, step=f"cycle {cycle}", issue=ISSUE)
            for state, values in series.items():
                recorder.record(test, f"{state}_bytes", values[-1], "bytes", cycle=cycle)
        # Both statistics of both series judge the same readings: a steady leak shows in the median step
        # (one jump moves it not at all), a jump in the spread.
        with oracle.together():
            for state, values in series.items():
                oracle.bounded(
                    recorder,
                    "device_bytes.leak_per_cycle",
                    measure.median_increment(values),
                    cell.id,
                    f"[{ISSUE}] median growth per cycle of {state} bytes over {CYCLES} cycles: {values}",
                )
            for state, values in series.items():
                oracle.bounded(
                    recorder,
                    "device_bytes.cycle_spread",
                    measure.spread(values[1:]),
                    cell.id,
                    f"[{ISSUE}] max - min of {state} bytes over cycles 2..{CYCLES}: {values}",
                )
        expect.golden(client, golden, step=f"{CYCLES} sleep/wake cycles", issue=ISSUE)
