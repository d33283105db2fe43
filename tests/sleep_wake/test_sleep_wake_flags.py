"""/is_sleeping and the vllm:engine_sleep_state gauge agree with each other and with the level, at
every step of sleep and wake; output is golden after each recovery."""

import pytest

from tests.core import expect, oracle, thresholds
from tests.core.background import background
from tests.core.prompts import PROMPTS


class TestSleepWakeFlags:
    @pytest.mark.door_needs("concurrent_calls")
    def test_level0_pauses_scheduling_and_holds_requests(self, client, golden):
        """Level 0 only pauses the scheduler: a request is accepted, held, and completes on wake."""
        window = thresholds.get("held_request_window_s")
        bound = thresholds.get("request_completion_s_max")
        prompt = PROMPTS[0]
        for wake_tags in (["scheduling"], None):
            how = f"wake_up(tags={wake_tags})"
            client.sleep(level=0)
            expect.asleep(client, 0, step="sleep level 0", issue="level-0 flags")
            with background(client) as pool:
                held = pool.submit(client.complete, prompt, timeout_s=window + 2 * bound)
                expect.accepted(client, [held], 1, "the request accepted (/load >= 1) while paused")
                expect.held(
                    "requests.held_while_paused",
                    client,
                    [held],
                    window,
                    "a request sent while scheduling is paused (level 0)",
                )
                client.wake_up(wake_tags)
                step, issue = f"level 0 then {how}", "level-0 held request (#45326)"
                completion = expect.result(held, bound, client=client, step=step, issue=issue)
                expect.tokens(completion, golden[prompt], prompt=prompt, step=step, issue=issue)
            expect.awake(client, step=f"level 0 then {how}", issue="level-0 flags")

    def test_level1_flags(self, client, golden):
        client.sleep(level=1)
        expect.asleep(client, 1, step="sleep level 1", issue="level-1 flags")
        client.wake_up()
        expect.awake(client, step="full wake from level 1", issue="level-1 flags")
        expect.golden(client, golden, step="level 1 and full wake", issue="level-1 output")

    def test_level2_flags_and_recovery(self, client, golden, cell):
        """Documented level-2 recovery: wake weights, reload weights, wake kv_cache (#29341)."""
        client.sleep(level=2)
        expect.asleep(client, 2, step="sleep level 2", issue="level-2 flags")
        client.wake_up(["weights"])
        expect.partially_asleep(client, step="level 2 then wake weights", issue="level-2 recovery", level=2)
        client.reload_weights()
        client.wake_up(["kv_cache"])
        expect.awake(client, step="level 2 recovery", issue="level-2 flags")
        # The optional last step of the recovery; releases differ in whether they report its result.
        pin = thresholds.divergence("reset_prefix_cache_result_unreported", client.version(), cell.door)
        oracle.equal(
            "api.reset_prefix_cache_result",
            client.reset_prefix_cache(),
            pin.expected,
            f"/reset_prefix_cache on an idle server after the level-2 recovery, {pin.describe()}",
        )
        expect.golden(client, golden, step="level 2 recovery with reload", issue="#29341/#54235 garbage after level 2")

    def test_partial_wakes_keep_sleeping_flag(self, client, golden):
        """A wake of one tag leaves /is_sleeping true (#44483); the gauge is pinned as divergent."""
        for order in (["weights", "kv_cache"], ["kv_cache", "weights"]):
            client.sleep(level=1)
            expect.asleep(client, 1, step=f"sleep level 1 (order {order})", issue="level-1 flags")
            client.wake_up([order[0]])
            expect.partially_asleep(client, step=f"wake {order[0]} only", issue="#44483")
            client.wake_up([order[1]])
            expect.awake(client, step=f"wake {order[1]} after {order[0]}", issue="#44483")
            expect.golden(client, golden, step=f"staged wake {order}", issue="#44483/#45619")

    def test_idempotent_repeats(self, client, golden):
        """Sleeping twice and waking twice is harmless (#31618)."""
        for i in (1, 2):
            client.sleep(level=1)
            expect.asleep(client, 1, step=f"sleep level 1, call {i}", issue="#31618")
        for i in (1, 2):
            client.wake_up()
            expect.awake(client, step=f"full wake, call {i}", issue="#31618")
        expect.golden(client, golden, step="sleep x2 then wake x2", issue="#31618")
