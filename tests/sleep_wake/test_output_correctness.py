"""Greedy token ids (temperature 0, ignore_eos, fixed length) after every way of waking are identical
to the golden run taken before any sleep, and a wake never serves a stale prefix cache."""

from tests.core import expect, measure, oracle
from tests.core.prompts import PROMPTS

LEVEL2_CYCLES = 3
# Several KV blocks long (only full blocks are cached), so a repeat can be served from the cache.
LONG_PROMPT = " ".join(PROMPTS)


class TestOutputCorrectness:
    def test_level1_full_wake_is_golden(self, client, golden):
        client.sleep(level=1)
        expect.asleep(client, 1, step="sleep level 1", issue="level-1 output")
        client.wake_up()
        expect.awake(client, step="full wake from level 1", issue="level-1 output")
        expect.golden(
            client, golden, step="level 1 and full wake", issue="weights restored from CPU must be bit-exact (#21336)"
        )

    def test_staged_wake_is_golden(self, client, golden):
        client.sleep(level=1)
        expect.asleep(client, 1, step="sleep level 1", issue="staged wake output")
        client.wake_up(["weights"])
        expect.partially_asleep(client, step="wake weights", issue="#44483")
        client.wake_up(["kv_cache"])
        expect.awake(client, step="wake kv_cache after weights", issue="#44483")
        expect.golden(client, golden, step="staged wake (weights, kv_cache)", issue="#44483/#45619")

    def test_level2_reload_is_golden_over_cycles(self, client, golden):
        for cycle in range(1, LEVEL2_CYCLES + 1):
            client.sleep(level=2)
            expect.asleep(client, 2, step=f"cycle {cycle}: sleep level 2", issue="level-2 output")
            client.recover_from_level2()
            expect.awake(client, step=f"cycle {cycle}: level-2 recovery", issue="level-2 output")
            expect.golden(
                client,
                golden,
                step=f"cycle {cycle}: level 2, wake weights, reload_weights, wake kv_cache",
                issue="#29341/#54235 garbage after level 2",
            )

    def test_prefix_cache_not_stale_after_wake(self, client, golden, recorder):
        first = client.complete(LONG_PROMPT)
        repeat = client.complete(LONG_PROMPT)
        recorder.record(measure.current_test(), "cached_tokens_before_sleep", repeat.cached_tokens, "tokens")
        # The oracle below (cached_tokens == 0) means something only if a repeat is served from cache.
        if not repeat.cached_tokens:
            raise oracle.Precondition(
                f"expected cached_tokens > 0 for the repeated prompt before sleep, seen {repeat.cached_tokens!r}; "
                "the server must run --enable-prefix-caching and --enable-prompt-tokens-details"
            )
        expect.tokens(
            repeat,
            first,
            prompt=LONG_PROMPT,
            step="a prefix-cache hit before sleep",
            issue="prefix-cache hit changes output",
        )
        client.sleep(level=1)
        expect.asleep(client, 1, step="sleep level 1", issue="#17103/#22726")
        client.wake_up()
        expect.awake(client, step="full wake from level 1", issue="#17103/#22726")
        after = client.complete(LONG_PROMPT)
        recorder.record(measure.current_test(), "cached_tokens_after_wake", after.cached_tokens, "tokens")
        oracle.equal(
            "prefix_cache.reset_after_discard",
            after.cached_tokens,
            0,
            "[#17103/#22726] cached_tokens of the first request after a level-1 wake (level 1 discards "
            "the KV cache and resets the prefix cache; a hit serves discarded blocks)",
        )
        expect.tokens(
            after, first, prompt=LONG_PROMPT, step="level 1 and full wake", issue="#17103/#22726 stale prefix cache"
        )
        expect.golden(client, golden, step="prefix-cache check", issue="#17103/#22726")
