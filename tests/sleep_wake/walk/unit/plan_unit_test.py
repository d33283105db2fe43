import collections
import dataclasses
import os
import subprocess
import sys
import time

import pytest

from tests.sleep_wake.walk import cover, model, plan
from tests.sleep_wake.walk import operations as ops
from tests.sleep_wake.walk.model import INITIAL

SHARDS = 4
SEED = 7
MAX_STEPS = 40
# What the planner needs today (1.55 steps per pair over every pair, 40 steps a walk); a planner that
# wanders more than this costs GPU time (a walk to the nearest pair with random operations took 1.84,
# per-shard plans 2.45).
STEPS_PER_PAIR_MAX = 1.7
# The plan's seconds (step_seconds) over its tour's (cover.tour: every pair and the cheapest links): what
# cutting the tour into walks of MAX_STEPS costs, resets and the ways back included; today 1.11.
CUT_COST_MAX = 1.15


def test_state_space_is_small_and_instant():
    plan.successors.cache_clear()
    plan.reachable_states.cache_clear()
    start = time.monotonic()
    states, pairs = plan.reachable_states(), plan.reachable_pairs()
    assert time.monotonic() - start < 1.0
    assert (len(states), len({plan.pair_state(s) for s in states}), len(pairs)) == (160, 88, 928)
    assert states[0] == INITIAL and len(ops.ALL) == len(ops.BY_TOKEN) == 29


def test_every_operation_is_used_somewhere():
    assert {op for _, op in plan.reachable_pairs()} == set(ops.ALL)


@pytest.mark.parametrize("shards", [1, 2, SHARDS, 7])
def test_shards_cover_every_reachable_pair_exactly_once(shards):
    planned = plan.plan_shards(shards, SEED, MAX_STEPS)
    assert len(planned) == shards
    counts = collections.Counter(p for _, pairs in planned for p in pairs)
    assert set(counts) == plan.reachable_pairs() and set(counts.values()) == {1}
    every_walk = plan.plan_walks(plan.reachable_pairs(), SEED, MAX_STEPS)
    def tokens(walk):
        return tuple(map(str, walk))
    # each walk of the plan goes to exactly one shard
    assert sorted(tokens(w) for walks, _ in planned for w in walks) == sorted(map(tokens, every_walk))
    for walks, pairs in planned:
        assert plan.unvisited(pairs, walks) == set()


def test_shards_end_together():
    """Dealt out longest first, no shard's estimated seconds exceed the mean by more than its longest walk."""
    planned = plan.plan_shards(6, SEED, MAX_STEPS)
    seconds = [sum(map(plan.walk_seconds, walks)) for walks, _ in planned]
    longest = max(plan.walk_seconds(w) for walks, _ in planned for w in walks)
    assert max(seconds) <= sum(seconds) / len(seconds) + longest


def test_shards_refuse_no_shards():
    with pytest.raises(ValueError, match="shards must be >= 1"):
        plan.plan_shards(0, SEED, MAX_STEPS)


def test_walks_visit_every_pair():
    walks = plan.plan_walks(plan.reachable_pairs(), SEED, MAX_STEPS)
    assert plan.unvisited(plan.reachable_pairs(), walks) == set()
    assert max(map(len, walks)) <= MAX_STEPS
    assert sum(map(len, walks)) <= STEPS_PER_PAIR_MAX * len(plan.reachable_pairs())
    for steps in plan.trace(walks):  # every walk ends home, so the next starts where the first did
        last_state, last_op = steps[-1]
        assert plan.pair_state(last_op.apply(last_state)) == INITIAL
    for walk in walks:  # and each replays from a fresh server
        assert plan.pair_state(plan.run(INITIAL, walk)) == INITIAL


def _paths(walks) -> set:
    """The (state, operation before, operation) steps of walks run in order from INITIAL."""
    return {(plan.pair_state(s), str(a), str(b)) for steps in plan.trace(walks)
            for (s, a), (_, b) in zip(steps, steps[1:])}


def test_the_seed_varies_the_operations_around_the_pairs():
    one, other = (_paths(plan.plan_walks(plan.reachable_pairs(), seed, MAX_STEPS)) for seed in (SEED, SEED + 1))
    assert len(one & other) < 0.5 * min(len(one), len(other))  # today 341 of 1189-1205


