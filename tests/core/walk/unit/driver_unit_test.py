"""The one walk driver on a recording subject: the shard's verdict (coverage.verdict, what both tiers' walk
tests call) counts the steps that ran, never the plan, so a walker that runs nothing, or skips one
operation, fails walk.pairs_visited; a terminal probe checks the pin and, where the divergence does not
apply, the state the model then predicts."""

import dataclasses
import functools

import pytest

from tests.core import measure, oracle, thresholds
from tests.core.walk import coverage, driver, model, observations, plan
from tests.core.walk import operations as ops
from tools.matrix import HTTP
from tools.results import walk_gate

SHARDS, SEED = 4, 11
V = "0.26.0"


class RecordingSubject:
    """A tier that records every call and observes the model's own prediction (a server that behaves)."""

    replay_on = "nothing (a unit test)"

    def __init__(self):
        self.calls = []

    def pick(self, shard):
        return f"shard {shard}"

    def _record(self, *call):
        self.calls.append(call)

    def generate(self, op, before, after, where):
        self._record("op", str(op))

    sleep = wake = reload = reset_prefix_cache = push = pause = resume = cancel_queued = generate

    def check_state(self, state, where):
        self._record("check", state)

    def probe_cache(self, state, where):
        self._record("probe_cache", state)

    def look_at_emptied_cache(self, state, where):
        self._record("look", state)

    def terminal(self, op, state, pin, where):
        self._record("terminal", str(op), pin.applies)
        return observations.Terminal({k: v for k, v in pin.expected.items() if k != "gauge"}, "as pinned")

    def judged(self, oracle_ids):
        self._record("judged", *oracle_ids)

    def ran(self, step, index):
        self._record("ran", str(step.op), index)


class SkippingWalker(driver.Walker):
    """A walker with a bug: it never runs one operation, yet goes on as if it had."""

    def __init__(self, subject, version, skip: str):
        super().__init__(subject, version)
        self.skip = skip

    def step(self, op):
        if str(op) == self.skip:
            self.state = op.apply(self.state)
            return
        super().step(op)


class NoOpWalker(driver.Walker):
    """A walker that runs nothing at all."""

    def run(self, walks, seed, shard):
        return None


def _judged(walker, recorder, shard=0) -> coverage.Covered:
    """The shard's walks on walker, judged as tests/sleep_wake/test_state_walk.py judges a GPU shard: its
    walk_coverage entry through recorder, then walk.pairs_visited."""
    pairs, walks = plan.run_shard(walker, shard, SHARDS, SEED)
    record = functools.partial(coverage.record_walk_coverage, recorder, seed=SEED, door=HTTP, probed=[], completed=True)
    return coverage.verdict(walker, shard, pairs, walks, record)


def _unvisited(walker, tmp_path) -> tuple[oracle.OracleFailure, dict]:
    """The failure of walker's shard 0 and the walk_coverage entry recorded before it."""
    recorder = measure.Recorder(path=str(tmp_path / "measurements.jsonl"))
    with pytest.raises(oracle.OracleFailure) as failure:
        _judged(walker, recorder)
    assert failure.value.oracle_id == "walk.pairs_visited"
    [entry] = recorder.entries()
    assert entry["key"] == "walk_coverage" and entry["unvisited"] and entry["value"] < entry["shard_pairs"]
    return failure.value, entry


def test_a_walker_that_runs_every_step_visits_every_pair_of_its_shard(monkeypatch, tmp_path):
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    subject = RecordingSubject()
    walker = driver.Walker(subject, V)
    recorder = measure.Recorder(path=str(tmp_path / "measurements.jsonl"))
    done = _judged(walker, recorder)
    walks, pairs = plan.plan_shards(SHARDS, SEED)[0]
    [entry] = recorder.entries()
    assert (entry["value"], entry["shard_pairs"], entry["unvisited"]) == (len(pairs), len(pairs), [])
    assert not done.missing and entry["completed"] and entry["walks"] == len(walks)
    ran = [c[1] for c in subject.calls if c[0] == "op"]
    assert walks and ran == [str(op) for walk in walks for op in walk] and walker.step_index == len(ran)
    assert sum(1 for c in subject.calls if c[0] == "check") == len(ran)  # every step's state is checked
    assert [c[1] for c in subject.calls if c[0] == "ran"] == ran  # and recorded once it ran


def test_a_walker_that_runs_nothing_fails_its_shard(monkeypatch, tmp_path):
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    _, pairs = plan.plan_shards(SHARDS, SEED)[0]
    failure, entry = _unvisited(NoOpWalker(RecordingSubject(), V), tmp_path)
    assert failure.measured == len(pairs) and entry["value"] == 0 and entry["steps"] == 0
    assert entry["unvisited"] == sorted(map(plan.describe_pair, pairs))


def test_a_walker_that_skips_one_operation_fails_its_shard_on_that_operations_pairs(monkeypatch, tmp_path):
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    skipped = "sleep:1:keep:1"
    _, pairs = plan.plan_shards(SHARDS, SEED)[0]
    failure, entry = _unvisited(SkippingWalker(RecordingSubject(), V, skipped), tmp_path)
    theirs = {p for p in pairs if str(p[1]) == skipped}
    assert failure.measured == len(theirs) and entry["value"] == len(pairs) - len(theirs)
    assert entry["unvisited"] == sorted(map(plan.describe_pair, theirs))


