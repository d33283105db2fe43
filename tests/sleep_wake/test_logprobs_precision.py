"""Per-token logprobs (greedy, logprobs=1) after a level-1 sleep and full wake match the golden run
within logprob_drift_max: weights come back from pinned CPU memory bit-exact, so any drift beyond
kernel nondeterminism means corrupted weights or KV state (#21336, #29341)."""

from tests.sleep_wake.lib import measure, metrics, oracles
from tests.sleep_wake.lib.prompts import GOLDEN_MAX_TOKENS, PROMPTS

ISSUE = "logprob drift after sleep/wake (#21336)"


class TestLogprobsPrecision:
    def test_level1_logprobs_match_golden(self, client, golden, recorder, cell):
        client.sleep(level=1)
        oracles.expect_state(client, sleeping=True, gauge=metrics.GAUGE_LEVEL1, step="sleep level 1",
                             issue=ISSUE)
        client.wake_up()
        oracles.expect_awake(client, step="full wake from level 1", issue=ISSUE)
        drifts = {}
        for prompt in PROMPTS:
            after = client.complete(prompt, GOLDEN_MAX_TOKENS, logprobs=1)
            # Logprobs are comparable only position by position on the same tokens.
            oracles.expect_tokens(after, golden[prompt], prompt=prompt, step="level 1 and full wake",
                                  issue=ISSUE)
            want, got = golden[prompt].logprobs[0], after.logprobs[0]
            assert len(got) == len(want) == GOLDEN_MAX_TOKENS, (
                f"[{ISSUE}] expected {GOLDEN_MAX_TOKENS} token logprobs for {prompt!r}, seen "
                f"{len(got)} (golden {len(want)})")
            drifts[prompt] = max(abs(a - b) for a, b in zip(got, want))
            recorder.record(measure.current_test(), "logprob_drift", drifts[prompt], "nats",
                            prompt=prompt, golden=want, seen=got)
        worst = max(drifts, key=drifts.get)
        measure.check_at_most(recorder, "logprob_drift_max", drifts[worst], cell.id,
                              f"[{ISSUE}] max |logprob - golden| per token, worst prompt {worst!r} "
                              f"(all prompts: {drifts})")
