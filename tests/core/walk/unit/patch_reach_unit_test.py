"""patch_reach: every walk mutant of the catalogue has the steps its patch departs in, the mutants' cell's plan
reaches each one in some shard, and a walk mutant's target runs those shards first."""

import sleepwake_mutants

from tests.core.walk import model, patch_reach, plan
from tests.core.walk import operations as ops
from tools import matrix

WALK = "state_walk"
# The mutants' cell (tests/mutants/defs.bzl _RUNNER, _MODE): it walks every pair of its door alone.
RUNNER, MODE, DOOR = "mrv2", "eager", matrix.HTTP


def _mutants_cell_walks() -> tuple:
    shards = matrix.shard_count(WALK, MODE, DOOR)
    return plan.cell_walks(plan.cell_seed(plan.SEED, matrix.cell_id(RUNNER, MODE)), shards, DOOR, None)


def test_every_walk_mutant_says_where_its_patch_departs():
    walk_mutants = {name for name, m in sleepwake_mutants.MUTANTS.items() if WALK in m.kills}
    assert set(patch_reach.REACHES) == walk_mutants


def test_the_mutants_cell_reaches_every_walk_mutants_patch():
    walks = _mutants_cell_walks()
    unreached = [m for m in sorted(patch_reach.REACHES) if not patch_reach.reaching(m, walks)]
    assert not unreached, f"no shard of the mutants' cell's plan reaches these mutants' patches: {unreached}"


def test_the_shards_that_reach_a_patch_run_first():
    walks = _mutants_cell_walks()
    for mutant in patch_reach.REACHES:
        first = patch_reach.reaching(mutant, walks)
        order = patch_reach.order(mutant, walks)
        assert sorted(order) == list(range(len(walks)))
        assert set(order[: len(first)]) == set(first)
        assert [first[s] for s in order[: len(first)]] == sorted(first.values())


def test_the_order_follows_the_steps_not_the_shard_numbers():
    """A reset under a level-0 keep's frozen request is reset_prefix_cache_preempts_running's step: the walk
    that makes it soonest runs first, one that never does last; the control's order is the shards' own."""
    freeze = [ops.sleep(0, "keep", 1)]
    walks = [
        [ops.Operation("generate_fresh")],
        [ops.Operation("generate_fresh")] + freeze + [ops.RESET_PREFIX_CACHE, ops.wake()],
        freeze + [ops.RESET_PREFIX_CACHE, ops.wake()],
    ]
    assert plan.run(model.INITIAL, freeze).held_kv
    assert patch_reach.order("reset_prefix_cache_preempts_running", walks) == [2, 1, 0]
    assert patch_reach.order("none", walks) == [0, 1, 2]
