import collections
import dataclasses
import math
import os
import subprocess
import sys
import time

import pytest

from tests.core import oracle
from tests.core.walk import model, plan
from tests.core.walk import operations as ops
from tests.core.walk.model import INITIAL
from tools import matrix

SHARDS = 4
SEED = 7
MAX_STEPS = plan.MAX_STEPS
# Steps per pair over every pair, resets and the ways back included, at plan.MAX_STEPS a walk: just above
# what the planner needs today (1.97 at SEED: 9000 steps for 4568 situation pairs, whose held and queued
# requests and pause modes take steps to set up again after each reset; 1.73 for the 1384 coarser pairs
# before, 1.7 before the pushes and /resume); a planner that wanders more than this costs GPU time.
STEPS_PER_PAIR_MAX = 2.0


def test_state_space_is_small_and_planned_fast():
    plan.successors.cache_clear()
    plan.reachable_states.cache_clear()
    plan._reachable_pairs.cache_clear()
    start = time.monotonic()
    states, pairs = plan.reachable_states(), plan.reachable_pairs()
    plan.plan_walks(pairs, SEED, MAX_STEPS)
    # Planned once per cell by a build action (write_plan.py), no longer at each shard's start: 34.5 s for
    # the 4568 situation pairs on the 2-core development machine beside other builds (4 s for 1384 before
    # the situations kept the pause mode and the held and queued requests apart).
    assert time.monotonic() - start < 60.0
    situations = {sit for sit, _ in pairs}
    assert (len(states), len(situations), len(pairs)) == (9776, 457, 4568)
    assert states[0] == INITIAL and len(ops.ALL) == len(ops.BY_TOKEN) == 76


def test_the_situations_are_as_fine_as_the_model():
    """Issue 60: the pause mode, a held request running or preempted, and requests queued beside it are
    apart in the situation, so the HTTP door has at least 4000 situation pairs (1384 when they were
    merged); each in-flight kind is an operation, in every situation where a request can be in flight."""
    pairs = plan.reachable_pairs()
    assert len(pairs) >= 4000
    sits = {sit for sit, _ in pairs}
    assert {sit.pause for sit in sits} == {None, model.PAUSE_NEW, model.PAUSE_ALL}
    assert {(sit.held, sit.queued) for sit in sits} >= {
        ("running", "none"),
        ("preempted", "none"),
        ("none", "waiting"),
        ("preempted", "waiting"),
        ("none", "long pair"),
    }
    in_flight = {op.params[2] for _, op in pairs if op.name == "sleep"}
    assert in_flight == set(ops.IN_FLIGHT)
    assert any(op.name == "generate_cached" and sit.long_waiting for sit, op in pairs)
    assert {sit.held for sit, op in pairs if op.resets_running} == {"running"}


def test_every_operation_is_used_somewhere():
    assert {op for _, op in plan.reachable_pairs()} == set(ops.ALL)


def test_every_situation_of_a_paused_server_takes_every_generate_and_pause_mode():
    """The walk no longer steps around requests while paused or asleep, nor around the pause modes while
    paused: in every situation each generate, each sleep mode and each /pause is a pair."""
    by_situation = collections.defaultdict(set)
    for sit, op in plan.reachable_pairs():
        # a long pair and a long prompt waiting set apart the wake's, the /resume's and generate_cached's only
        queued = "waiting" if sit.queued == "long pair" else sit.queued
        by_situation[dataclasses.replace(sit, reload_path=None, pushed=False, long_waiting=False, queued=queued)].add(
            str(op)
        )
    for sit, tokens in by_situation.items():
        assert set(ops.GENERATES) - {"generate_cached"} <= tokens, sit.describe()
        assert {f"sleep:{level}:{mode}:0" for level in model.LEVELS for mode in ops.MODES} <= tokens, sit.describe()
        assert {str(ops.pause(mode, clear)) for mode in ops.MODES for clear in (True, False)} <= tokens


