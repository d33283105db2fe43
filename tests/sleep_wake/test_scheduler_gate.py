"""#44483: after a partial wake, a request is accepted but not scheduled (a forward pass would touch
the unmapped pool, #44395) until every tag is resident; then it completes with golden tokens."""

from tests.core import expect, thresholds
from tests.core.background import background
from tests.core.prompts import PROMPTS

ISSUE = "#44483 (forward during partial wake, #44395)"


def _held_until_second_wake(client, golden, first: str, second: str, prompts: list[str]) -> None:
    window = thresholds.get("held_request_window_s")
    bound = thresholds.get("request_completion_s_max")
    client.sleep(level=1)
    expect.asleep(client, 1, step="sleep level 1", issue=ISSUE)
    client.wake_up([first])
    expect.partially_asleep(client, step=f"wake {first} only", issue=ISSUE)
    with background(client, len(prompts)) as pool:
        held = [pool.submit(client.complete, p, timeout_s=window + 2 * bound) for p in prompts]
        expect.accepted(
            client, held, len(prompts), f"{len(prompts)} requests accepted (/load) while {second} is asleep"
        )
        expect.held(
            "requests.held_until_resident",
            client,
            held,
            window,
            f"[{ISSUE}] requests sent while only {first} is awake (one that finished here was "
            f"scheduled with {second} unmapped)",
        )
        client.wake_up([second])
        step = f"held request after waking {first} then {second}"
        for prompt, future in zip(prompts, held):
            completion = expect.result(future, bound, client=client, step=step, issue=ISSUE)
            expect.tokens(completion, golden[prompt], prompt=prompt, step=step, issue=ISSUE)
    expect.awake(client, step=f"wake {first} then {second}", issue=ISSUE)


class TestSchedulerGate:
    def test_weights_first_holds_request_until_kv_cache(self, client, golden):
        _held_until_second_wake(client, golden, "weights", "kv_cache", [PROMPTS[0]])

    def test_kv_cache_first_holds_request_until_weights(self, client, golden):
        _held_until_second_wake(client, golden, "kv_cache", "weights", [PROMPTS[1]])

    def test_held_requests_complete_and_server_stays_healthy(self, client, golden):
        prompts = PROMPTS + PROMPTS  # eight requests held at once, duplicates included
        _held_until_second_wake(client, golden, "weights", "kv_cache", prompts)
        expect.healthy(client, "the held requests completed")
        expect.load_drains(client, "after every held request completed")
        expect.golden(client, golden, step="after held requests", issue=ISSUE)
