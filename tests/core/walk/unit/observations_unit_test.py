"""The driver's check of a terminal pair (observations.check_terminal) on observations made by hand: what a
tier saw as the pin says passes, any key seen otherwise fails the pair's terminal oracle, and a gauge
pinned "unchanged" must be the gauge of the state probed, never another."""

import pytest

from tests.core import expect, metrics, oracle, thresholds
from tests.core.walk import model, observations
from tests.core.walk import operations as ops

V = "0.26.0"
LEVEL1 = model.State(level=1, asleep_tags=frozenset(model.TAGS), pause=model.PAUSE_ALL, gauge_level=1)
PIN = thresholds.divergence(ops.RELOAD_ASLEEP, V)  # observed: 500, asleep, the gauge unchanged, a request held


def _as_pinned(**otherwise) -> observations.Terminal:
    seen = {**PIN.expected, "gauge": expect.fmt(metrics.GAUGE_BY_LEVEL[1]), **otherwise}
    return observations.Terminal(seen, "CUDA error: invalid argument")


def _check(observed: observations.Terminal, judged: list) -> None:
    observations.check_terminal(observed, PIN, LEVEL1, V, "probe reload:- from (level 1)", judged.extend)


def test_an_observation_as_pinned_passes_and_names_the_oracle_it_checked():
    judged: list = []
    _check(_as_pinned(), judged)
    assert judged == [ops.TERMINAL_ORACLES[ops.RELOAD_ASLEEP]]


@pytest.mark.parametrize(
    "key,value",
    [
        ("status", 200),
        ("is_sleeping", False),
        ("request", "golden"),
        ("gauge", expect.fmt(metrics.GAUGE_AWAKE)),  # a failed reload that wrote the gauge
    ],
)
def test_any_key_seen_otherwise_fails_the_terminal_oracle(key, value):
    judged: list = []
    with pytest.raises(oracle.OracleFailure) as failure:
        _check(_as_pinned(**{key: value}), judged)
    assert failure.value.oracle_id == ops.TERMINAL_ORACLES[ops.RELOAD_ASLEEP] and key in str(failure.value)
    assert judged == [failure.value.oracle_id]  # told before it checked: a tier counts the failing check too


def test_a_key_the_tier_cannot_observe_is_left_out_not_failed():
    """The engine tier reads no gauge: the pin's gauge is not compared where no gauge was seen."""
    seen = {k: v for k, v in PIN.expected.items() if k != "gauge"}
    _check(observations.Terminal(seen, "''"), [])