def test_pushes_and_resume_are_walked_wherever_a_client_can_send_them():
    """A push wherever the weights are resident (asleep: pinned), a /resume wherever no tag sleeps (with one
    asleep: probed), and a plain reload both where it reloads what serves and where it reverts a push."""
    pairs = plan.reachable_pairs()
    by_op = collections.defaultdict(set)
    for sit, op in pairs:
        by_op[op.name].add(sit)
    assert all("weights" not in sit.asleep_tags for sit in by_op["push"])
    assert any(sit.garbage and sit.asleep_tags == ("kv_cache",) for sit in by_op["push"])  # the RL recipe's
    assert all(not sit.asleep_tags for sit in by_op["resume"]) and any(
        sit.queued != "none" or sit.held != "none" for sit in by_op["resume"]
    )
    plain = {sit for sit, op in pairs if op == ops.reload()}
    assert {sit.pushed for sit in plain} == {True, False}
    assert {str(op) for _, op in pairs if op.name == "push"} == {
        f"push:{way}:{c}" for way in ("tensor", "ipc") for c in ("A", "B")
    }


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
        assert set(pairs) <= plan.steps_coverage(plan.trace(walks))[0]


def test_shards_end_together():
    """Dealt out longest first, no shard's estimated seconds exceed the mean by more than its longest walk."""
    planned = plan.plan_shards(6, SEED, MAX_STEPS)
    seconds = [sum(map(plan.walk_millis, walks)) for walks, _ in planned]
    longest = max(plan.walk_millis(w) for walks, _ in planned for w in walks)
    assert max(seconds) <= sum(seconds) / len(seconds) + longest


def test_shards_refuse_no_shards():
    with pytest.raises(ValueError, match="shards must be >= 1"):
        plan.plan_shards(0, SEED, MAX_STEPS)


def test_walks_visit_every_pair():
    walks = plan.plan_walks(plan.reachable_pairs(), SEED, MAX_STEPS)
    assert plan.steps_coverage(plan.trace(walks))[0] == plan.reachable_pairs()
    assert max(map(len, walks)) <= MAX_STEPS
    assert sum(map(len, walks)) <= STEPS_PER_PAIR_MAX * len(plan.reachable_pairs())
    for walk in walks:  # every walk ends home, so the next starts where the first did, and replays alone
        home = plan.run(INITIAL, walk)
        assert home == INITIAL or home == INITIAL.__class__(host_cached=True), home.describe()


def _paths(walks) -> set:
    """The (state, operation before, operation) steps of walks run in order from INITIAL."""
    return {(s, str(a), str(b)) for steps in plan.trace(walks) for (s, a), (_, b) in zip(steps, steps[1:])}


def test_the_seed_varies_the_operations_around_the_pairs():
    one, other = (_paths(plan.plan_walks(plan.reachable_pairs(), seed, MAX_STEPS)) for seed in (SEED, SEED + 1))
    assert len(one & other) < 0.5 * min(len(one), len(other))


def test_a_pair_that_is_not_reachable_is_refused():
    unreachable = plan.Situation(0, ("weights",), model.PAUSE_NEW, False, "none")  # level 0 with a tag asleep
    with pytest.raises(ValueError, match="not reachable pairs"):
        plan.plan_walks({(unreachable, ops.RESET_PREFIX_CACHE)}, SEED, MAX_STEPS)


def test_each_cell_walks_other_paths_between_the_same_pairs():
    def paths(seed):
        return _paths([w for ws, _ in plan.plan_shards(6, seed, MAX_STEPS) for w in ws])

    seeds = [plan.cell_seed(SEED, cell) for cell in ("mrv1_eager", "mrv1_graph", "mrv2_eager", "mrv2_graph")]
    assert len(set(seeds)) == 4 and plan.cell_seed(SEED, "mrv2_eager") == seeds[2]
    one, every = paths(seeds[0]), set().union(*map(paths, seeds))
    assert len(every) > 2 * len(one)


