"""Per-token logprobs (greedy, logprobs=1) after a level-1 sleep and full wake match the golden run
within logprob_drift_max: weights come back from pinned CPU memory bit-exact, so any drift beyond
kernel nondeterminism means corrupted weights or KV state (#21336, #29341)."""

from tests.core import expect
from tests.core.prompts import PROMPTS

ISSUE = "logprob drift after sleep/wake (#21336)"


class TestLogprobsPrecision:
    def test_level1_logprobs_match_golden(self, client, golden, recorder, cell):
        client.sleep(level=1)
        expect.asleep(client, 1, step="sleep level 1", issue=ISSUE)
        client.wake_up()
        expect.awake(client, step="full wake from level 1", issue=ISSUE)
        # Logprobs are compared position by position on the same tokens, which the helper checks first.
        expect.golden_with_logprobs(
            client, recorder, golden, PROMPTS, cell.id, step="level 1 and full wake", issue=ISSUE
        )