def test_the_plan_costs_little_more_than_its_tour():
    pairs = plan.reachable_pairs()
    required = [(s, op, plan.pair_state(op.apply(s))) for s, op in sorted(pairs, key=plan.pair_key)]
    links = cover.deadheads(required, plan._pair_edges, plan.step_seconds)
    tour_s = sum(plan.step_seconds(op) for _, op, _ in required + links)
    walks = plan.plan_walks(pairs, SEED, MAX_STEPS)
    assert sum(map(plan.walk_seconds, walks)) <= CUT_COST_MAX * tour_s


def test_walks_end_where_the_tour_passes_home():
    # Cutting there is free (no reset, no way back), and the deal gets the finest pieces the tour allows.
    for steps in plan.trace(plan.plan_walks(plan.reachable_pairs(), SEED, MAX_STEPS)):
        assert all(plan.pair_state(state) != INITIAL for state, _ in steps[1:])


def test_a_pair_that_is_not_reachable_is_refused():
    unreachable = dataclasses.replace(INITIAL, level=0, paused=True)  # paused, yet the gauge reads awake
    with pytest.raises(ValueError, match="not a reachable pair"):
        plan.plan_walks({(unreachable, ops.RESET_PREFIX_CACHE)}, SEED, MAX_STEPS)


def test_each_cell_walks_other_paths_between_the_same_pairs():
    def paths(seed):
        return _paths([w for ws, _ in plan.plan_shards(6, seed, MAX_STEPS) for w in ws])
    seeds = [plan.cell_seed(SEED, cell) for cell in ("mrv1_eager", "mrv1_graph", "mrv2_eager", "mrv2_graph")]
    assert len(set(seeds)) == 4 and plan.cell_seed(SEED, "mrv2_eager") == seeds[2]
    one, every = paths(seeds[0]), set().union(*map(paths, seeds))
    assert len(every) > 2 * len(one)  # today 3223 against 1187


def test_walks_are_reproducible_from_the_seed():
    pairs = plan.reachable_pairs()
    walks = plan.plan_walks(pairs, SEED, MAX_STEPS)
    assert plan.plan_walks(pairs, SEED, MAX_STEPS) == walks
    assert plan.plan_walks(pairs, SEED + 1, MAX_STEPS) != walks


def test_walks_do_not_depend_on_the_hash_seed():
    code = ("from tests.sleep_wake.walk import plan;"
            f"print([plan.script({SEED}, 2, w) for w in plan.plan_shards({SHARDS}, {SEED}, {MAX_STEPS})[2][0]])")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": os.getcwd(), "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")}
    assert len(outs) == 1


def test_too_short_a_budget_says_so():
    with pytest.raises(ValueError, match="max_steps=1 is too short"):
        plan.plan_walks(plan.reachable_pairs(), SEED, 1)


def test_reset_ops_bring_every_reachable_state_home():
    for state in plan.reachable_states():
        home = plan.run(state, plan.reset_ops(state))
        assert plan.pair_state(home) == INITIAL, state.describe()
        assert home.host_cached == (state.host_cached or model.holds_host_copy(state))
    assert plan.reset_ops(INITIAL) == []


def test_shrink_candidates_replay_the_failing_step():
    walks = plan.plan_shards(SHARDS, SEED, MAX_STEPS)[0][0]
    steps = plan.trace(walks)[2]
    start, index = steps[0][0], len(steps) // 2
    failing_state, failing_op = steps[index]
    candidates = plan.shrink_candidates(walks[2], index, start)
    assert [len(c) for c in candidates] == sorted(len(c) for c in candidates)
    assert len(candidates[-1]) <= index + 1 + len(plan.shortest_path(INITIAL, start))
    for c in candidates:
        assert c[-1] == failing_op
        assert plan.pair_state(plan.run(INITIAL, c[:-1])) == plan.pair_state(failing_state)
    assert plan.run(INITIAL, candidates[0][:-1]) == failing_state
    with pytest.raises(ValueError, match="outside the walk"):
        plan.shrink_candidates(walks[2], len(walks[2]), start)


def test_script_round_trip():
    walk = plan.plan_walks(plan.reachable_pairs(), SEED, MAX_STEPS)[0]
    line = plan.script(SEED, 3, walk)
    assert line.startswith('SLEEPWAKE_WALK_REPLAY="') and line.endswith("# seed 7, shard 3")
    assert plan.parse_script(line) == walk
    value = line.split('"')[1]
    assert plan.parse_script(value) == walk
    assert plan.parse_script("sleep:1:abort:0,wake:weights,reload:B,wake:-") == [
        ops.sleep(1), ops.wake(["weights"]), ops.reload("B"), ops.wake()]
    assert plan.parse_script("") == []
    with pytest.raises(ValueError, match="unknown walk operation 'sleep:3:abort:0'"):
        plan.parse_script("sleep:3:abort:0")