def test_walks_are_reproducible_from_the_seed():
    pairs = plan.reachable_pairs()
    walks = plan.plan_walks(pairs, SEED, MAX_STEPS)
    assert plan.plan_walks(pairs, SEED, MAX_STEPS) == walks
    assert plan.plan_walks(pairs, SEED + 1, MAX_STEPS) != walks


def test_walks_do_not_depend_on_the_hash_seed():
    code = (
        "from tests.core.walk import plan;"
        f"print([plan.script({SEED}, 2, w) for w in plan.plan_shards({SHARDS}, {SEED}, {MAX_STEPS})[2][0]])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": os.getcwd(), "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1


def test_too_short_a_budget_says_so():
    with pytest.raises(ValueError, match="max_steps=1 is too short"):
        plan.plan_walks(plan.reachable_pairs(), SEED, 1)


def test_reset_ops_bring_every_reachable_state_home():
    for state in plan.reachable_states():
        home = plan.run(state, plan.reset_ops(state))
        assert home == INITIAL.__class__(host_cached=home.host_cached), state.describe()
        assert home.host_cached == (state.host_cached or model.holds_host_copy(state))
    assert plan.reset_ops(INITIAL) == []


def test_shrink_candidates_replay_the_failing_step():
    walks = plan.plan_shards(SHARDS, SEED, MAX_STEPS)[0][0]
    steps = plan.trace(walks)[2]
    start, index = steps[0][0], len(steps) // 2
    failing_state, failing_op = steps[index]
    candidates = plan.shrink_candidates(walks[2], index, start)
    assert [len(c) for c in candidates] == sorted(len(c) for c in candidates)
    to_start = plan.shortest_path(INITIAL, start)
    assert to_start is not None and len(candidates[-1]) <= index + 1 + len(to_start)
    for c in candidates:
        assert c[-1] == failing_op
        assert plan.situation(plan.run(INITIAL, c[:-1]), failing_op) == plan.situation(failing_state, failing_op)
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
        ops.sleep(1),
        ops.wake(["weights"]),
        ops.reload("B"),
        ops.wake(),
    ]
    assert plan.parse_script("") == []
    with pytest.raises(ValueError, match="unknown walk operation 'sleep:3:abort:0'"):
        plan.parse_script("sleep:3:abort:0")


def test_host_cached_is_left_out_of_pairs_only():
    cached = plan.run(INITIAL, [ops.sleep(1), ops.wake()])
    assert cached.host_cached and plan.situation(cached, ops.RESET_PREFIX_CACHE) == plan.situation(
        INITIAL, ops.RESET_PREFIX_CACHE
    )
    assert [op for op, _ in plan.successors(cached)] == [op for op, _ in plan.successors(INITIAL)]
    assert model.host_band(cached, "0.26.0", 1 << 30, 1 << 28) != model.host_band(INITIAL, "0.26.0", 1 << 30, 1 << 28)


