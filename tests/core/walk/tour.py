"""A seeded closed tour of a small directed graph that traverses every required edge, at the least number of
extra edges: the directed Chinese postman (Edmonds and Johnson, 1973).

The walk's planner (plan.py) uses it on the model's situations: a node is where a state stands (plan.standing),
a required edge is a pair of the cell's share, from one of the nodes it is offered at to one of those it leads
to. A node whose required edges lead in more often than out must be left again along other edges (moves); the
choice of each pair's ends and the fewest moves come from one minimum-cost flow (postman: successive shortest
paths with potentials) from every pair's arrival to some pair's departure. Required edges and moves together
are balanced, so Eulerian circuits through them exist (Hierholzer); the seed orders each node's edges, so two
seeds walk other orders between the same pairs. The circuit's length is the least of the relaxation, which
lets a pair lead from any node it is offered at to any it may lead to: a floor under every walk of the pairs.

Generic on purpose: nodes are any hashable values, edges (node, label, node), and every order comes from the
callers' lists, never from hash order, so a seed gives one tour under any PYTHONHASHSEED.
"""

from __future__ import annotations

import collections
import heapq
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

Edge = tuple  # (node, label, next node); a deadhead's label is None


def shortest_paths(source: Any, out_edges: Callable[[Any], Iterable]) -> dict:
    """{node: (previous node, label) or None for source} of a breadth-first search from source:
    out_edges(node) -> [(label, next node), ...] in a fixed order; the first path found wins."""
    parent: dict = {source: None}
    queue = collections.deque([source])
    while queue:
        node = queue.popleft()
        for label, nxt in out_edges(node):
            if nxt not in parent:
                parent[nxt] = (node, label)
                queue.append(nxt)
    return parent


def path_to(parent: dict, target: Any) -> list[Edge]:
    """[(node, label, next node), ...] from shortest_paths' source to target."""
    edges = []
    while parent[target] is not None:
        node, label = parent[target]
        edges.append((node, label, target))
        target = node
    return edges[::-1]


def circuits(edges: Sequence[Edge], start: Hashable, rng: random.Random) -> list[list[Edge]]:
    """The edges of a balanced multigraph as closed circuits (Hierholzer), each node's edges in an order the
    rng shuffles: the first from start, then one from the first node (in edges' order) of each part the
    ones before did not reach."""
    out: dict = collections.defaultdict(list)
    for edge in edges:
        out[edge[0]].append(edge)
    for node in out:
        rng.shuffle(out[node])
    found = []
    for node in [start] + [e[0] for e in edges]:
        if not out[node]:
            continue
        stack: list = [(node, None)]
        circuit: list = []
        while stack:
            at, via = stack[-1]
            if out[at]:
                edge = out[at].pop()
                stack.append((edge[2], edge))
            else:
                stack.pop()
                if via is not None:
                    circuit.append(via)
        found.append(circuit[::-1])
    if sum(map(len, found)) != len(edges):
        raise ValueError(f"the circuits take {sum(map(len, found))} of {len(edges)} edges: the graph is not balanced")
    return found


def min_cost_flow(n: int, arcs: list, source: int, sink: int) -> list:
    """The flow on each arc [(from, to, capacity, cost), ...] (nodes 0..n-1, capacity None: unbounded, cost >= 0)
    of a maximum flow from source to sink at the least cost: successive shortest paths with potentials
    (Dijkstra on reduced costs), each pushing as much as its path carries."""
    to: list = []
    cap: list = []
    cost: list = []
    out: list = [[] for _ in range(n)]
    for u, v, c, w in arcs:
        for a, b, cc, ww in ((u, v, INFINITE if c is None else c, w), (v, u, 0, -w)):
            out[a].append(len(to))
            to.append(b)
            cap.append(cc)
            cost.append(ww)
    potential = [0] * n
    while True:
        dist: list = [None] * n
        via: list = [None] * n
        dist[source] = 0
        heap = [(0, source)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u]:
                continue
            for e in out[u]:
                if cap[e] <= 0:
                    continue
                v = to[e]
                nd = d + cost[e] + potential[u] - potential[v]
                if dist[v] is None or nd < dist[v]:
                    dist[v], via[v] = nd, e
                    heapq.heappush(heap, (nd, v))
        if dist[sink] is None:
            break
        for v in range(n):
            if dist[v] is not None:
                potential[v] += dist[v]
        path, v = [], sink
        while v != source:
            e = via[v]
            path.append(e)
            v = to[e ^ 1]
        units = min(cap[e] for e in path)
        for e in path:
            cap[e] -= units
            cap[e ^ 1] += units
    return [cap[2 * k + 1] for k in range(len(arcs))]


INFINITE = 1 << 40


def postman(required: list, moves: dict) -> list[Edge]:
    """A balanced multigraph over every required edge at the fewest moves: required is [(sources, label,
    targets), ...], each label offered at any node of sources and leading to any of targets (a relaxation: the
    caller's states decide which), moves {node: [next node, ...]} the one-step moves. Returns each label's edge
    (source, label, target) as chosen, then the moves [(node, None, next node), ...] that balance them: a
    minimum-cost flow from every label's arrival to some label's departure, a move costing one."""
    nodes = list(
        dict.fromkeys([n for s, _, t in required for n in (*s, *t)] + [n for a in moves for n in (a, *moves[a])])
    )
    at = {n: k for k, n in enumerate(nodes)}
    arrive = list(dict.fromkeys(tuple(t) for _, _, t in required))  # labels grouped by where they may lead
    depart = list(dict.fromkeys(tuple(s) for s, _, _ in required))  # and by where they are offered
    count_a = collections.Counter(tuple(t) for _, _, t in required)
    count_d = collections.Counter(tuple(s) for s, _, _ in required)
    source, sink = len(nodes) + len(arrive) + len(depart), len(nodes) + len(arrive) + len(depart) + 1
    arcs: list = []
    for g, targets in enumerate(arrive):
        arcs.append((source, len(nodes) + g, count_a[targets], 0))
        arcs += [(len(nodes) + g, at[t], None, 0) for t in targets]
    for g, sources in enumerate(depart):
        arcs += [(at[s], len(nodes) + len(arrive) + g, None, 0) for s in sources]
        arcs.append((len(nodes) + len(arrive) + g, sink, count_d[sources], 0))
    first_move = len(arcs)
    arcs += [(at[a], at[b], None, 1) for a in moves for b in moves[a] if a != b]
    flow = min_cost_flow(len(nodes) + len(arrive) + len(depart) + 2, arcs, source, sink)
    if flow[0 : len(arcs)] and sum(flow[k] for k, arc in enumerate(arcs) if arc[0] == source) != len(required):
        raise ValueError("no moves carry every arrival to a departure: the nodes are not strongly connected")
    # Each group's units, node by node, to its labels in the callers' order.
    lands: dict = collections.defaultdict(list)
    leaves: dict = collections.defaultdict(list)
    for k, (u, v, _, _) in enumerate(arcs[:first_move]):
        if flow[k] and len(nodes) <= u < len(nodes) + len(arrive):
            lands[arrive[u - len(nodes)]] += [nodes[v]] * flow[k]
        if flow[k] and len(nodes) + len(arrive) <= v < source:
            leaves[depart[v - len(nodes) - len(arrive)]] += [nodes[u]] * flow[k]
    chosen = [(leaves[tuple(s)].pop(), label, lands[tuple(t)].pop()) for s, label, t in required]
    extra = [
        (nodes[u], None, nodes[v]) for k, (u, v, _, _) in enumerate(arcs) if k >= first_move for _ in range(flow[k])
    ]
    return chosen + extra
