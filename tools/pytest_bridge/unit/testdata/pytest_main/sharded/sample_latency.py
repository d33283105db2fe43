"""Sample class of the sharded sample (one class per file, as in tests/sleep_wake)."""


class TestLatency:
    def test_sleep_latency(self):
        pass
