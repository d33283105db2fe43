"""Sample class of the sharded sample (one class per file, as in tests/sleep_wake)."""


class TestRace:
    def test_sleep_during_burst(self):
        pass
