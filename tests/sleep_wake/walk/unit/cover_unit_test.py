import collections
import itertools
import random

import pytest

from tests.sleep_wake.walk import cover


def _transports(surplus, deficit):
    """Every integer transport plan from surplus to deficit ({(s, t): units}), by brute force."""
    sources, sinks = list(surplus), list(deficit)
    cells = [(s, t) for s in sources for t in sinks]
    for units in itertools.product(range(max(surplus.values()) + 1), repeat=len(cells)):
        plan = dict(zip(cells, units))
        if all(sum(plan[s, t] for t in sinks) == surplus[s] for s in sources) and \
                all(sum(plan[s, t] for s in sources) == deficit[t] for t in sinks):
            yield plan


@pytest.mark.parametrize("seed", range(12))
def test_the_balancing_flow_is_the_cheapest_transport(seed):
    rng = random.Random(seed)
    sources, sinks = ["a", "b", "c"][:rng.randint(1, 3)], ["x", "y", "z"][:rng.randint(1, 3)]
    total = rng.randint(len(sources) + len(sinks), 6)
    surplus = dict(zip(sources, _split(rng, total, len(sources))))
    deficit = dict(zip(sinks, _split(rng, total, len(sinks))))
    cost = {(s, t): rng.randint(1, 9) for s in sources for t in sinks}
    flow = cover.balancing_flow(surplus, deficit, lambda s, t: cost[s, t])
    moved = collections.Counter()
    for s, t, units in flow:
        assert units > 0
        moved[s] += units
        moved["to " + t] += units
    assert all(moved[s] == surplus[s] for s in sources) and all(moved["to " + t] == deficit[t] for t in sinks)
    best = min(sum(cost[k] * u for k, u in plan.items()) for plan in _transports(surplus, deficit))
    assert sum(cost[s, t] * units for s, t, units in flow) == best


def _split(rng, total, parts):
    cuts = sorted(rng.sample(range(1, total), parts - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def test_the_balancing_flow_reroutes_what_it_moved_first():
    # The cheapest single move (a -> x) is not part of the cheapest transport: b can only go cheaply to x.
    cost = {("a", "x"): 1, ("a", "y"): 2, ("b", "x"): 2, ("b", "y"): 10}
    flow = cover.balancing_flow({"a": 1, "b": 1}, {"x": 1, "y": 1}, lambda s, t: cost[s, t])
    assert sorted(flow) == [("a", "y", 1), ("b", "x", 1)]


def test_an_unbalanced_transport_is_refused():
    with pytest.raises(ValueError, match="unbalanced: 2 units of surplus, 1 of deficit"):
        cover.balancing_flow({"a": 2}, {"x": 1}, lambda s, t: 1)


# A ring 0 -> 1 -> 2 -> 3 -> 0 with a shortcut 0 -> 2 ("s") and a dear way back 2 -> 0 ("d").
RING = {0: [("r01", 1), ("s", 2)], 1: [("r12", 2)], 2: [("d", 0), ("r23", 3)], 3: [("r30", 0)]}
RING_COST = {"r01": 1.0, "r12": 1.0, "r23": 1.0, "r30": 1.0, "s": 5.0, "d": 5.0}


def test_deadheads_balance_the_required_edges_at_the_least_cost():
    # The shortcut required once: node 2 then has an arrival too many, node 0 a departure too many; the
    # cheapest way from 2 back to 0 is 2 -> 3 -> 0 (2.0), not the one step "d" (5.0).
    required = [(0, "s", 2)]
    extra = cover.deadheads(required, RING.get, RING_COST.get)
    assert extra == [(2, "r23", 3), (3, "r30", 0)]


def test_the_tour_takes_every_edge_once_in_one_closed_chain():
    required = [(0, "r01", 1), (1, "r12", 2), (0, "s", 2), (3, "r30", 0)]
    circuit = cover.tour(required, 0, RING.get, RING_COST.get, random.Random(1))
    assert circuit[0][0] == 0 and circuit[-1][2] == 0
    assert all(a[2] == b[0] for a, b in zip(circuit, circuit[1:]))
    assert collections.Counter(circuit) - collections.Counter(required + cover.deadheads(
        required, RING.get, RING_COST.get)) == collections.Counter()
    assert len(circuit) == len(required) + len(cover.deadheads(required, RING.get, RING_COST.get))


def test_the_seed_orders_the_tour():
    # Node 0 is left three times (two required loops and a ring): the seed picks their order.
    graph = {0: [("a", 1), ("b", 2), ("c", 3)], 1: [("a1", 0)], 2: [("b2", 0)], 3: [("c3", 0)]}
    required = [(0, "a", 1), (1, "a1", 0), (0, "b", 2), (2, "b2", 0), (0, "c", 3), (3, "c3", 0)]
    tours = {tuple(cover.tour(required, 0, graph.get, lambda _: 1.0, random.Random(seed))) for seed in range(20)}
    assert len(tours) > 1
    assert cover.tour(required, 0, graph.get, lambda _: 1.0, random.Random(3)) == \
        cover.tour(required, 0, graph.get, lambda _: 1.0, random.Random(3))


def test_a_graph_that_cannot_close_the_tour_is_refused():
    one_way = {0: [("go", 1)], 1: []}
    with pytest.raises(ValueError, match="not strongly connected"):
        cover.deadheads([(0, "go", 1)], one_way.get, lambda _: 1.0)
    with pytest.raises(ValueError, match="not connected or not balanced"):
        cover.euler_circuit([(0, "go", 1), (1, "back", 0), (2, "loop", 2)], 0, random.Random(0))