def test_a_situation_keeps_what_decides_an_operation():
    """States that differ in what decides how vLLM handles an operation are different situations:
    a running (frozen) request against a preempted one against one queued, the pause mode, stale blocks
    against fresh, garbage against a checkpoint, and for a plain reload the model path it loads."""
    frozen = plan.run(INITIAL, [ops.sleep(0, "keep", 1)])
    preempted = plan.run(INITIAL, [ops.sleep(1, "keep", 1)])
    queued = plan.run(INITIAL, [ops.sleep(0), ops.Operation("generate_fresh")])
    assert plan.situation(frozen, ops.wake()).held == "running"
    assert (plan.situation(preempted, ops.wake()).held, plan.situation(preempted, ops.wake()).queued) == (
        "preempted",
        "none",
    )
    assert (plan.situation(queued, ops.wake()).held, plan.situation(queued, ops.wake()).queued) == ("none", "waiting")
    assert plan.situation(frozen, ops.wake()).pause == model.PAUSE_ALL
    assert plan.situation(queued, ops.wake()).pause == model.PAUSE_NEW
    pair = plan.run(queued, [ops.Operation("generate_cached"), ops.Operation("generate_cached")])
    assert (
        plan.situation(pair, ops.wake()).queued == "long pair"
        and plan.situation(pair, ops.sleep(1)).queued == "waiting"
    )
    stale = plan.run(INITIAL, [ops.Operation("generate_cached"), ops.reload("B")])
    assert plan.situation(stale, ops.RESET_PREFIX_CACHE).prefix == "stale"
    assert (
        plan.situation(plan.run(INITIAL, [ops.Operation("generate_cached")]), ops.RESET_PREFIX_CACHE).prefix == "fresh"
    )
    garbage = plan.run(INITIAL, [ops.sleep(2), ops.wake()])
    assert plan.situation(garbage, ops.reload()).garbage and plan.situation(garbage, ops.reload()).reload_path == "A"
    pushed = plan.run(INITIAL, [ops.reload("B")])
    assert (
        plan.situation(pushed, ops.reload()).reload_path == "B"
        and plan.situation(pushed, ops.reload("A")).reload_path is None
    )


WALK_SHARDS_OF_THE_CELL = '_CELL = cells.cell_from_env()\nSHARDS = shard_count("state_walk", _CELL.mode, _CELL.door)\n'


def test_the_walks_shards_are_the_bazel_shards():
    """test_state_walk.py defines one class per shard of the spec's SHARD_COUNTS["state_walk"] for its cell's
    front door and execution mode, as Bazel shards the cell (tools/defs.bzl)."""
    workspace = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    )
    walk = open(os.path.join(workspace, "tests", "sleep_wake", "test_state_walk.py"), encoding="utf-8").read()
    assert WALK_SHARDS_OF_THE_CELL in walk


def test_terminal_probes_reach_every_kind_of_terminal_pair_one_per_shard():
    probes = plan.terminal_probes()
    kinds = {
        (
            ops.terminal(p[-1], plan.run(INITIAL, p[:-1])),
            plan.run(INITIAL, p[:-1]).level,
            tuple(sorted(plan.run(INITIAL, p[:-1]).asleep_tags)),
        )
        for p in probes
    }
    assert (
        kinds
        == set(plan.terminal_pairs())
        == {
            (ops.FULL_WAKE_REMAPS, 1, ("kv_cache",)),
            (ops.FULL_WAKE_REMAPS, 1, ("weights",)),
            (ops.FULL_WAKE_REMAPS, 2, ("kv_cache",)),
            (ops.KV_FIRST_AFTER_LEVEL2, 2, ("kv_cache", "weights")),
            (ops.RELOAD_ASLEEP, 1, ("kv_cache", "weights")),
            (ops.RELOAD_ASLEEP, 1, ("weights",)),
            (ops.RELOAD_ASLEEP, 2, ("kv_cache", "weights")),
            (ops.RESUME_ASLEEP, 1, ("kv_cache",)),
            (ops.RESUME_ASLEEP, 1, ("kv_cache", "weights")),
            (ops.RESUME_ASLEEP, 1, ("weights",)),
            (ops.RESUME_ASLEEP, 2, ("kv_cache",)),
            (ops.RESUME_ASLEEP, 2, ("kv_cache", "weights")),
        }
    )
    for p in probes:
        assert ops.terminal(p[-1], plan.run(INITIAL, p[:-1])) and not any(
            ops.terminal(op, s) for s, op in plan.trace([p[:-1]])[0]
        )
    for door, _, mode in matrix.door_cells():
        assert len(plan.terminal_probes(door)) <= matrix.shard_count("state_walk", mode, door), (
            f"{door} {mode}: a probe ends its server's life, so each needs a shard of its own"
        )


