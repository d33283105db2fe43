"""The starts replay (starts.py) on waves small enough to count by hand."""

import pytest

from tools.bench import starts
from tools.bench.starts import ENDS, FRESH, LENDS, Unit


def units(key: str, kinds: str) -> list[Unit]:
    """One unit per letter: l lends, e ends, f fresh."""
    kind = {"l": LENDS, "e": ENDS, "f": FRESH}
    return [Unit(f"{key}{i}", key, kind[k]) for i, k in enumerate(kinds)]


def test_one_configuration_starts_as_many_servers_as_run_at_once():
    # Two jobs: units 0 and 1 start a server each, every later one takes a parked server over.
    r = starts.replay(units("a", "llllll"), jobs=2, slots=2)
    assert (r.starts, r.taken_over, r.evicted) == (2, 4, 0)


def test_servers_that_end_come_after_the_shards_that_lend():
    # Probes first: each of the first two ends its server, so the lenders after them start two more.
    assert starts.replay(units("a", "eellll"), jobs=2, slots=2).starts == 4
    # Probes last: they end the servers the lenders handed on.
    assert starts.replay(units("a", "lllle" + "e"), jobs=2, slots=2).starts == 2


def test_a_fresh_unit_never_takes_a_parked_server_over():
    # a0 starts and parks; f evicts it for a start of its own and stops; a2 finds nothing parked.
    r = starts.replay(units("a", "lfl"), jobs=1, slots=1)
    assert (r.starts, r.evicted, r.taken_over) == (3, 1, 0)


def test_another_configuration_evicts_what_is_parked_when_no_slot_is_free():
    wave = units("a", "ll") + units("b", "ll")
    r = starts.replay(wave, jobs=1, slots=1)
    assert (r.starts, r.evicted, r.parked) == (2, 1, {"b": [4.0]})
    # With a slot to spare the a-server stays parked beside b's.
    assert starts.replay(wave, jobs=1, slots=2).parked == {"a": [2.0], "b": [4.0]}


def test_the_next_wave_takes_over_what_the_last_one_left_parked():
    waves = [(units("a", "ll"), 1), (units("a", "ll"), 1)]
    assert starts.replay_waves(waves, slots=1, carry=True) == 1
    assert starts.replay_waves(waves, slots=1, carry=False) == 2


def test_the_floor_counts_fresh_units_and_servers_that_end():
    wave = units("a", "llee") + units("b", "lll") + units("c", "ff")
    assert starts.floor(wave) == 2 + 1 + 2
    assert starts.replay(wave, jobs=1, slots=1).starts >= starts.floor(wave)


def test_a_kind_it_does_not_know_is_refused():
    with pytest.raises(ValueError, match="kind"):
        starts.replay([Unit("x", "a", "borrows")], jobs=1, slots=1)
