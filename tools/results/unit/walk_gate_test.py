"""The state walk's gate of a cell, from its shards' walk_coverage records: the union of their walked pairs
against the door's, the probes that ran against the door's, and every shard of the spec present."""

from tools.results import walk_gate


def _row(pairs, probes=(), **extra) -> dict:
    return {"visited_pairs": list(pairs), "door_pairs": 3, "door_probes": 1, "terminal_probes": list(probes), **extra}


def test_the_union_counts_a_pair_two_shards_walked_once():
    # Shard 0's share is a, shard 1's b and c; shard 0's walks crossed b on the way: 3 pairs, not 4.
    gate = walk_gate.judge({0: _row(["a", "b"], ["probe"]), 1: _row(["b", "c"])}, 2)
    assert gate.full and (gate.pairs_walked, gate.door_pairs, gate.probes_ran) == (3, 3, 1)


def test_a_pair_no_shard_walked_leaves_the_cell_partial_even_where_each_shard_passed():
    gate = walk_gate.judge({0: _row(["a"], ["probe"]), 1: _row(["b"])}, 2)
    assert gate.reasons == ("2 of the door's 3 pairs walked",)


def test_shards_that_disagree_on_the_door_or_record_no_pairs_leave_the_cell_partial():
    gate = walk_gate.judge({0: _row(["a", "b", "c"], ["probe"]), 1: {**_row([]), "door_pairs": 4}}, 2)
    assert "the shards' records do not name one count of the door's pairs and probes" in gate.reasons
    gate = walk_gate.judge({0: _row(["a", "b", "c"], ["probe"]), 1: {"door_pairs": 3, "door_probes": 1}}, 2)
    assert "a shard recorded no list of the pairs it walked, so no union can be counted" in gate.reasons


def test_a_cell_without_records_is_partial():
    gate = walk_gate.judge({}, 3)
    assert not gate.full and gate.reasons[0].startswith("3 of 3 shards recorded no coverage")
