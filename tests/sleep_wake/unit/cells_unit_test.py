import pytest

from tests.sleep_wake.lib import cells


@pytest.mark.parametrize("runner,mode,ident",
                         [("mrv1", "eager", "MRV1-eager"), ("mrv2", "graph", "MRV2-graph")])
def test_cell_ids(runner, mode, ident):
    spec = cells.cell_from_env({"SLEEPWAKE_RUNNER": runner, "SLEEPWAKE_EXECUTION_MODE": mode})
    assert (spec.runner, spec.mode, spec.id) == (runner, mode, ident)
    assert cells.CellSpec(runner=runner, mode=mode, id=ident) == spec


@pytest.mark.parametrize("env", [{}, {"SLEEPWAKE_RUNNER": "mrv3", "SLEEPWAKE_EXECUTION_MODE": "eager"},
                                 {"SLEEPWAKE_RUNNER": "mrv1", "SLEEPWAKE_EXECUTION_MODE": "EAGER"}])
def test_bad_env_explains(env):
    with pytest.raises(cells.CellConfigError, match="sleep_wake_matrix"):
        cells.cell_from_env(env)


def test_inconsistent_id_rejected():
    with pytest.raises(cells.CellConfigError):
        cells.CellSpec("mrv1", "eager", "MRV2-eager")
