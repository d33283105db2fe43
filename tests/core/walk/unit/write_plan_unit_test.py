"""The walk's plan written ahead (write_plan.py) is the plan: read back through plan.PLANNED_VAR, a cell's
walks, terminal probes and state count are what the planner makes, and a file planned by other sources
is refused rather than walked."""

import json

import pytest

from tests.core.walk import plan, write_plan
from tools import matrix

# The cell whose written plan the Bazel action makes (tests/core/walk/BUILD.bazel), as its cells
# read it: every door has its own reachable pairs and probes.
CELLS = [(door, runner, mode) for door, runner, mode in matrix.door_cells() if (runner, mode) == ("mrv2", "graph")]
CELL = ("mrv2", "graph")
SHARDS = matrix.shard_count("state_walk", "graph", matrix.HTTP)


def _write(tmp_path, monkeypatch, contents: dict) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(contents), encoding="utf-8")
    monkeypatch.setenv(plan.PLANNED_VAR, str(path))
    plan.written_plan.cache_clear()
    plan.cell_walks.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_caches():
    yield
    plan.written_plan.cache_clear()
    plan.cell_walks.cache_clear()


@pytest.mark.parametrize("door, runner, mode", CELLS)
def test_a_written_plan_reads_back_as_the_planners(tmp_path, monkeypatch, door, runner, mode):
    seed = plan.cell_seed(plan.SEED, matrix.cell_id(runner, mode))
    monkeypatch.delenv(plan.PLANNED_VAR, raising=False)
    shards = matrix.shard_count("state_walk", mode, door)
    cell = (runner, mode)
    walks = plan.cell_walks(seed, shards, door, cell)
    probes = plan.terminal_probes(door)
    states = plan.model_state_count(door)
    dealt = plan.plan_shards.__wrapped__(shards, seed, door, cell)
    _write(tmp_path, monkeypatch, write_plan.contents(seed, shards, door, cell))
    assert plan.cell_walks(seed, shards, door, cell) == walks
    assert plan.terminal_probes(door) == probes
    assert plan.model_state_count(door) == states == len(plan.reachable_states(door))
    assert plan.worker_pair_count(door) == len(plan.worker_pairs(door))
    # Each shard's walks and pairs, as the test deals them from what it read.
    assert plan.plan_shards.__wrapped__(shards, seed, door, cell) == dealt


def test_the_written_walks_are_walked(tmp_path, monkeypatch):
    """What a cell walks comes from the file: a walk left out of it is left out of the cell's plan."""
    seed = plan.cell_seed(plan.SEED, matrix.cell_id("mrv2", "graph"))
    contents = write_plan.contents(seed, SHARDS, matrix.HTTP, CELL)
    contents["walks"] = contents["walks"][1:]
    _write(tmp_path, monkeypatch, contents)
    assert len(plan.cell_walks(seed, SHARDS, matrix.HTTP, CELL)) == len(contents["walks"])


def test_another_seed_or_door_plans_for_itself(tmp_path, monkeypatch):
    """The engine tier's seed, another door's cell and another share never take a cell's file for theirs."""
    seed = plan.cell_seed(plan.SEED, matrix.cell_id("mrv2", "graph"))
    contents = write_plan.contents(seed, SHARDS, matrix.HTTP, CELL)
    contents["walks"] = []
    _write(tmp_path, monkeypatch, contents)
    assert plan.cell_walks(plan.SEED, SHARDS, matrix.HTTP, CELL)
    assert plan.cell_walks(seed, SHARDS, matrix.HTTP, None)
    assert plan.cell_walks(seed, SHARDS, matrix.FRONT_DOORS[-1], None)


def test_a_plan_of_other_sources_is_refused(tmp_path, monkeypatch):
    seed = plan.cell_seed(plan.SEED, matrix.cell_id("mrv2", "graph"))
    contents = write_plan.contents(seed, SHARDS, matrix.HTTP, CELL)
    contents["planner"] = "0" * 64
    _write(tmp_path, monkeypatch, contents)
    with pytest.raises(ValueError, match="other sources"):
        plan.cell_walks(seed, SHARDS, matrix.HTTP, CELL)
