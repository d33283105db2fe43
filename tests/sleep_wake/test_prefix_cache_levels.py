"""What each sleep level does to the KV cache and the prefix cache, on prompts several KV blocks long
(LONG_PROMPTS): level 0 only pauses scheduling, so cached blocks survive (a repeat is served from the
prefix cache as before the pause) and a request paused mid-decode with mode=keep resumes on its own KV
blocks; levels 1 and 2 discard the KV cache, so they must reset the prefix cache (a hit would serve
discarded blocks, #17103). vLLM 0.26.0 v1/engine/core.py EngineCore.sleep: clear_prefix_cache = level >= 1."""

import pytest

from tests.core import expect, measure, oracle, thresholds
from tests.core.background import background, generated_tokens, wait_decoding
from tests.core.prompts import LONG_PROMPTS

LEVEL0 = "level 0 keeps KV state"
LEVELS12 = "#17103/#22726 levels 1 and 2 reset the prefix cache"
# Long enough to be mid-decode for the whole observation window when paused (max_model_len is 1024).
PAUSED_MAX_TOKENS = 256


@pytest.fixture(scope="class")
def long_golden(client) -> dict:
    return expect.take_golden(client, LONG_PROMPTS)


def _cached_repeat(client, prompt: str, recorder):
    """The prompt's prefix-cache hit on a repeat (after a first request cached it); fails unless > 0."""
    client.complete(prompt)
    repeat = client.complete(prompt)
    recorder.record(measure.current_test(), "cached_tokens_repeat", repeat.cached_tokens, "tokens", prompt=prompt)
    # The oracles below compare with this hit: they mean something only if there is one.
    if not repeat.cached_tokens:
        raise oracle.Precondition(
            f"expected cached_tokens > 0 for a repeat of a {len(prompt.split())}-token prompt, seen "
            f"{repeat.cached_tokens!r}; the server must run --enable-prefix-caching and "
            "--enable-prompt-tokens-details"
        )
    return repeat


class TestPrefixCacheLevels:
    def test_level0_keeps_prefix_cache_hits(self, client, long_golden, recorder):
        for prompt in LONG_PROMPTS:
            hit = _cached_repeat(client, prompt, recorder)
            client.sleep(level=0)
            expect.asleep(client, 0, step="sleep level 0", issue=LEVEL0)
            client.wake_up(["scheduling"])
            expect.awake(client, step="level 0 then wake_up(tags=[scheduling])", issue=LEVEL0)
            after = client.complete(prompt)
            recorder.record(
                measure.current_test(), "cached_tokens_after_level0", after.cached_tokens, "tokens", prompt=prompt
            )
            oracle.equal(
                "prefix_cache.kept_at_level0",
                after.cached_tokens,
                hit.cached_tokens,
                f"[{LEVEL0}] cached tokens of the repeat after a level-0 pause, against the repeat "
                "before it (only levels >= 1 discard the KV cache)",
            )
            expect.tokens(after, long_golden[prompt], prompt=prompt, step="level 0 pause and resume", issue=LEVEL0)

    @pytest.mark.door_needs("stream")
    @pytest.mark.door_needs("concurrent_calls")
    def test_level0_keep_resumes_in_flight_request(self, client, recorder):
        prompt = LONG_PROMPTS[0]
        bound = thresholds.get("request_completion_s_max")
        window = thresholds.get("held_request_window_s")
        reference = client.complete(prompt, PAUSED_MAX_TOKENS)
        with background(client) as pool:
            with client.sleep_window():  # the pause must land while the request decodes
                since = generated_tokens(client)
                stream = pool.submit(client.complete_stream, prompt, PAUSED_MAX_TOKENS, timeout_s=window + 2 * bound)
                wait_decoding(client, [stream], 1, since, 8)
                client.sleep(level=0, mode="keep")
            expect.asleep(client, 0, step="sleep level 0 (mode keep) mid-decode", issue=LEVEL0)
            expect.held(
                "requests.held_while_paused",
                client,
                [stream],
                window,
                f"[{LEVEL0}] the request paused mid-decode (mode keep) still open",
            )
            client.wake_up(["scheduling"])
            result = expect.result(stream, bound, client=client, step="resume after a level-0 pause", issue=LEVEL0)
            client.check_stream(result, f"[{LEVEL0}] the request paused mid-decode, after the wake")
        expect.awake(client, step="level 0 (mode keep) then wake_up(tags=[scheduling])", issue=LEVEL0)
        recorder.record(
            measure.current_test(),
            "paused_stream",
            {"tokens": len(result.token_ids[0]), "finish_reason": result.finish_reasons[0], "error": result.error},
            "",
        )
        oracle.equal(
            "requests.resumes_after_keep",
            (result.finish_reasons, result.error),
            (["length"], None),
            f"[{LEVEL0}] how the request paused mid-decode ended after the wake (finish reasons, error)",
        )
        got, want = result.token_ids[0], reference.token_ids[0]
        if got != want:
            oracle.fail(
                "prefix_cache.kept_paused_request",
                f"[{LEVEL0}] the request paused mid-decode resumed with other tokens than an "
                f"uninterrupted run, from position {expect.first_difference(got, want)}: its KV blocks "
                "did not survive the level-0 pause",
                got,
                want,
            )

    def test_levels_1_and_2_reset_prefix_cache(self, client, long_golden, recorder):
        for level, prompt in ((1, LONG_PROMPTS[1]), (2, LONG_PROMPTS[2])):
            _cached_repeat(client, prompt, recorder)
            client.sleep(level=level)
            expect.asleep(client, level, step=f"sleep level {level}", issue=LEVELS12)
            if level == 1:
                client.wake_up()
            else:
                client.recover_from_level2()
            expect.awake(client, step=f"level {level} and its wake", issue=LEVELS12)
            after = client.complete(prompt)
            recorder.record(
                measure.current_test(),
                f"cached_tokens_after_level{level}",
                after.cached_tokens,
                "tokens",
                prompt=prompt,
            )
            oracle.equal(
                "prefix_cache.reset_after_discard",
                after.cached_tokens,
                0,
                f"[{LEVELS12}] cached tokens of the first request after a level-{level} sleep (it "
                "discards the KV cache; a hit serves discarded blocks)",
            )
            expect.tokens(after, long_golden[prompt], prompt=prompt, step=f"level {level} and its wake", issue=LEVELS12)
