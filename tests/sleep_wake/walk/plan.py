"""Coverage planning: which (state, operation) pairs exist, seeded walks that visit every one of them, and
how those walks are dealt out over shards (one server each).

A pair's state leaves host_cached out (pair_state): it turns true at a server's first level-1 wake of
the weights and nothing short of a restart turns it back, so pairs that differ only in it could not all
be visited by one server; no operation's precondition or effect depends on it, only the host bytes do.

Every walk ends with reset_ops, which brings any state back home (INITIAL, host_cached aside), so the
walks of a shard run one after the other on one server, and each can be replayed from a fresh one.
Everything here is deterministic: successors come in operations.ALL's order and sets are sorted by
sort keys, never iterated in hash order, so a seed gives the same walks under any PYTHONHASHSEED.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import random
import re
import zlib

from tests.sleep_wake.lib import oracle
from tests.sleep_wake.walk import cover, model
from tests.sleep_wake.walk import operations as ops
from tests.sleep_wake.walk.model import INITIAL, State

REPLAY_VAR = "SLEEPWAKE_WALK_REPLAY"
_SCRIPT = re.compile(r'^\s*(?:%s=)?"?([^"#]*)"?\s*(?:#.*)?$' % REPLAY_VAR)


@functools.lru_cache(maxsize=None)
def successors(state: State) -> tuple:
    """((operation, next state), ...) for every applicable operation, in operations.ALL's order."""
    return tuple((op, op.apply(state)) for op in ops.ALL if op.applicable(state))


def pair_state(state: State) -> State:
    return dataclasses.replace(state, host_cached=False)


def pair_key(pair) -> tuple:
    state, op = pair
    return state.sort_key(), str(op)


@functools.lru_cache(maxsize=None)
def reachable_states() -> tuple:
    """Every state reachable from INITIAL, in BFS order."""
    seen = {INITIAL: None}
    queue = collections.deque([INITIAL])
    while queue:
        for _, nxt in successors(queue.popleft()):
            if nxt not in seen:
                seen[nxt] = None
                queue.append(nxt)
    return tuple(seen)


def reachable_pairs() -> set:
    """{(pair_state(state), operation)} over every reachable state and its applicable operations."""
    return {(pair_state(s), op) for s in reachable_states() for op, _ in successors(s)}


# A step's seconds by its operation, only to deal the walks out so that the shards end together: the
# medians of the H200 walk at 24 cells per GPU (docs/bench/h200-2026-12-01.md, fifth section, run B:
# reloads 0.42-0.44 s, wakes 0.16-0.25 s, sleeps 0.07-0.08 s, a sleep with a request in flight 0.50 s on
# average: the request's start, its decoding and, for mode wait, its drain); anything else about 0.1 s.
# Counted as a plain sleep, the in-flight ones piled up: one shard of six held 18 of a cell's 49 and was
# the longest in every run of the sixth section. The twelfth session's means (run B, bazel_runs' "walk
# steps" line, checks included): reloads 0.45 s, wakes 0.18, sleeps 0.10, in flight 0.36, resets 0.06,
# generates 0.19-0.24; planned with those instead, the tour changed by 1% (239.8-246.8 s a cell against
# 242.5-244.6 s), so the deal's figures stay.
STEP_SECONDS = {"reload": 0.43, "wake": 0.2, "sleep": 0.08}
IN_FLIGHT_SLEEP_SECONDS = 0.5
OTHER_STEP_SECONDS = 0.1


def step_seconds(op) -> float:
    if op.name == "sleep" and op.params[2]:
        return IN_FLIGHT_SLEEP_SECONDS
    return STEP_SECONDS.get(op.name, OTHER_STEP_SECONDS)


def walk_seconds(walk) -> float:
    return sum(map(step_seconds, walk))


