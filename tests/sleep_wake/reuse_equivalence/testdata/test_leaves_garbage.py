"""A class that passes and leaves its server as a careless RL client would: slept at level 2 and woken
without the reload, so its weights are garbage (#29341), with a prompt cached. What a lent server must be
reset from (reuse_equivalence_test): a reset that did not reload the start checkpoint would hand the next
class garbage, which weight_sync then takes for its checkpoint A."""

from tests.core.prompts import LONG_PROMPTS


class TestLeavesGarbage:
    def test_level2_sleep_then_wake_without_reload(self, client):
        client.complete(LONG_PROMPTS[0])
        client.sleep(level=2)
        client.wake_up()
        assert not client.is_sleeping()
