"""Sample class of the sharded sample (one class per file, as in tests/sleep_wake)."""

import pytest


class TestGate:
    @pytest.mark.parametrize("order", ["weights_first", "kv_cache_first"])
    def test_held(self, order):
        pass

    def test_healthy_after(self):
        pass
