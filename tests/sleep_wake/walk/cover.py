"""A seeded closed tour of a directed graph that traverses every required edge, at the least total cost
of the extra edges it needs: the directed Chinese postman (Edmonds and Johnson, 1973).

The walk's planner (plan.py) uses it on the model's (state, operation) graph: each reachable pair is a
required edge and an operation's cost is its seconds on a GPU (plan.step_seconds). A node whose required
edges lead in more often than out must be left again along other edges; the cheapest such deadheads
solve a transportation problem between the nodes with surplus and those with deficit (successive
shortest paths with potentials), each unit along a cheapest path. Required and deadhead edges together
are balanced, so an Eulerian circuit through them exists (Hierholzer); the seed orders each node's
edges, so two seeds walk other paths between the same pairs.

Generic on purpose: nodes are any hashable values, edges are (node, label, node) with a cost, and every
order comes from the callers' lists, never from hash order, so a seed gives one tour under any
PYTHONHASHSEED.
"""

from __future__ import annotations

import collections
import heapq
import random


def cheapest_paths(source, out_edges, cost):
    """(dist, parent) of Dijkstra from source: out_edges(node) -> [(label, next node), ...] in a fixed
    order, cost(label) > 0; parent[node] = (previous node, label); ties keep the first found."""
    dist, parent = {source: 0.0}, {source: None}
    heap, count = [(0.0, 0, source)], 1
    done = set()
    while heap:
        d, _, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for label, nxt in out_edges(node):
            nd = d + cost(label)
            if nxt not in dist or nd < dist[nxt] - 1e-9:
                dist[nxt], parent[nxt] = nd, (node, label)
                heapq.heappush(heap, (nd, count, nxt))
                count += 1
    return dist, parent


def path_to(parent, target) -> list:
    """[(node, label, next node), ...] from cheapest_paths' source to target."""
    edges = []
    while parent[target] is not None:
        node, label = parent[target]
        edges.append((node, label, target))
        target = node
    return edges[::-1]


def balancing_flow(surplus: dict, deficit: dict, distance) -> list:
    """[(from node, to node, units), ...] moving every unit of surplus to deficit at the least total
    distance(from, to): the transportation problem, by successive shortest paths with potentials.
    surplus and deficit are {node: units} with equal totals, in the callers' order."""
    sources, sinks = list(surplus), list(deficit)
    if sum(surplus.values()) != sum(deficit.values()):
        raise ValueError(f"unbalanced: {sum(surplus.values())} units of surplus, {sum(deficit.values())} of deficit")
    cost = [[distance(s, t) for t in sinks] for s in sources]
    flow = [[0] * len(sinks) for _ in sources]
    left_s, left_t = [surplus[s] for s in sources], [deficit[t] for t in sinks]
    # Nodes of the residual graph: 0 the super source, 1..S the sources, S+1..S+T the sinks, S+T+1 the sink.
    n_s, n_t = len(sources), len(sinks)
    sink = n_s + n_t + 1
    potential = [0.0] * (sink + 1)
    while sum(left_s):
        dist = [float("inf")] * (sink + 1)
        prev = [None] * (sink + 1)
        dist[0] = 0.0
        heap = [(0.0, 0)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u] + 1e-12:
                continue
            for v, c in _residual(u, n_s, n_t, cost, flow, left_s, left_t):
                nd = d + c + potential[u] - potential[v]
                if nd < dist[v] - 1e-12:
                    dist[v], prev[v] = nd, u
                    heapq.heappush(heap, (nd, v))
        if dist[sink] == float("inf"):
            raise ValueError("no path moves the remaining surplus to a deficit: is the graph strongly connected?")
        for v in range(sink + 1):
            if dist[v] < float("inf"):
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
        return [(i + 1, 0.0) for i in range(n_s) if left_s[i]]
    if u <= n_s:  # a source: forward to every sink, back to the super source is never useful
        return [(n_s + 1 + j, cost[u - 1][j]) for j in range(n_t)]
    if u == sink:  # a path ends here
        return []
    j = u - n_s - 1
    out = [(i + 1, -cost[i][j]) for i in range(n_s) if flow[i][j]]
    if left_t[j]:
        out.append((sink, 0.0))
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


def deadheads(required, out_edges, cost) -> list:
    """The extra edges [(node, label, next node), ...] that make `required` balanced at the least total
    cost: every unit of imbalance along a cheapest path (cheapest_paths over out_edges)."""
    balance = collections.Counter()
    order = []
    for node, _, nxt in required:
        for n in (node, nxt):
            if n not in balance:
                order.append(n)
            balance[n] += 0
        balance[node] -= 1
        balance[nxt] += 1
    # More edges in than out: the tour must leave along extra edges (a surplus of arrivals).
    surplus = {n: balance[n] for n in order if balance[n] > 0}
    deficit = {n: -balance[n] for n in order if balance[n] < 0}
    trees = {s: cheapest_paths(s, out_edges, cost) for s in surplus}

    def distance(s, t):
        dist = trees[s][0]
        if t not in dist:
            raise ValueError("a node with missing departures cannot reach one with missing arrivals: "
                             "the graph is not strongly connected")
        return dist[t]

    extra = []
    for s, t, units in balancing_flow(surplus, deficit, distance):
        extra += path_to(trees[s][1], t) * units
    return extra


def euler_circuit(edges, start, rng: random.Random) -> list:
    """The edges of a balanced, connected multigraph in one closed circuit from start (Hierholzer),
    each node's edges taken in an order the rng shuffles."""
    out = collections.defaultdict(list)
    for edge in edges:
        out[edge[0]].append(edge)
    for node in out:
        rng.shuffle(out[node])
    stack, circuit = [(start, None)], []
    while stack:
        node, via = stack[-1]
        if out[node]:
            edge = out[node].pop()
            stack.append((edge[2], edge))
        else:
            stack.pop()
            if via is not None:
                circuit.append(via)
    circuit.reverse()
    if len(circuit) != len(edges):
        raise ValueError(f"the circuit from {start!r} takes {len(circuit)} of {len(edges)} edges: the graph "
                         "is not connected or not balanced")
    return circuit


def tour(required, start, out_edges, cost, rng: random.Random) -> list:
    """A closed circuit from start over every required edge once and the cheapest deadheads."""
    return euler_circuit(list(required) + deadheads(required, out_edges, cost), start, rng)
