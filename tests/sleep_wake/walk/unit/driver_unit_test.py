"""The one walk driver on a recording tier: coverage is counted from the steps that ran, never from the
plan, so a walker that runs nothing, or skips one operation, leaves pairs unvisited; a terminal probe
checks the pin and, where the divergence does not apply, the state the model then predicts."""

import dataclasses

import pytest

from tests.sleep_wake.lib import oracle, thresholds
from tests.sleep_wake.walk import driver, model, plan
from tests.sleep_wake.walk import operations as ops

SHARDS, SEED, MAX_STEPS = 4, 11, 60
V = "0.26.0"


class RecordingTier:
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

    sleep = wake = reload = reset_prefix_cache = generate

    def check_state(self, state, where):
        self._record("check", state)

    def probe_cache(self, state, where):
        self._record("probe_cache", state)

    def look_at_emptied_cache(self, state, where):
        self._record("look", state)

    def terminal(self, op, state, pin, where):
        self._record("terminal", str(op), pin.applies)

    def ran(self, step, index):
        self._record("ran", str(step.op), index)


class SkippingWalker(driver.Walker):
    """A walker with a bug: it never runs one operation, yet goes on as if it had."""

    def __init__(self, tier, version, skip: str):
        super().__init__(tier, version)
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


def _missing(walker, shard=0):
    pairs, _ = plan.run_shard(walker, shard, SHARDS, SEED, MAX_STEPS)
    return set(pairs) - walker.coverage()[0]


def test_a_walker_that_runs_every_step_visits_every_pair_of_its_shard(monkeypatch):
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    tier = RecordingTier()
    walker = driver.Walker(tier, V)
    assert _missing(walker) == set()
    ran = [c[1] for c in tier.calls if c[0] == "op"]
    walks, _ = plan.plan_shards(SHARDS, SEED, MAX_STEPS)[0]
    assert walks and ran == [str(op) for walk in walks for op in walk] and walker.step_index == len(ran)
    assert sum(1 for c in tier.calls if c[0] == "check") == len(ran)  # every step's state is checked
    assert [c[1] for c in tier.calls if c[0] == "ran"] == ran  # and recorded once it ran


def test_a_walker_that_runs_nothing_visits_nothing(monkeypatch):
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    _, pairs = plan.plan_shards(SHARDS, SEED, MAX_STEPS)[0]
    assert _missing(NoOpWalker(RecordingTier(), V)) == set(pairs)


def test_a_walker_that_skips_one_operation_leaves_its_pairs_unvisited(monkeypatch):
    monkeypatch.delenv(plan.REPLAY_VAR, raising=False)
    missing = _missing(SkippingWalker(RecordingTier(), V, "sleep:1:keep:1"))
    assert missing and {str(op) for _, op in missing} == {"sleep:1:keep:1"}


def test_the_emptied_cache_is_looked_at_where_the_plan_sends_no_request():
    tier = RecordingTier()
    walker = driver.Walker(tier, V)
    for op in [ops.Operation("generate_cached"), ops.sleep(1), ops.wake()]:
        walker.step(op)
    assert [c[0] for c in tier.calls].count("probe_cache") == 1  # after the generate: the blocks are there
    assert tier.calls[-2][0] == "look"  # awake again after the level-1 sleep emptied them: look once


def test_a_step_the_model_cannot_predict_is_a_precondition():
    walker = driver.Walker(RecordingTier(), V)
    walker.step(ops.sleep(2))
    with pytest.raises(oracle.Precondition, match="not applicable"):
        walker.step(ops.wake(["kv_cache"]))  # terminal: only a probe makes it


def test_a_probe_checks_the_pin_and_where_it_does_not_apply_the_documented_state(monkeypatch):
    tier = RecordingTier()
    walker = driver.Walker(tier, V)
    probe = [ops.sleep(1), ops.wake(["kv_cache"]), ops.reload("B")]
    assert walker.probe(probe) == ops.RELOAD_ASLEEP
    assert tier.calls[-1] == ("terminal", "reload:B", True)  # applies on the release: no further check
    assert pair_ran(walker, ops.reload("B"))
    entry = thresholds.KNOWN_DIVERGENCES[ops.FULL_WAKE_REMAPS]
    monkeypatch.setitem(
        thresholds.KNOWN_DIVERGENCES,
        ops.FULL_WAKE_REMAPS,
        dataclasses.replace(entry, versions=tuple(v for v in entry.versions if v != V)),
    )
    tier = RecordingTier()
    walker = driver.Walker(tier, V)
    walker.probe([ops.sleep(1), ops.wake(["weights"]), ops.wake()])
    assert tier.calls[-3] == ("terminal", "wake:-", False) and tier.calls[-2] == (
        "check",
        model.INITIAL.__class__(host_cached=True),
    )  # fixed: the documented full wake, then the state's checks


def pair_ran(walker, op) -> bool:
    return any(s.op == op for walk in walker.executed for s in walk)


def test_a_failure_carries_its_replay():
    class Failing(RecordingTier):
        def wake(self, op, before, after, where):
            oracle.fail("flags.is_sleeping", "a planted failure", True, False)

    walker = driver.Walker(Failing(), V)
    with pytest.raises(oracle.OracleFailure) as failure:
        walker.run([[ops.sleep(1), ops.wake()]], SEED, 3)
    assert "SLEEPWAKE_WALK_REPLAY=" in str(failure.value) and failure.value.oracle_id == "flags.is_sleeping"
