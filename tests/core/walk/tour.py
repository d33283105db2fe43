"""A seeded closed tour of a small directed graph that traverses every required edge, at the least number of
extra edges: the directed Chinese postman (Edmonds and Johnson, 1973).

The walk's planner (plan.py) uses it on the model's situations: a node is where a state stands (plan.standing),
a required edge is a pair of the cell's share, from where it is offered to where it leads. A node whose
required edges lead in more often than out must be left again along other edges; the fewest such deadheads
solve a transportation problem between the nodes with surplus and those with deficit (successive shortest
paths with potentials), each unit along a shortest path. Required and deadhead edges together are balanced,
so an Eulerian circuit through them exists where they are connected (Hierholzer); the seed orders each
node's edges, so two seeds walk other orders between the same pairs.

Generic on purpose: nodes are any hashable values, edges (node, label, node), and every order comes from the
callers' lists, never from hash order, so a seed gives one tour under any PYTHONHASHSEED.
"""

from __future__ import annotations

import collections
import heapq
import random
from collections.abc import Callable, Hashable, Iterable

Edge = tuple  # (node, label, next node); a deadhead's label is None


def shortest_paths(source: Hashable, out_edges: Callable[[Hashable], Iterable]) -> dict:
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


def path_to(parent: dict, target: Hashable) -> list[Edge]:
    """[(node, label, next node), ...] from shortest_paths' source to target."""
    edges = []
    while parent[target] is not None:
        node, label = parent[target]
        edges.append((node, label, target))
        target = node
    return edges[::-1]


def balancing_flow(surplus: dict, deficit: dict, distance: Callable[[Hashable, Hashable], int]) -> list:
    """[(from node, to node, units), ...] moving every unit of surplus to deficit at the least total
    distance(from, to): the transportation problem, by successive shortest paths with potentials.
    surplus and deficit are {node: units} with equal totals, in the callers' order."""
    sources, sinks = list(surplus), list(deficit)
    if sum(surplus.values()) != sum(deficit.values()):
        raise ValueError(f"unbalanced: {sum(surplus.values())} units of surplus, {sum(deficit.values())} of deficit")
    n_s, n_t = len(sources), len(sinks)
    cost = [[distance(s, t) for t in sinks] for s in sources]
    flow = [[0] * n_t for _ in sources]
    left_s, left_t = [surplus[s] for s in sources], [deficit[t] for t in sinks]
    # Residual nodes: 0 the super source, 1..S the sources, S+1..S+T the sinks, S+T+1 the super sink.
    sink = n_s + n_t + 1
    potential = [0] * (sink + 1)
    while sum(left_s):
        dist: list = [None] * (sink + 1)
        prev: list = [None] * (sink + 1)
        dist[0] = 0
        heap = [(0, 0)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u]:
                continue
            for v, c in _residual(u, n_s, n_t, cost, flow, left_s, left_t):
                nd = d + c + potential[u] - potential[v]
                if dist[v] is None or nd < dist[v]:
                    dist[v], prev[v] = nd, u
                    heapq.heappush(heap, (nd, v))
        if dist[sink] is None:
            raise ValueError("no path moves the remaining surplus to a deficit: the graph is not strongly connected")
        for v in range(sink + 1):
            if dist[v] is not None:
                potential[v] += dist[v]
        path, v = [], sink
        while v != 0:
            path.append((prev[v], v))
            v = prev[v]
        units = min(_capacity(u, v, n_s, n_t, flow, left_s, left_t) for u, v in path)
        for u, v in path:
            if u == 0:
                left_s[v - 1] -= units
            elif v == sink:
                left_t[u - n_s - 1] -= units
            elif u <= n_s:
                flow[u - 1][v - n_s - 1] += units
            else:
                flow[v - 1][u - n_s - 1] -= units
    return [(sources[i], sinks[j], flow[i][j]) for i in range(n_s) for j in range(n_t) if flow[i][j]]


def _residual(u, n_s, n_t, cost, flow, left_s, left_t):
    sink = n_s + n_t + 1
    if u == 0:
        return [(i + 1, 0) for i in range(n_s) if left_s[i]]
    if u <= n_s:  # a source: forward to every sink
        return [(n_s + 1 + j, cost[u - 1][j]) for j in range(n_t)]
    if u == sink:
        return []
    j = u - n_s - 1
    out = [(i + 1, -cost[i][j]) for i in range(n_s) if flow[i][j]]
    if left_t[j]:
        out.append((sink, 0))
    return out


def _capacity(u, v, n_s, n_t, flow, left_s, left_t):
    sink = n_s + n_t + 1
    if u == 0:
        return left_s[v - 1]
    if v == sink:
        return left_t[u - n_s - 1]
    if u <= n_s:
        return float("inf")
    return flow[v - 1][u - n_s - 1]


def deadheads(required: list[Edge], out_edges: Callable[[Hashable], Iterable]) -> list[Edge]:
    """The fewest extra edges [(node, None, next node), ...] that balance `required`: every unit of imbalance
    along a shortest path (shortest_paths over out_edges)."""
    balance: collections.Counter = collections.Counter()
    order: dict = {}
    for node, _, nxt in required:
        order.setdefault(node, None)
        order.setdefault(nxt, None)
        balance[node] -= 1
        balance[nxt] += 1
    # More edges in than out: the tour must leave along extra edges (a surplus of arrivals).
    surplus = {n: balance[n] for n in order if balance[n] > 0}
    deficit = {n: -balance[n] for n in order if balance[n] < 0}
    trees = {s: shortest_paths(s, out_edges) for s in surplus}

    def distance(s, t) -> int:
        if t not in trees[s]:
            raise ValueError("a node with missing departures cannot reach one with missing arrivals")
        return len(path_to(trees[s], t))

    extra = []
    for s, t, units in balancing_flow(surplus, deficit, distance):
        extra += [(a, None, b) for a, _, b in path_to(trees[s], t)] * units
    return extra


def circuits(edges: list[Edge], start: Hashable, rng: random.Random) -> list[list[Edge]]:
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
