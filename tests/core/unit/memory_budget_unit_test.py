"""A cell's memory-phase figures (tests/core/memory_budget.py) are read per cell from the thresholds table
by the names the data file gives, with the file's margin; a value the environment set is kept."""

import json

import pytest

from tests.core import cells, memory_budget, thresholds


def _cell(mode, **env):
    return cells.cell_from_env({"SLEEPWAKE_EXECUTION_MODE": mode, "SLEEPWAKE_KV_CACHE_BYTES": str(3 << 30), **env})


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_the_figures_are_the_cells_bounds(mode):
    cell = _cell(mode)
    config = memory_budget.budgeted(cell).config
    data = memory_budget.data()
    assert config.memory_phase_margin == data["margin"]["value"] and 0 < config.memory_phase_margin <= 1
    assert config.sleep_frees_bytes == int(thresholds.get("sleep_freed_kv_fraction_min", cell.id) * (3 << 30))
    assert config.step_overhead_bytes == int(thresholds.get("level1_residue_bytes_max", cell.id))
    # Narrower than the step overhead, or the steps that only fill a pool would gain nothing by it.
    assert config.load_overhead_bytes == data["load_overhead"]["value"]
    assert 0 < config.load_overhead_bytes < config.step_overhead_bytes
    assert all(entry["reason"] for entry in data.values())


def test_graph_cells_declare_their_larger_residue():
    """level1_residue_bytes_max has a per_cell key for graph: the CUDA-graph pool stays resident."""
    eager, graph = (memory_budget.budgeted(_cell(m)).config.step_overhead_bytes for m in ("eager", "graph"))
    assert graph > eager


def test_the_figures_follow_the_data_file(tmp_path):
    data = memory_budget.data()
    other = dict(data, margin=dict(data["margin"], value=0.25))
    other["step_overhead"] = dict(data["step_overhead"], threshold="wake_restore_bytes_max")
    path = tmp_path / "memory_budget.json"
    path.write_text(json.dumps(other))
    cell = _cell("eager")
    config = memory_budget.budgeted(cell, str(path)).config
    assert config.memory_phase_margin == 0.25
    assert config.step_overhead_bytes == int(thresholds.get("wake_restore_bytes_max", cell.id))


def test_a_figure_the_environment_set_is_kept():
    config = memory_budget.budgeted(_cell("eager", SLEEPWAKE_SLEEP_FREES_BYTES="12345")).config
    assert config.sleep_frees_bytes == 12345 and config.step_overhead_bytes > 0