@functools.lru_cache(maxsize=None)
def plan_shards(shards: int, seed: int, max_steps: int) -> tuple:
    """((walks, pairs), ...) per shard: one plan over every reachable pair (plan_walks, seeded `seed`),
    its walks dealt out longest first (walk_seconds) to the shard with the least so far; a shard's
    pairs are those its walks are the first of the plan to visit, so the shards' pairs are disjoint and
    cover every reachable pair.

    Why one plan, not a plan per shard of the pairs: one tour over every pair needs the fewest extra
    operations (a plan per shard of six took 2277 steps where the first single plan took 1703: each
    crossed the whole state space for pairs dealt out one in six), and every walk starts at INITIAL
    either way, so whole walks can go to any shard."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    walks = plan_walks(reachable_pairs(), seed, max_steps)
    seconds = [walk_seconds(w) for w in walks]
    loads = [(0.0, k) for k in range(shards)]
    dealt = [[] for _ in range(shards)]
    for index in sorted(range(len(walks)), key=lambda i: (-seconds[i], i)):
        load, k = min(loads)
        loads[k] = (load + seconds[index], k)
        dealt[k].append(index)
    first_by = {}
    for index, steps in enumerate(trace(walks)):
        for state, op in steps:
            first_by.setdefault((pair_state(state), op), index)
    out = []
    for indices in dealt:
        mine = set(indices)
        out.append(([walks[i] for i in sorted(indices)], {p for p, i in first_by.items() if i in mine}))
    return tuple(out)


def cell_seed(seed: int, cell_id: str) -> int:
    """The seed of a cell's plan: every cell walks its own paths between the same pairs, so a matrix of
    four cells takes 3240 distinct (state, operation before, operation) paths where one shared
    plan takes 1188. crc32, not hash(): the same under any PYTHONHASHSEED and on every machine."""
    return seed + zlib.crc32(cell_id.encode()) % 10007


def reset_ops(state: State) -> list:
    """Operations that bring `state` home (INITIAL, but for host_cached, which the wake may turn on): a
    full wake (it also resumes a held stream), a prefix-cache
    reset (before the reload, which refuses to run under blocks of other weights), reload of A."""
    out = []
    if 0 < len(state.asleep_tags) < len(model.TAGS):
        out.append(ops.wake(sorted(state.asleep_tags)))  # a full wake here is the pinned divergence
    elif state.paused:
        out.append(ops.wake())
    if state.prefix_cached:
        out.append(ops.RESET_PREFIX_CACHE)
    if (state.weights, state.model_path) != ("A", "A"):
        out.append(ops.reload("A"))
    return out


def run(state: State, walk) -> State:
    for op in walk:
        state = op.apply(state)
    return state


def _first_path(src: State, goal) -> list | None:
    """Breadth first from src (successors in ALL's order): the operations up to and including the
    first edge for which goal(state, op, next state) holds, None if none does."""
    parent = {src: None}
    queue = collections.deque([src])
    while queue:
        state = queue.popleft()
        for op, nxt in successors(state):
            if goal(state, op, nxt):
                path = [op]
                while parent[state] is not None:
                    state, prev = parent[state]
                    path.append(prev)
                return path[::-1]
            if nxt not in parent:
                parent[nxt] = (state, op)
                queue.append(nxt)
    return None


def shortest_path(src: State, dst: State) -> list | None:
    """The fewest operations from src to dst (the first in ALL's order among equals), None if none."""
    return [] if src == dst else _first_path(src, lambda state, op, nxt: nxt == dst)


def _to_pair_state(src: State, dst: State) -> list:
    """The fewest operations from src to a state whose pair_state is dst (a pair's state with
    host_cached set may be reachable only through the level-1 wake that sets it)."""
    if pair_state(src) == dst:
        return []
    path = _first_path(src, lambda state, op, nxt: pair_state(nxt) == dst)
    if path is None:
        raise ValueError(f"{dst.describe()} is unreachable from {src.describe()}; plan only reachable pairs")
    return path


def _pair_edges(state: State) -> list:
    return [(op, pair_state(nxt)) for op, nxt in successors(state)]


def plan_walks(pairs, seed: int, max_steps: int) -> list:
    """Walks (lists of operations), to run in order on one server from INITIAL, that together visit
    every pair of `pairs` (reachable_pairs(); a subset must form, with the links that balance it, one
    tour through INITIAL); each at most max_steps long, its reset_ops tail included.

    One closed tour over the pairs' states (cover.tour: every pair once, plus the cheapest operations
    by step_seconds that balance it), cut into walks where it passes INITIAL, and where a walk would
    outgrow max_steps: there the walk resets and the next one goes back to where it left the tour.
    The seed orders the tour's choices at every state, so the operations around a pair vary from seed
    to seed. It took 1371-1384 steps (242-244 s by step_seconds) for the four cells' seeds, where a walk
    to the nearest unvisited pair with random operations mixed in took 1713-1782 (299-314 s); the
    tour's cheapest possible cost is 232.5 s."""
    reachable = {pair_state(s) for s in reachable_states()}
    required = []
    for state, op in sorted(pairs, key=pair_key):
        if state not in reachable or not op.applicable(state):
            raise ValueError(f"{op} in {state.describe()} is not a reachable pair: plan only pairs from "
                             "plan.reachable_pairs()")
        required.append((state, op, pair_state(op.apply(state))))
    if not required:
        return []
    circuit = cover.tour(required, INITIAL, _pair_edges, step_seconds, random.Random(seed))
    walks, i = [], 0
    while i < len(circuit):
        resume = circuit[i][0]
        walk, state, taken = _to_pair_state(INITIAL, resume), resume, 0
        while i < len(circuit):
            _, op, nxt = circuit[i]
            if len(walk) + 1 + len(reset_ops(nxt)) > max_steps:
                break
            walk.append(op)
            state, i, taken = nxt, i + 1, taken + 1
            if state == INITIAL:
                break
        if not taken:
            raise ValueError(f"max_steps={max_steps} is too short to reach a pair from {resume.describe()} "
                             "and reset; raise it")
        walks.append(walk + reset_ops(state))
    return walks


def trace(walks) -> list:
    """[[(state before, operation), ...] per walk], the walks run in order from INITIAL."""
    out, state = [], INITIAL
    for walk in walks:
        steps = []
        for op in walk:
            steps.append((state, op))
            state = op.apply(state)
        out.append(steps)
    return out


def coverage(walks) -> tuple[set, collections.Counter]:
    """(the pairs the walks visit, counts of consecutive operations (token, token) within a walk)."""
    return steps_coverage(trace(walks))


def steps_coverage(traces) -> tuple[set, collections.Counter]:
    """coverage() of steps already taken: [[(state before, operation), ...] per walk] (trace's shape)."""
    visited, consecutive = set(), collections.Counter()
    for steps in traces:
        visited |= {(pair_state(s), op) for s, op in steps}
        consecutive.update((str(a), str(b)) for (_, a), (_, b) in zip(steps, steps[1:]))
    return visited, consecutive


def unvisited(shard_pairs, walks) -> set:
    return set(shard_pairs) - coverage(walks)[0]


def shrink_candidates(walk, failing_index: int, start: State = INITIAL) -> list:
    """Shorter scripts, each replayable from INITIAL on a fresh server, that end with the failing step
    of `walk` (which started in `start`), shortest first: the fewest operations to the failing step's
    state then its operation; the same through the step before it (the failure may need that pair); the
    walk's prefix cut at the failure (after the way to `start`)."""
    if not 0 <= failing_index < len(walk):
        raise ValueError(f"failing_index {failing_index} is outside the walk's {len(walk)} steps")
    states = [start]
    for op in walk[:failing_index]:
        states.append(op.apply(states[-1]))
    failing = walk[failing_index]
    candidates = [shortest_path(INITIAL, states[-1]) + [failing]]
    if failing_index:
        candidates.append(shortest_path(INITIAL, states[-2]) + walk[failing_index - 1:failing_index + 1])
    candidates.append(shortest_path(INITIAL, start) + list(walk[:failing_index + 1]))
    out = []
    for c in sorted(candidates, key=len):
        if c not in out:
            out.append(c)
    return out


def script(seed: int, shard: int, walk) -> str:
    """The one-line replay of a walk: the variable the walk's runner reads, and where it came from."""
    return f'{REPLAY_VAR}="{",".join(str(op) for op in walk)}"  # seed {seed}, shard {shard}'


def with_replay(failure: oracle.OracleFailure, seed: int, shard: int, walk, index: int, start: State,
                on: str, pick: str) -> oracle.OracleFailure:
    """The failure of step `index` of `walk` (begun in `start`) with its shortest replays
    (shrink_candidates) as SLEEPWAKE_WALK_REPLAY lines; `on`: what a replay runs on, `pick`: the
    --test_filter of the failing shard."""
    lines = [script(seed, shard, c) for c in shrink_candidates(walk, index, start)]
    first, *rest = failure.failures()
    detail = (f"replay, shortest first, on {on} ({REPLAY_VAR} runs it in every shard; {pick} picks one):\n    "
              + "\n    ".join(lines))
    return oracle.OracleFailure(first.oracle_id, first.what, first.measured, first.bound, first.relation, rest,
                                detail)


def parse_script(text: str) -> list:
    """The operations of a replay line (script's output) or of the variable's bare value."""
    m = _SCRIPT.match(text)
    if not m:
        raise ValueError(f'not a walk replay: {text!r}; expected {REPLAY_VAR}="op,op,..." or "op,op,..."')
    return [ops.parse(token) for token in m.group(1).split(",") if token.strip()]


def terminal_probes() -> list:
    """One walk per kind of partial state (level, the tag still asleep) ending in the full wake that the
    known divergence full_wake_remaps_resident_pool makes the server's last usable call: the shortest way
    there from INITIAL, then the wake. The test gives probe i to shard i % SHARDS, after its walks."""
    best = {}
    for state in reachable_states():
        if not 0 < len(state.asleep_tags) < len(model.TAGS):
            continue
        kind = (state.level, tuple(sorted(state.asleep_tags)))
        path = shortest_path(INITIAL, state)
        if path is not None and (kind not in best or len(path) < len(best[kind])):
            best[kind] = path
    return [best[kind] + [ops.wake()] for kind in sorted(best)]


def run_shard(walker, shard: int, shards: int, seed: int, max_steps: int):
    """Runs on walker (the server's or the engine tier's: anything with run(walks, seed, shard)) the
    shard's walks of plan_shards and returns (the shard's pairs, its walks); or, when
    SLEEPWAKE_WALK_REPLAY holds a shrunk failing walk, runs that one walk and returns None."""
    replay = os.environ.get(REPLAY_VAR)
    if replay:
        walker.run([parse_script(replay)], seed, shard)
        return None
    walks, pairs = plan_shards(shards, seed, max_steps)[shard]
    walker.run(walks, seed, shard)
    return pairs, walks
