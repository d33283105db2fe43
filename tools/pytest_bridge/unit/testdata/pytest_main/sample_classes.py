"""Sample for pytest_main_test: classes with parametrized ids shaped like the GPU matrix's."""

import pytest

CELLS = [("MRV1", "eager"), ("MRV1", "graph"), ("MRV2", "eager"), ("MRV2", "graph")]


class TestSchedulerGate:
    @pytest.mark.parametrize("runner,mode", CELLS)  # ids: MRV1-eager, MRV1-graph, ...
    def test_x(self, runner, mode):
        pass

    def test_y(self):
        pass


class TestOther:
    def test_x(self):
        pass

    def test_graph_only(self):
        pass


class TestThird:
    def test_z(self):
        pass
