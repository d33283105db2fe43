"""Sample class of the sharded sample (one class per file, as in tests/sleep_wake)."""


class TestFlags:
    def test_level1(self):
        pass

    def test_level2(self):
        pass

    def test_partial_wake(self):
        pass

    def test_idempotent(self):
        pass
