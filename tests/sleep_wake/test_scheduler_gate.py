"""#44483: after a partial wake, a request is accepted but not scheduled (a forward pass would touch
the unmapped pool, #44395) until every tag is resident; then it completes with golden tokens."""

from tests.sleep_wake.lib import measure, metrics, oracles, thresholds
from tests.sleep_wake.lib.background import background
from tests.sleep_wake.lib.prompts import PROMPTS

ISSUE = "#44483 (forward during partial wake, #44395)"


def _held_until_second_wake(client, golden, first: str, second: str, prompts: list[str]) -> None:
    window = thresholds.get("held_request_window_s")
    bound = thresholds.get("request_completion_s_max")
    client.sleep(level=1)
    oracles.expect_state(client, sleeping=True, gauge=metrics.GAUGE_LEVEL1, step="sleep level 1",
                         issue=ISSUE)
    client.wake_up([first])
    oracles.expect_partially_asleep(client, step=f"wake {first} only", issue=ISSUE)
    with background(client, len(prompts)) as pool:
        held = [pool.submit(client.complete, p, timeout_s=window + 2 * bound) for p in prompts]
        measure.wait_until(lambda: client.load() >= len(prompts) or any(f.done() for f in held), bound,
                           what=f"{len(prompts)} requests accepted (/load) while {second} is asleep")
        measure.assert_holds(
            lambda: not any(f.done() for f in held) and client.is_sleeping(), window,
            what=(f"[{ISSUE}] requests pending and is_sleeping true while only {first} is awake (a "
                  f"request that finished here was scheduled with {second} unmapped)"))
        client.wake_up([second])
        step = f"held request after waking {first} then {second}"
        for prompt, future in zip(prompts, held):
            completion = oracles.expect_result(future, bound, step=step, issue=ISSUE)
            oracles.expect_tokens(completion, golden[prompt], prompt=prompt, step=step, issue=ISSUE)
    oracles.expect_awake(client, step=f"wake {first} then {second}", issue=ISSUE)


class TestSchedulerGate:
    def test_weights_first_holds_request_until_kv_cache(self, client, golden):
        _held_until_second_wake(client, golden, "weights", "kv_cache", [PROMPTS[0]])

    def test_kv_cache_first_holds_request_until_weights(self, client, golden):
        _held_until_second_wake(client, golden, "kv_cache", "weights", [PROMPTS[1]])

    def test_held_requests_complete_and_server_stays_healthy(self, client, golden):
        prompts = PROMPTS + PROMPTS  # eight requests held at once, duplicates included
        _held_until_second_wake(client, golden, "weights", "kv_cache", prompts)
        assert client.health(), f"[{ISSUE}] /health failed after the held requests completed"
        measure.wait_until(lambda: client.load() == 0, thresholds.get("request_completion_s_max"),
                           what="/load back to 0 after every held request completed")
        oracles.expect_golden(client, golden, step="after held requests", issue=ISSUE)