def test_the_shards_records_together_are_the_cells_gate(monkeypatch, tmp_path):
    """Each shard records the door's pairs its steps walked (its probes' terminal pairs left out: no reachable
    pair) and the door's counts: the union over every shard is the door's pairs, so the report's gate
    (tools/results/walk_gate.py) finds the cell full, and partial without one shard."""
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    recorder = measure.Recorder(path=str(tmp_path / "measurements.jsonl"))
    for shard in range(SHARDS):
        walker = driver.Walker(RecordingSubject(), V)
        pairs, walks = plan.run_shard(walker, shard, SHARDS, SEED)
        # A probe ends a server's usable life: each on a walker of its own (a shard of the GPU's runs one).
        probed = [driver.Walker(RecordingSubject(), V).probe(p) for p in plan.terminal_probes()[shard::SHARDS]]
        record = functools.partial(
            coverage.record_walk_coverage, recorder, seed=SEED, door=HTTP, probed=probed, completed=True
        )
        coverage.verdict(walker, shard, pairs, walks, record)
    rows = {r["shard"]: r for r in recorder.entries()}
    reachable = set(map(plan.describe_pair, plan.reachable_pairs()))
    assert all(set(r["visited_pairs"]) <= reachable for r in rows.values())
    gate = walk_gate.judge(rows, SHARDS)
    assert gate.full and gate.pairs_walked == len(reachable) == gate.door_pairs
    assert gate.probes_ran == gate.door_probes == len(plan.terminal_probes())
    del rows[SHARDS - 1]
    assert not walk_gate.judge(rows, SHARDS).full


def test_the_door_cells_records_together_judge_each_cell(monkeypatch, tmp_path):
    """The HTTP door's cells each walk their share (plan.deal): with every cell's records each is full; with only
    the two cells that hold the same half of the pairs above the worker (one per runner), partial."""
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    by_cell = {}
    for cell in plan.door_cells(HTTP):
        recorder = measure.Recorder(path=str(tmp_path / f"{'_'.join(cell)}.jsonl"))
        for shard in range(SHARDS):
            walker = driver.Walker(RecordingSubject(), V)
            pairs, walks = plan.run_shard(walker, shard, SHARDS, SEED, HTTP, cell)
            probed = [driver.Walker(RecordingSubject(), V).probe(p) for p in plan.terminal_probes()[shard::SHARDS]]
            record = functools.partial(
                coverage.record_walk_coverage, recorder, seed=SEED, door=HTTP, probed=probed, completed=True
            )
            coverage.verdict(walker, shard, pairs, walks, record)
        by_cell[cell] = {r["shard"]: r for r in recorder.entries()}
    door = [r for rows in by_cell.values() for r in rows.values()]
    gates = [walk_gate.judge(rows, SHARDS, door) for rows in by_cell.values()]
    assert all(g.full for g in gates), [g.reasons for g in gates]
    assert {(g.worker_walked, g.worker_pairs) for g in gates} == {(len(plan.worker_pairs()),) * 2}
    same_half = [("mrv1", "eager"), ("mrv2", "graph")]
    assert plan.share(HTTP, same_half[0]) == plan.share(HTTP, same_half[1])
    rows = [r for cell in same_half for r in by_cell[cell].values()]
    assert not walk_gate.judge(by_cell[same_half[0]], SHARDS, rows).full


def test_the_emptied_cache_is_looked_at_where_the_plan_sends_no_request():
    subject = RecordingSubject()
    walker = driver.Walker(subject, V)
    for op in [ops.Operation("generate_cached"), ops.sleep(1), ops.wake()]:
        walker.step(op)
    assert [c[0] for c in subject.calls].count("probe_cache") == 1  # after the generate: the blocks are there
    assert subject.calls[-2][0] == "look"  # awake again after the level-1 sleep emptied them: look once


def test_a_step_the_model_cannot_predict_is_a_precondition():
    walker = driver.Walker(RecordingSubject(), V)
    walker.step(ops.sleep(2))
    with pytest.raises(oracle.Precondition, match="not applicable"):
        walker.step(ops.wake(["kv_cache"]))  # terminal: only a probe makes it


def test_a_probe_checks_the_pin_and_where_it_does_not_apply_the_documented_state(monkeypatch):
    subject = RecordingSubject()
    walker = driver.Walker(subject, V)
    probe = [ops.sleep(1), ops.wake(["kv_cache"]), ops.reload("B")]
    assert walker.probe(probe) == ops.RELOAD_ASLEEP
    # the driver judges the subject's observation; the pin applies on the release: no further check
    assert subject.calls[-2:] == [("terminal", "reload:B", True), ("judged", ops.TERMINAL_ORACLES[ops.RELOAD_ASLEEP])]
    assert pair_ran(walker, ops.reload("B"))
    entry = thresholds.KNOWN_DIVERGENCES[ops.FULL_WAKE_REMAPS]
    monkeypatch.setitem(
        thresholds.KNOWN_DIVERGENCES,
        ops.FULL_WAKE_REMAPS,
        dataclasses.replace(entry, versions=tuple(v for v in entry.versions if v != V)),
    )
    subject = RecordingSubject()
    walker = driver.Walker(subject, V)
    walker.probe([ops.sleep(1), ops.wake(["weights"]), ops.wake()])
    assert subject.calls[-4] == ("terminal", "wake:-", False) and subject.calls[-2] == (
        "check",
        model.INITIAL.__class__(host_cached=True),
    )  # fixed: the documented full wake, then the state's checks


def pair_ran(walker, op) -> bool:
    return any(s.op == op for walk in walker.executed for s in walk)


def test_a_failure_carries_its_replay():
    class Failing(RecordingSubject):
        def wake(self, op, before, after, where):
            oracle.fail("flags.is_sleeping", "a planted failure", True, False)

    walker = driver.Walker(Failing(), V)
    with pytest.raises(oracle.OracleFailure) as failure:
        walker.run([[ops.sleep(1), ops.wake()]], SEED, 3)
    assert "SLEEPWAKE_WALK_REPLAY=" in str(failure.value) and failure.value.oracle_id == "flags.is_sleeping"
