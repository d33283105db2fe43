"""The state walk's gate of a cell, from its shards' walk_coverage records: the union of their walked pairs
that reach the worker against the door's, the union over the door's cells of every walked pair against the
door's, the probes that ran against the door's, and every shard of the spec present."""

from tools.results import walk_gate


def _row(pairs, probes=(), worker=None, **extra) -> dict:
    """A shard's record of a door of pairs a, b, c, of which a reaches the worker."""
    return {
        "visited_pairs": list(pairs),
        "worker_visited_pairs": [p for p in pairs if p == "a"] if worker is None else list(worker),
        "door_pairs": 3,
        "worker_pairs": 1,
        "door_probes": 1,
        "terminal_probes": list(probes),
        **extra,
    }


def test_the_union_counts_a_pair_two_shards_walked_once():
    # Shard 0's share is a, shard 1's b and c; shard 0's walks crossed b on the way: 3 pairs, not 4.
    gate = walk_gate.judge({0: _row(["a", "b"], ["probe"]), 1: _row(["b", "c"])}, 2)
    assert gate.full and (gate.pairs_walked, gate.door_pairs, gate.probes_ran) == (3, 3, 1)
    assert (gate.worker_walked, gate.worker_pairs) == (1, 1)


def test_a_pair_no_shard_walked_leaves_the_cell_partial_even_where_each_shard_passed():
    gate = walk_gate.judge({0: _row(["a"], ["probe"]), 1: _row(["b"])}, 2)
    assert gate.reasons == ("2 of the door's 3 pairs walked",)


def test_the_doors_cells_together_walk_the_pairs_above_the_worker():
    """The deal: cell X walks a and b, cell Y a and c. Each is full with the other's records; alone, or with a
    door cell that walked no c, it is partial."""
    x = {0: _row(["a", "b"], ["probe"])}
    y = {0: _row(["a", "c"], ["probe"])}
    door = list(x.values()) + list(y.values())
    assert walk_gate.judge(x, 1, door).full and walk_gate.judge(y, 1, door).full
    assert walk_gate.judge(x, 1, list(x.values())).reasons == (
        "2 of the door's 3 pairs walked by its door's cells together",
    )


def test_a_cell_that_walks_a_worker_pair_fewer_times_than_its_door_has_cells_is_partial():
    """Cell Y left the worker's pair a to cell X: the door's union is whole, the cell is not."""
    x = {0: _row(["a", "b"], ["probe"])}
    y = {0: _row(["b", "c"], ["probe"])}
    gate = walk_gate.judge(y, 1, list(x.values()) + list(y.values()))
    assert gate.reasons == ("0 of the door's 1 pairs that reach the worker walked in this cell",)
    assert walk_gate.judge(x, 1, list(x.values()) + list(y.values())).full


def test_shards_that_disagree_on_the_door_or_record_no_pairs_leave_the_cell_partial():
    gate = walk_gate.judge({0: _row(["a", "b", "c"], ["probe"]), 1: {**_row([]), "door_pairs": 4}}, 2)
    assert "the shards' records do not name one count of the door's pairs, worker pairs and probes" in gate.reasons
    gate = walk_gate.judge({0: _row(["a", "b", "c"], ["probe"]), 1: {"door_pairs": 3, "door_probes": 1}}, 2)
    assert "a shard recorded no list of the pairs it walked, so no union can be counted" in gate.reasons


def test_a_cell_without_records_is_partial():
    gate = walk_gate.judge({}, 3)
    assert not gate.full and gate.reasons[0].startswith("3 of 3 shards recorded no coverage")
