"""What each sleep level does to the KV cache and the prefix cache, on prompts several KV blocks long
(LONG_PROMPTS): level 0 only pauses scheduling, so cached blocks survive (a repeat is served from the
prefix cache as before the pause) and a request paused mid-decode with mode=keep resumes on its own KV
blocks; levels 1 and 2 discard the KV cache, so they must reset the prefix cache (a hit would serve
discarded blocks, #17103). vLLM 0.26.0 v1/engine/core.py EngineCore.sleep: clear_prefix_cache = level >= 1."""

import pytest

from tests.sleep_wake.lib import measure, metrics, oracles, thresholds
from tests.sleep_wake.lib.background import background, generated_tokens, wait_decoding
from tests.sleep_wake.lib.prompts import LONG_PROMPTS

LEVEL0 = "level 0 keeps KV state"
LEVELS12 = "#17103/#22726 levels 1 and 2 reset the prefix cache"
# Long enough to be mid-decode for the whole observation window when paused (max_model_len is 1024).
PAUSED_MAX_TOKENS = 256


@pytest.fixture(scope="class")
def long_golden(client) -> dict:
    return oracles.take_golden(client, LONG_PROMPTS)


def _cached_repeat(client, prompt: str, recorder):
    """The prompt's prefix-cache hit on a repeat (after a first request cached it); fails unless > 0."""
    client.complete(prompt)
    repeat = client.complete(prompt)
    recorder.record(measure.current_test(), "cached_tokens_repeat", repeat.cached_tokens, "tokens",
                    prompt=prompt)
    # The oracles below compare with this hit: they mean something only if there is one.
    assert repeat.cached_tokens is not None and repeat.cached_tokens > 0, (
        f"oracle check: expected cached_tokens > 0 for a repeat of a {len(prompt.split())}-token prompt, "
        f"seen {repeat.cached_tokens!r}; the server must run --enable-prefix-caching and "
        "--enable-prompt-tokens-details")
    return repeat


class TestPrefixCacheLevels:
    def test_level0_keeps_prefix_cache_hits(self, client, long_golden, recorder):
        for prompt in LONG_PROMPTS:
            hit = _cached_repeat(client, prompt, recorder)
            client.sleep(level=0)
            oracles.expect_state(client, sleeping=True, gauge=metrics.GAUGE_LEVEL0, step="sleep level 0",
                                 issue=LEVEL0)
            client.wake_up(["scheduling"])
            oracles.expect_awake(client, step="level 0 then wake_up(tags=[scheduling])", issue=LEVEL0)
            after = client.complete(prompt)
            recorder.record(measure.current_test(), "cached_tokens_after_level0", after.cached_tokens,
                            "tokens", prompt=prompt)
            assert after.cached_tokens == hit.cached_tokens, (
                f"[{LEVEL0}] expected the repeat after a level-0 pause to hit {hit.cached_tokens} cached "
                f"tokens, as the repeat before it did, seen {after.cached_tokens!r}: level 0 reset the "
                "prefix cache (only levels >= 1 discard the KV cache)")
            oracles.expect_tokens(after, long_golden[prompt], prompt=prompt,
                                  step="level 0 pause and resume", issue=LEVEL0)

    def test_level0_keep_resumes_in_flight_request(self, client, recorder):
        prompt = LONG_PROMPTS[0]
        bound = thresholds.get("request_completion_s_max")
        window = thresholds.get("held_request_window_s")
        reference = client.complete(prompt, PAUSED_MAX_TOKENS)
        with background(client) as pool:
            with client.sleep_window():  # the pause must land while the request decodes
                since = generated_tokens(client)
                stream = pool.submit(client.complete_stream, prompt, PAUSED_MAX_TOKENS,
                                     timeout_s=window + 2 * bound)
                wait_decoding(client, [stream], 1, since, 8)
                client.sleep(level=0, mode="keep")
            oracles.expect_state(client, sleeping=True, gauge=metrics.GAUGE_LEVEL0,
                                 step="sleep level 0 (mode keep) mid-decode", issue=LEVEL0)
            measure.assert_holds(lambda: not stream.done() and client.is_sleeping(), window,
                                 what=f"[{LEVEL0}] the request paused mid-decode (mode keep) still open")
            client.wake_up(["scheduling"])
            result = oracles.expect_result(stream, bound, step="resume after a level-0 pause", issue=LEVEL0)
        oracles.expect_awake(client, step="level 0 (mode keep) then wake_up(tags=[scheduling])", issue=LEVEL0)
        recorder.record(measure.current_test(), "paused_stream", {"tokens": len(result.token_ids[0]),
                        "finish_reason": result.finish_reasons[0], "error": result.error}, "")
        assert result.error is None and result.finish_reasons == ["length"], (
            f"[{LEVEL0}] expected the paused request to resume and end by length, seen finish_reasons "
            f"{result.finish_reasons} error {result.error!r}")
        got, want = result.token_ids[0], reference.token_ids[0]
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        assert got == want, (
            f"[{LEVEL0}] the request paused mid-decode resumed with other tokens than an uninterrupted run, "
            f"from position {first}: its KV blocks did not survive the level-0 pause")

    def test_levels_1_and_2_reset_prefix_cache(self, client, long_golden, recorder):
        for level, prompt in ((1, LONG_PROMPTS[1]), (2, LONG_PROMPTS[2])):
            _cached_repeat(client, prompt, recorder)
            client.sleep(level=level)
            oracles.expect_state(client, sleeping=True, gauge=metrics.GAUGE_BY_LEVEL[level],
                                 step=f"sleep level {level}", issue=LEVELS12)
            if level == 1:
                client.wake_up()
            else:
                client.recover_from_level2()
            oracles.expect_awake(client, step=f"level {level} and its wake", issue=LEVELS12)
            after = client.complete(prompt)
            recorder.record(measure.current_test(), f"cached_tokens_after_level{level}", after.cached_tokens,
                            "tokens", prompt=prompt)
            assert after.cached_tokens == 0, (
                f"[{LEVELS12}] expected cached_tokens == 0 for the first request after a level-{level} sleep "
                f"(it discards the KV cache), seen {after.cached_tokens!r}: discarded blocks served as hits")
            oracles.expect_tokens(after, long_golden[prompt], prompt=prompt,
                                  step=f"level {level} and its wake", issue=LEVELS12)
