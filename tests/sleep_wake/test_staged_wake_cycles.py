"""Repeated staged wakes (weights, then kv_cache) keep output identical and flags right each time."""

from tests.core import expect

CYCLES = 5


class TestStagedWakeCycles:
    def test_staged_cycles_are_golden(self, client, golden):
        for cycle in range(1, CYCLES + 1):
            client.sleep(level=1)
            expect.asleep(client, 1, step=f"cycle {cycle}: sleep level 1", issue="staged wake (#44483)")
            client.wake_up(["weights"])
            expect.partially_asleep(client, step=f"cycle {cycle}: wake weights", issue="#44483")
            client.wake_up(["kv_cache"])
            expect.awake(client, step=f"cycle {cycle}: wake kv_cache", issue="#44483")
            expect.golden(
                client, golden, step=f"staged wake cycle {cycle}", issue="#21336 (output degrades over cycles)"
            )