def test_host_cached_is_left_out_of_pairs_only():
    cached = plan.run(INITIAL, [ops.sleep(1), ops.wake()])
    assert cached.host_cached and plan.pair_state(cached) == INITIAL
    assert [op for op, _ in plan.successors(cached)] == [op for op, _ in plan.successors(INITIAL)]
    assert model.host_band(cached, "0.26.0", 1 << 30, 1 << 28) != model.host_band(INITIAL, "0.26.0", 1 << 30, 1 << 28)


def test_the_walks_shards_are_the_bazel_shards():
    """test_state_walk.py defines one class per shard of the spec's SHARD_COUNTS["state_walk"]."""
    import re
    from tools import matrix
    suite = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    walk = open(os.path.join(suite, "test_state_walk.py"), encoding="utf-8").read()
    assert matrix.SHARD_COUNTS["state_walk"] == int(re.search(r"^SHARDS = (\d+)$", walk, re.MULTILINE).group(1))


def test_terminal_probes_reach_every_kind_of_partial_wake_one_per_shard():
    import re
    import os
    from tests.sleep_wake.walk import operations as ops
    probes = plan.terminal_probes()
    kinds = {(plan.run(INITIAL, p[:-1]).level, tuple(sorted(plan.run(INITIAL, p[:-1]).asleep_tags))) for p in probes}
    assert kinds == {(1, ("kv_cache",)), (1, ("weights",)), (2, ("kv_cache",))}
    for p in probes:
        assert ops.terminal(p[-1], plan.run(INITIAL, p[:-1])) and not any(
            ops.terminal(op, s) for s, op in plan.trace([p[:-1]])[0])
    suite = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    walk = open(os.path.join(suite, "test_state_walk.py"), encoding="utf-8").read()
    shards = int(re.search(r"^SHARDS = (\d+)$", walk, re.MULTILINE).group(1))
    assert len(probes) <= shards, "a probe ends its server's life: each needs a shard of its own"


class _RecordingWalker:
    def __init__(self):
        self.runs = []

    def run(self, walks, seed, shard):
        self.runs.append((walks, seed, shard))


def test_run_shard_runs_the_plan_or_the_replay(monkeypatch):
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    walker = _RecordingWalker()
    pairs, walks = plan.run_shard(walker, 2, 6, 100, 60)
    assert (walks, pairs) == plan.plan_shards(6, 100, 60)[2]
    assert walker.runs == [(walks, 100, 2)]
    monkeypatch.setenv(plan.REPLAY_VAR, "sleep:1:abort:0,wake:-")
    walker = _RecordingWalker()
    assert plan.run_shard(walker, 2, 6, 100, 60) is None
    assert [(len(w), seed, shard) for w, seed, shard in walker.runs] == [(1, 100, 2)]
    assert [str(op) for op in walker.runs[0][0][0]] == ["sleep:1:abort:0", "wake:-"]


def test_a_documented_full_wake_ends_every_probe_awake_with_its_weights():
    """Where full_wake_remaps_resident_pool does not apply, a probe's full wake wakes every tag: the
    walkers take the state after it from the model's effect, whatever checkpoint is served."""
    for probe in plan.terminal_probes():
        before = plan.run(INITIAL, probe[:-1])
        after = ops.effect(probe[-1], before)
        assert not after.asleep_tags and not after.paused and after.level is None, after.describe()
        assert (after.weights, after.model_path, after.host_cached) == (
            before.weights, before.model_path, before.host_cached or model.holds_host_copy(before))
    b_partial = plan.run(INITIAL, [ops.reload("B"), ops.sleep(1, "abort", False), ops.wake(("weights",))])
    assert ops.effect(ops.wake(), b_partial).weights == "B"


def test_the_deal_counts_a_sleep_with_a_request_in_flight_at_its_own_cost():
    # Counted as a plain sleep, one shard of six took 18 of a cell's 49 and was the longest in every run.
    plain, in_flight = ops.sleep(1, "abort", False), ops.sleep(1, "abort", True)
    assert plan.walk_seconds([in_flight]) == plan.IN_FLIGHT_SLEEP_SECONDS > plan.walk_seconds([plain])