# The most walks a shard of any cell may hold: with its server's start, two walks end within the minute the
# walk issue asks of a shard in either mode (tools/matrix.bzl SHARD_COUNTS; docs/design.md, "What was
# tried").
WALKS_PER_SHARD_MAX = 2


@pytest.mark.parametrize("door", matrix.FRONT_DOORS)
def test_every_shard_of_every_walk_cell_gets_walks_and_none_too_many(door):
    """Each GPU walk shard starts a server: one dealt no walk would start it for nothing and pass with no
    pair of its own; one dealt more than WALKS_PER_SHARD_MAX ends last. Every cell of every door, with the
    seeds and the spec's shard count for the cell's door and mode, as the cells use them."""
    for runner, mode in [(r, m) for d, r, m in matrix.door_cells() if d == door]:
        seed = plan.cell_seed(plan.SEED, matrix.cell_id(runner, mode))
        shards = matrix.shard_count("state_walk", mode, door)
        dealt = [len(walks) for walks, _ in plan.plan_shards(shards, seed, plan.MAX_STEPS, door)]
        assert min(dealt) >= 1, (
            f"{door} {runner}_{mode}: walks per shard {dealt}; lower SHARD_COUNTS['state_walk'][{door!r}][{mode!r}]"
        )
        assert max(dealt) <= WALKS_PER_SHARD_MAX, (
            f"{door} {runner}_{mode}: walks per shard {dealt}; raise SHARD_COUNTS['state_walk'][{door!r}][{mode!r}]"
        )


def _left_to_right(values, start=0):
    total = start
    for value in values:
        total = total + value
    return total


@pytest.mark.parametrize("door, runner, mode", matrix.door_cells())
def test_a_cells_deal_is_the_same_under_every_pythons_sum(monkeypatch, door, runner, mode):
    """The GPU runs Python 3.12, whose sum() compensates floating-point rounding; the CPU tiers ran 3.11,
    which adds left to right. A cell's walks go to the same shards either way, else the fake and engine
    tiers walk other shards than the GPU's and a replay names another shard's walks."""
    walks = plan.cell_walks(plan.cell_seed(plan.SEED, matrix.cell_id(runner, mode)), plan.MAX_STEPS, door)
    deals = []
    for total in (_left_to_right, math.fsum):
        monkeypatch.setattr(plan, "sum", total, raising=False)
        deals.append(plan.deal([plan.walk_millis(w) for w in walks], matrix.shard_count("state_walk", mode, door)))
    assert deals[0] == deals[1]


def test_terminal_pairs_are_never_planned():
    for walks, _ in plan.plan_shards(SHARDS, SEED, MAX_STEPS):
        for steps in plan.trace(walks):
            assert not [str(op) for s, op in steps if ops.terminal(op, s)]


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
    monkeypatch.setenv(plan.FILTER_VAR, "TestStateWalkShard2")
    walker = _RecordingWalker()
    assert plan.run_shard(walker, 2, 6, 100, 60) is None
    assert [(len(w), seed, shard) for w, seed, shard in walker.runs] == [(1, 100, 2)]
    assert [str(op) for op in walker.runs[0][0][0]] == ["sleep:1:abort:0", "wake:-"]


def test_a_replay_leaking_into_a_run_that_picks_no_shard_fails_loudly(monkeypatch):
    """SLEEPWAKE_WALK_REPLAY left in the environment of a full, unfiltered run: every shard would walk the
    replay instead of its share and pass, a whole cell green with no verdict on its pairs."""
    monkeypatch.setenv(plan.REPLAY_VAR, "sleep:1:abort:0,wake:-")
    monkeypatch.delenv(plan.FILTER_VAR, raising=False)
    walker = _RecordingWalker()
    with pytest.raises(oracle.Precondition, match="picks no shard"):
        plan.run_shard(walker, 2, 6, 100, 60)
    assert walker.runs == []


def test_a_documented_terminal_pair_leaves_the_state_the_model_predicts():
    """Where a terminal pair's divergence does not apply, the driver takes the state after it from the
    model's effect: a full wake wakes every tag, a kv-first wake wakes the KV cache, a reload refused
    while the weights are asleep changes nothing."""
    for probe in plan.terminal_probes():
        before = plan.run(INITIAL, probe[:-1])
        after = ops.effect(probe[-1], before)
        name = ops.terminal(probe[-1], before)
        if name == ops.FULL_WAKE_REMAPS:
            assert not after.asleep_tags and not after.paused and after.level is None, after.describe()
        elif name == ops.KV_FIRST_AFTER_LEVEL2:
            assert after.asleep_tags == {"weights"}
        else:
            assert after == before


def test_the_deal_counts_a_sleep_with_a_request_in_flight_at_its_own_cost():
    # Counted as a plain sleep, one shard of six took 18 of a cell's 49 and was the longest in every run.
    plain, in_flight = ops.sleep(1, "abort", 0), ops.sleep(1, "abort", 1)
    assert (
        plan.walk_millis([in_flight]) == 1000 * plan.step_seconds_table()["sleep_in_flight"] > plan.walk_millis([plain])
    )


def test_the_llm_doors_walk_is_the_model_without_what_the_door_cannot_send():
    """vllm.LLM streams nothing and makes one call at a time (door_host.CANNOT): its walk has no stream, no
    request in flight during a sleep and none waiting while paused or asleep, and every other pair of the
    states it reaches; planned, its shards cover exactly those pairs."""
    door = "llm"
    pairs = plan.reachable_pairs(door)
    assert pairs and pairs < plan.reachable_pairs()
    names = {op.name for _, op in pairs}
    assert "generate_stream" not in names and {"generate_fresh", "sleep", "wake", "reload"} <= names
    assert not any(op.name == "sleep" and op.params[2] for _, op in pairs)
    assert not any(op.name in ops.GENERATES and (sit.paused or sit.asleep_tags) for sit, op in pairs), "one waits"
    for state in plan.reachable_states(door):
        assert not state.queued and not state.held, state.describe()
        for op in ops.ALL:
            reason = ops.door_why_not(op, state, door)
            if reason:
                assert "llm door cannot" in reason and not op.applicable(state, door)
    # Every pair the door allows in a state it reaches: none left out but what it cannot send.
    for state in plan.reachable_states(door):
        for op in ops.ALL:
            if op.applicable(state) and not ops.door_why_not(op, state, door):
                assert plan.pair_of(state, op) in pairs, (state.describe(), str(op))
    shards = plan.plan_shards(SHARDS, SEED, MAX_STEPS, door)
    assert set().union(*(p for _, p in shards)) == pairs
    assert all(op.applicable(s, door) for w in plan.trace([x for ws, _ in shards for x in ws]) for s, op in w)
    assert plan.plan_shards(SHARDS, SEED, MAX_STEPS, "async_llm") == plan.plan_shards(SHARDS, SEED, MAX_STEPS)


def test_a_stopped_shard_records_its_coverage_and_keeps_the_failure_that_stopped_it():
    recorded = []
    with pytest.raises(AssertionError, match="walk.flags") as stopped:
        with plan.recorded_when_stopped(lambda: recorded.append("coverage")):
            raise AssertionError("walk.flags fired")
    assert recorded == ["coverage"] and not getattr(stopped.value, "__notes__", None)

    def unrecordable():
        raise OSError("disk full")

    # A recording that fails itself leaves the verdict with the oracle that stopped the walks.
    with pytest.raises(AssertionError, match="walk.flags") as stopped:
        with plan.recorded_when_stopped(unrecordable):
            raise AssertionError("walk.flags fired")
    assert stopped.value.__notes__ == ["the shard's walk coverage was not recorded: OSError('disk full')"]
    # A shard whose walks ran to the end records its coverage itself (test_state_walk.py), not here.
    with plan.recorded_when_stopped(lambda: recorded.append("again")):
        pass
    assert recorded == ["coverage"]
