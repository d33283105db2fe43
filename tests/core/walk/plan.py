"""Coverage planning: which situation pairs exist, seeded walks that visit every one of
them, and how those walks are dealt out over shards (one server each).

A pair is an operation in a *situation*: the part of the model's state that decides how vLLM handles
the operation (Situation). The state itself (model.State) carries more, so that every observation is
predicted: which checkpoint computed the cached blocks or a held request's first tokens, what kinds of
requests wait, the gauge written last, the host allocator's cached block. Covering every state's every
operation would take tens of thousands of steps; covering every situation's every operation takes a
few thousand, and each cell's seed reaches the situations through other states.

Every walk ends with reset_ops, which brings any state home (INITIAL, host_cached aside: it turns true
at a server's first level-1 wake of the weights and nothing short of a restart turns it back), so the
walks of a shard run one after the other on one server, and each can be replayed from a fresh one.
Everything here is deterministic: successors come in operations.ALL's order and sets are sorted by
sort keys, never iterated in hash order, so a seed gives the same walks under any PYTHONHASHSEED.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import random
import re
import sys
import zlib
from typing import Any

from tests.core import oracle
from tests.core.walk import model, tour
from tests.core.walk import operations as ops
from tests.core.walk.model import INITIAL, State
from tools import matrix
from tools.matrix import HTTP

REPLAY_VAR = "SLEEPWAKE_WALK_REPLAY"
FILTER_VAR = "TESTBRIDGE_TEST_ONLY"  # Bazel's --test_filter, as the test sees it
_SCRIPT = re.compile(r'^\s*(?:%s=)?"?([^"#]*)"?\s*(?:#.*)?$' % REPLAY_VAR)
# What each kind of step costs on a GPU (plan.step_millis), to deal the walks out so that the shards
# end together: the walk's own medians, kept as data (step_seconds.json, beside this file) so that a new
# measurement changes no code.
WALK_DIR = os.path.dirname(os.path.abspath(__file__))
STEP_SECONDS_FILE = os.path.join(WALK_DIR, "step_seconds.json")
# Which pairs a cell's plan covers (SHARE_VAR): its share of its door's (CELL_SHARE: plan.deal, the GPU matrix,
# whose cells of a door together walk every pair), or every pair of its door (DOOR_SHARE: a run of one cell,
# the fake tier's and the mutants', which must see every pair itself).
SHARE_VAR = "SLEEPWAKE_WALK_SHARE"
CELL_SHARE, DOOR_SHARE = "cell", "door"
# The suite's seed: each GPU cell's plan is seeded from it and the cell's id (cell_seed), the engine tier's
# with it alone.
SEED = 20261201
# A cell's plan written ahead by a Bazel action (write_plan.py): planning a cell (its reachable pairs, then
# the walks over them) costs seconds of CPU, which every shard's process of every cell paid before its
# first step. The file names the seed, the shard count, the door, the cell and its share, and the digest of
# the planner's sources it was planned with; a process whose plan differs in any of them plans for itself.
PLANNED_VAR = "SLEEPWAKE_WALK_PLAN"
PLANNER_SOURCES = ("model.py", "operations.py", "plan.py", "tour.py")


@dataclasses.dataclass(frozen=True)
class Situation:
    """What decides how vLLM handles an operation: where the executor's pools are (level, asleep_tags),
    the scheduler's pause (model.PAUSES: none, new requests only, or all: a keep's, which steps no running
    request; scheduler.py schedule), whether garbage serves, whether the long prompt's cached blocks were
    computed with the weights that serve ("fresh") or others ("stale"), the request a keep froze (held:
    "running" with its KV blocks under a level-0 keep, "preempted" to the waiting queue by a cache reset,
    which recomputes it when it runs), the requests sent while paused that wait in the queue (queued:
    "waiting", or, for a wake or a /resume, which run them, "long pair" where two of the long prompt wait,
    the second to hit the first one's blocks),
    for a generate_cached sent while paused whether a long prompt already waits (its request is then the
    second), and for a reload without a path, the checkpoint it loads and whether a push put other weights
    in the pool (pushed: the reload reverts them, TRL #5312). A pair is a situation and an operation: a
    situation pair."""

    level: int | None
    asleep_tags: tuple
    pause: str | None
    garbage: bool
    prefix: str
    held: str = "none"
    queued: str = "none"
    reload_path: str | None = None
    pushed: bool = False
    long_waiting: bool = False

    @property
    def paused(self) -> bool:
        return self.pause is not None

    def describe(self) -> str:
        where = "awake" if self.level is None else f"level {self.level}"
        parts = [where]
        if self.asleep_tags:
            parts.append("asleep " + "+".join(self.asleep_tags))
        if self.paused:
            parts.append("paused (all)" if self.pause == model.PAUSE_ALL else "paused (new requests)")
        parts.append("garbage weights" if self.garbage else "a checkpoint serves")
        if self.prefix != "none":
            parts.append(f"prefix cached ({self.prefix})")
        if self.held != "none":
            parts.append(f"a held request {self.held}")
        if self.queued != "none":
            parts.append(f"requests {self.queued}")
        if self.long_waiting:
            parts.append("a long prompt waiting")
        if self.reload_path:
            parts.append(f"model path {self.reload_path}")
        if self.pushed:
            parts.append("other weights pushed")
        return ", ".join(parts)


def situation(state: State, op) -> Situation:
    held = "running" if state.held_kv else ("preempted" if state.held else "none")
    # Two long prompts waiting differ from one only where the waiting requests run: at a wake or a /resume.
    pair = "long_pair" in state.queued and op.name in ("wake", "resume")
    queued = "long pair" if pair else ("waiting" if state.queued else "none")
    prefix = "none" if state.prefix is None else ("fresh" if state.prefix == model.served(state) else "stale")
    plain_reload = op.name == "reload" and op.params[0] is None
    return Situation(
        state.level,
        tuple(sorted(state.asleep_tags)),
        state.pause,
        state.weights is None,
        prefix,
        held,
        queued,
        state.model_path if plain_reload else None,
        plain_reload and state.weights not in (None, state.model_path),
        op.name == "generate_cached" and "long" in state.queued,
    )


def pair_of(state: State, op) -> tuple:
    return situation(state, op), op


def pair_key(pair) -> tuple:
    sit, op = pair
    return (
        -1 if sit.level is None else sit.level,
        sit.asleep_tags,
        sit.pause or "",
        sit.garbage,
        sit.prefix,
        sit.held,
        sit.queued,
        sit.long_waiting,
        sit.reload_path or "",
        sit.pushed,
        str(op),
    )


def describe_pair(pair) -> str:
    sit, op = pair
    return f"{op} in {sit.describe()}"


@functools.cache
def successors(state: State, door: str = HTTP) -> tuple:
    """((operation, next state), ...) for every operation applicable through `door`, in operations.ALL's
    order."""
    return tuple((op, op.apply(state)) for op in ops.ALL if op.applicable(state, door))


@functools.cache
def reachable_states(door: str = HTTP) -> tuple:
    """Every state reachable from INITIAL through `door`, in BFS order."""
    seen = {INITIAL: None}
    queue = collections.deque([INITIAL])
    while queue:
        for _, nxt in successors(queue.popleft(), door):
            if nxt not in seen:
                seen[nxt] = None
                queue.append(nxt)
    return tuple(seen)


def _reachable_pairs(door: str = HTTP) -> frozenset:
    return frozenset(_graph(door).pairs)


def reachable_pairs(door: str = HTTP) -> set:
    """{(situation, operation)} over every state reachable through `door` and its applicable operations."""
    return set(_reachable_pairs(door))


@functools.cache
def step_seconds_table() -> dict:
    with open(STEP_SECONDS_FILE, encoding="utf-8") as f:
        return json.load(f)["seconds"]


def step_kind(op) -> str:
    """The row of step_seconds.json an operation's cost is read from."""
    if op.name == "sleep" and op.params[2]:
        return "sleep_in_flight"
    kinds = ("reload", "wake", "sleep", "reset_prefix_cache", "push", "pause", "resume")
    return op.name if op.name in kinds else "generate"


def step_millis(op) -> int:
    """What a step costs, in whole milliseconds: the deal adds integers, whose sums are exact. Sums of
    float seconds were not the same under every Python (3.12's sum() compensates rounding, 3.11's does
    not), so walks of equal cost broke their ties apart and the GPU (3.12) and the CPU tiers dealt the
    same plan differently."""
    return round(step_seconds_table()[step_kind(op)] * 1000)


def walk_millis(walk) -> int:
    return sum(map(step_millis, walk))


def planner_digest() -> str:
    """The digest of the sources that plan (PLANNER_SOURCES): a plan written by other code is not this
    code's plan."""
    digest = hashlib.sha256()
    for name in PLANNER_SOURCES:
        with open(os.path.join(WALK_DIR, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read() + b"\0")
    return digest.hexdigest()


@functools.cache
def written_plan() -> dict | None:
    """The plan the file PLANNED_VAR names holds (write_plan.contents), if it was planned by this code; None
    where the variable is unset. A file of other sources is refused: it would walk another plan."""
    path = os.environ.get(PLANNED_VAR)
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        written = json.load(f)
    if written.get("planner") != planner_digest():
        raise ValueError(
            f"{PLANNED_VAR}={path} was planned by other sources of tests/core/walk than these; "
            "rebuild it (bazel test writes it) or unset the variable"
        )
    return written


def _written(door: str, seed: int | None = None, shards: int | None = None, cell=None) -> dict | None:
    """The written plan where it is for this door (and seed, shard count and cell's share, where given), else
    None."""
    written = written_plan()
    if written is None or written["door"] != door:
        return None
    if seed is not None and (written["seed"], written["shards"], written["cell"]) != (
        seed,
        shards,
        None if cell is None else list(cell),
    ):
        return None
    return written


# --- the deal: which cells of a door walk a pair --------------------------------------------------
def door_cells(door: str) -> tuple:
    """The (runner, mode) cells the GPU matrix runs the walk on through `door` (tools/matrix.bzl), in the
    spec's order."""
    return tuple((runner, mode) for d, runner, mode in matrix.door_cells() if d == door)


@functools.cache
def worker_pairs(door: str = HTTP) -> frozenset:
    """The door's pairs whose path reaches the worker (operations.reaches_worker) in some state of their
    situation: where the runner and the execution mode decide, so every cell of the door walks them."""
    g = _graph(door)
    return frozenset(
        g.pairs[k] for s, edges in zip(g.states, g.edges) for op, _, k in edges if ops.reaches_worker(op, s)
    )


@functools.cache
def deal(door: str = HTTP) -> dict:
    """{(runner, mode): frozenset of pairs} for every cell of `door` (door_cells): every pair that reaches
    the worker (worker_pairs), and its part of the rest, which are decided above the worker and run the same
    code in every cell. Those are dealt over the cells of each runner in turn (pair_key order, the i-th to
    the cell (i + the runner's index) modulo its cells), so each is walked once per runner and each cell of
    a runner holds as many as its neighbours, a different half under each runner where a runner has two.
    Derived from the model alone, so every shard of every cell knows every cell's share."""
    cells = door_cells(door)
    if not cells:
        raise ValueError(f"the {door} door has no walk cell in tools/matrix.bzl; deal its pairs over none")
    runners = list(dict.fromkeys(runner for runner, _ in cells))
    worker = worker_pairs(door)
    above = sorted(_reachable_pairs(door) - worker, key=pair_key)
    out = {}
    for r, runner in enumerate(runners):
        mine = [cell for cell in cells if cell[0] == runner]
        for k, cell in enumerate(mine):
            out[cell] = worker | frozenset(p for i, p in enumerate(above) if (i + r) % len(mine) == k)
    return out


def share(door: str = HTTP, cell=None) -> frozenset:
    """The pairs a cell's plan covers: its part of the deal, or with cell None every pair of the door."""
    if cell is None:
        return frozenset(_reachable_pairs(door))
    dealt = deal(door)
    if tuple(cell) not in dealt:
        raise ValueError(f"{cell} is no walk cell of the {door} door; its cells: {sorted(dealt)}")
    return dealt[tuple(cell)]


def share_of_env(door: str, runner: str, mode: str):
    """The cell a process's plan is for (share's argument): (runner, mode), or None where SHARE_VAR asks for
    every pair of the door."""
    wanted = os.environ.get(SHARE_VAR, CELL_SHARE)
    if wanted not in (CELL_SHARE, DOOR_SHARE):
        raise ValueError(f"{SHARE_VAR}={wanted!r}: expected {CELL_SHARE!r} or {DOOR_SHARE!r}")
    return None if wanted == DOOR_SHARE else (runner, mode)


@functools.cache
def cell_walks(seed: int, shards: int, door: str = HTTP, cell=None) -> tuple:
    """One walk per shard over the cell's share (share, plan_walks seeded `seed`); read from the written plan
    where there is one for the same seed, shard count, door and cell."""
    written = _written(door, seed, shards, cell)
    if written is not None:
        return tuple(list(map(ops.parse, walk)) for walk in written["walks"])
    return tuple(plan_walks(share(door, cell), seed, shards, door))


def pair_count(door: str = HTTP) -> int:
    """How many situation pairs the model reaches through `door` (len(reachable_pairs)), written
    or counted."""
    written = _written(door)
    return written["pairs"] if written is not None and "pairs" in written else len(reachable_pairs(door))


def worker_pair_count(door: str = HTTP) -> int:
    """How many of them reach the worker (len(worker_pairs)), written or counted."""
    written = _written(door)
    return written["worker_pairs"] if written is not None else len(worker_pairs(door))


def model_state_count(door: str = HTTP) -> int:
    """How many states the model reaches through `door` (len(reachable_states)), written or counted."""
    written = _written(door)
    return written["model_states"] if written is not None else len(reachable_states(door))


@functools.cache
def plan_shards(shards: int, seed: int, door: str = HTTP, cell=None) -> tuple:
    """(([walk], pairs), ...) per shard: the cell's plan (cell_walks), a walk a shard; a shard's pairs are
    those of the cell's share its walk is the first of the plan to visit, so the shards' pairs are disjoint
    and cover the share."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    walks = cell_walks(seed, shards, door, cell)
    written = _written(door, seed, shards, cell)
    if written is not None:
        # Each shard's own steps, written with the plan: the share's pairs (the door's graph, seconds of CPU in
        # every shard's process) are not computed again to tell them.
        traces = trace(walks)
        return tuple(
            ([walk], frozenset(pair_of(*traces[index][step]) for step in own))
            for index, (walk, own) in enumerate(zip(walks, written["own_steps"]))
        )
    mine = share(door, cell)
    first_by: dict[tuple, int] = {}
    for index, steps in enumerate(trace(walks)):
        for state, op in steps:
            first_by.setdefault(pair_of(state, op), index)
    return tuple(
        ([walk], frozenset(p for p, i in first_by.items() if i == index and p in mine))
        for index, walk in enumerate(walks)
    )


def own_steps(shards: int, seed: int, door: str = HTTP, cell=None) -> list:
    """[[the index of each step whose pair is the shard's own (plan_shards), ...] per shard]: what a written
    plan keeps so that plan_shards reads each shard's pairs off its walk's steps."""
    dealt = plan_shards(shards, seed, door, cell)
    return [
        [i for i, (state, op) in enumerate(steps) if pair_of(state, op) in pairs]
        for steps, (_, pairs) in zip(trace([walks[0] for walks, _ in dealt]), dealt)
    ]


def clear_caches() -> None:
    """Forgets everything planned from the model, for a test that patches the model and plans anew."""
    planned = (successors, reachable_states, _graph, worker_pairs, deal, _postman, _tour, _ways_from_initial, _probes)
    for cached in planned + (cell_walks, plan_shards):
        cached.cache_clear()


def cell_seed(seed: int, cell_id: str) -> int:
    """The seed of a cell's plan: every cell walks its own paths, through its own states, between the
    same situations. crc32, not hash(): the same under any PYTHONHASHSEED and on every machine."""
    return seed + zlib.crc32(cell_id.encode()) % 10007


def reset_ops(state: State) -> list:
    """Operations that bring `state` home (INITIAL, but for host_cached, which the wake may turn on): the
    wake of what is still asleep (a full wake where only one tag is: the pinned divergence
    full_wake_remaps_resident_pool), which also runs the held and waiting requests and writes the
    awake gauge (also over a level-0 sleep's gauge that a /resume left), a prefix-cache reset, a
    reload of A (which also puts the model path back after a push)."""
    out = []
    if 0 < len(state.asleep_tags) < len(model.TAGS):
        out.append(ops.wake(sorted(state.asleep_tags)))
    elif state.paused or state.gauge_level is not None:
        out.append(ops.wake())
    after = run(state, out)
    if after.prefix_cached:
        out.append(ops.RESET_PREFIX_CACHE)
    if (after.weights, after.model_path) != ("A", "A"):
        out.append(ops.reload("A"))
    return out


def run(state: State, walk) -> State:
    for op in walk:
        state = op.apply(state)
    return state


def _unwound(parent: dict, node, last) -> list:
    """The way from a breadth-first search's source to `last`, an edge leaving `node`: parent maps each
    reached node to (the node before it, the edge between), the source to None."""
    path = [last]
    step = parent[node]
    while step is not None:
        node, via = step
        path.append(via)
        step = parent[node]
    return path[::-1]


def _first_path(src: State, goal, order=None, door: str = HTTP) -> list | None:
    """Breadth first from src: the operations up to and including the first edge for which
    goal(state, op, next state) holds, None if none does. order(state, list) reorders a state's successors
    (plan_tour: seeded, the pairs still to visit first), else they come in ALL's order."""
    parent: dict[State, tuple[State, Any] | None] = {src: None}
    queue = collections.deque([src])
    while queue:
        state = queue.popleft()
        edges = list(successors(state, door))
        if order is not None:
            order(state, edges)
        for op, nxt in edges:
            if goal(state, op, nxt):
                return _unwound(parent, state, op)
            if nxt not in parent:
                parent[nxt] = (state, op)
                queue.append(nxt)
    return None


def _path(path: list | None, what: str) -> list:
    """A path _first_path found; its absence is the planner's error (the model's states, all reachable from
    INITIAL, were not connected as the planner needs), said with what was sought."""
    if path is None:
        raise ValueError(f"the model has no path {what}: its reachable states are not connected as the planner needs")
    return path


def shortest_path(src: State, dst: State, door: str = HTTP) -> list | None:
    """The fewest operations from src to dst (the first in ALL's order among equals), None if none."""
    return [] if src == dst else _first_path(src, lambda state, op, nxt: nxt == dst, door=door)


def standing(state: State) -> Situation:
    """Where a state stands, whatever comes next: its situation for an operation that adds nothing of its
    own to it (a prefix-cache reset). The tour's nodes (plan_tour)."""
    return situation(state, ops.RESET_PREFIX_CACHE)


@dataclasses.dataclass(frozen=True)
class _Graph:
    """A door's reachable states (BFS order, INITIAL first) and, per state, its edges (operation, next state's
    index, pair's index into pairs, which are in pair_key order) and where it stands (node: by index into nodes,
    which are in pair_key order). Integers, so that the planner's searches hash and compare no situations."""

    states: tuple
    edges: tuple
    pairs: tuple
    pair_index: dict
    node: tuple
    nodes: tuple


@functools.cache
def _graph(door: str = HTTP) -> _Graph:
    states = reachable_states(door)
    index = {s: i for i, s in enumerate(states)}
    labelled = [[(op, index[nxt], pair_of(s, op)) for op, nxt in successors(s, door)] for s in states]
    pairs = tuple(sorted({pair for edges in labelled for _, _, pair in edges}, key=pair_key))
    pair_index = {pair: k for k, pair in enumerate(pairs)}
    edges = tuple(tuple((op, j, pair_index[pair]) for op, j, pair in row) for row in labelled)
    stands = [standing(s) for s in states]
    nodes = tuple(sorted(set(stands), key=lambda sit: pair_key((sit, ops.RESET_PREFIX_CACHE))))
    at = {sit: k for k, sit in enumerate(nodes)}
    return _Graph(states, edges, pairs, pair_index, tuple(at[sit] for sit in stands), nodes)


@functools.cache
def _postman(pairs: frozenset, door: str = HTTP) -> tuple:
    """tour.postman over where the door's states stand: each pair of `pairs` from the nodes it is offered at
    to those it leads to (in pair_key order), the moves any operation makes between two nodes."""
    g = _graph(door)
    wanted = {g.pair_index[p] for p in pairs}
    offered: dict = collections.defaultdict(set)
    leads: dict = collections.defaultdict(set)
    moves: set = set()
    for i, edges in enumerate(g.edges):
        for _, j, k in edges:
            moves.add((g.node[i], g.node[j]))
            if k in wanted:
                offered[k].add(g.node[i])
                leads[k].add(g.node[j])
    required = [(sorted(offered[k]), g.pairs[k], sorted(leads[k])) for k in sorted(wanted)]
    out_moves: dict = collections.defaultdict(list)
    for a, b in sorted(moves):
        out_moves[a].append(b)
    return tuple(tour.postman(required, out_moves))


def tour_floor(pairs, door: str = HTTP) -> int:
    """The fewest steps of the relaxation plan_tour orders `pairs` by (tour.postman's circuit): no walk from
    INITIAL back home over them is shorter, since each of its steps moves between where states stand."""
    return len(_postman(frozenset(pairs), door))


def plan_tour(pairs, seed: int, door: str = HTTP) -> list:
    """The operations of one walk from INITIAL that visits every pair of `pairs` (a subset of
    reachable_pairs()), in few steps: the pairs ordered by a seeded Chinese-postman circuit over where states
    stand (tour.postman: each pair from a node it is offered at to one it leads to, the fewest moves between
    them), each then reached from where the walk is by the fewest operations (breadth first, each
    state's operations in an order the seed shuffles), every pair on the way counting."""
    todo = frozenset(pairs)
    unknown = todo - _reachable_pairs(door)
    if unknown:
        raise ValueError(
            f"not reachable pairs: {sorted(map(describe_pair, unknown))[:3]}; plan only pairs from "
            "plan.reachable_pairs()"
        )
    return list(_tour(todo, seed, door))


@functools.cache
def _tour(pairs: frozenset, seed: int, door: str) -> tuple:
    """plan_tour's walk, once per (pairs, seed, door): a cell's shards, the write_plan action and the unit tests
    ask for the same tour over and over, each costing seconds. Searches over _graph's integers."""
    g = _graph(door)
    todo = {g.pair_index[p] for p in pairs}
    rng = random.Random(seed)
    circuit = tour.circuits(_postman(pairs, door), g.node[0], rng)
    walk: list = []
    at = 0  # INITIAL
    for label in [label for part in circuit for _, label, _ in part if label is not None]:
        target = g.pair_index[label]
        if target not in todo:
            continue
        path = _path(
            _tour_path(g, at, target, todo, rng), f"from ({g.states[at].describe()}) to {describe_pair(label)}"
        )
        for _, j, k in path:
            todo.discard(k)
            at = j
        walk += [op for op, _, _ in path]
    return tuple(walk)


def _tour_path(g: _Graph, src: int, target: int, todo: set, rng: random.Random) -> list | None:
    """Breadth first from state src: the edges up to and including the first one of pair `target`, None if
    none. Each state's edges in a seeded order, those of a pair still to visit (todo) first: among equally
    short ways the walk takes one that visits more on the way."""
    parent: dict = {src: None}
    queue = collections.deque([src])
    while queue:
        i = queue.popleft()
        edges = list(g.edges[i])
        rng.shuffle(edges)
        for edge in [e for e in edges if e[2] in todo] + [e for e in edges if e[2] not in todo]:
            if edge[2] == target:
                return _unwound(parent, i, edge)
            j = edge[1]
            if j not in parent:
                parent[j] = (i, edge)
                queue.append(j)
    return None


def split(walk, shards: int, door: str = HTTP) -> list:
    """`walk` (from INITIAL) as `shards` walks, each from INITIAL (the fewest operations to where its part
    starts) and home again (reset_ops), the longest as short as the cuts allow in seconds (step_millis): the
    least bound under which cutting each part as late as it fits needs no more than `shards` parts (a binary
    search), the longest parts then halved until there are `shards`."""
    if not 1 <= shards <= max(1, len(walk)):
        raise ValueError(f"{shards} shards cannot split a walk of {len(walk)} steps; plan with fewer")
    states = [INITIAL]
    for op in walk:
        states.append(op.apply(states[-1]))
    ways = _ways_from_initial(door)
    there = [walk_millis(ways[s]) for s in states]
    home = [walk_millis(reset_ops(s)) for s in states]
    cost = [0]
    for op in walk:
        cost.append(cost[-1] + step_millis(op))

    def cuts_under(bound: int) -> list | None:
        cuts, a = [0], 0
        while a < len(walk):
            last = None
            for b in range(a + 1, len(walk) + 1):
                if there[a] + cost[b] - cost[a] > bound:  # home[b] >= 0: no later cut fits either
                    break
                if there[a] + cost[b] - cost[a] + home[b] <= bound:
                    last = b
            if last is None:
                return None
            a = last
            cuts.append(a)
        return cuts

    lo, hi = 0, there[0] + cost[-1] + home[-1]
    while lo < hi:
        mid = (lo + hi) // 2
        found = cuts_under(mid)
        if found is not None and len(found) - 1 <= shards:
            hi = mid
        else:
            lo = mid + 1
    cuts = cuts_under(hi) or [0, len(walk)]
    while len(cuts) - 1 < shards:
        k = max(range(len(cuts) - 1), key=lambda i: (cuts[i + 1] - cuts[i], -i))
        cuts.insert(k + 1, (cuts[k] + cuts[k + 1]) // 2)
    return [ways[states[a]] + list(walk[a:b]) + reset_ops(states[b]) for a, b in zip(cuts, cuts[1:])]


@functools.cache
def _ways_from_initial(door: str = HTTP) -> dict:
    """{state: the fewest operations from INITIAL to it} for every reachable state (one breadth-first search)."""
    g = _graph(door)
    parent = tour.shortest_paths(0, lambda i: [(op, j) for op, j, _ in g.edges[i]])
    return {g.states[i]: [op for _, op, _ in tour.path_to(parent, i)] for i in parent}


def plan_walks(pairs, seed: int, shards: int, door: str = HTTP) -> list:
    """`shards` walks, each from INITIAL and home again, that together visit every pair of `pairs`: one tour
    (plan_tour) split where it is cheapest to start over (split)."""
    return split(plan_tour(pairs, seed, door), shards, door)


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


def steps_coverage(traces) -> tuple[set, collections.Counter]:
    """(the pairs visited, counts of consecutive operations (token, token) within a walk) of steps
    taken: [[(state before, operation), ...] per walk] (trace's shape, or what a walker executed)."""
    visited: set = set()
    consecutive: collections.Counter = collections.Counter()
    for steps in traces:
        visited |= {pair_of(s, op) for s, op in steps}
        consecutive.update((str(a), str(b)) for (_, a), (_, b) in zip(steps, steps[1:]))
    return visited, consecutive


def shrink_candidates(walk, failing_index: int, start: State = INITIAL, door: str = HTTP) -> list:
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

    def way(dst: State) -> list:
        return _path(shortest_path(INITIAL, dst, door), f"from INITIAL to ({dst.describe()})")

    candidates = [way(states[-1]) + [failing]]
    if failing_index:
        candidates.append(way(states[-2]) + walk[failing_index - 1 : failing_index + 1])
    candidates.append(way(start) + list(walk[: failing_index + 1]))
    out = []
    for c in sorted(candidates, key=len):
        if c not in out:
            out.append(c)
    return out


def script(seed: int, shard: int, walk) -> str:
    """The one-line replay of a walk: the variable the walk's runner reads, and where it came from."""
    return f'{REPLAY_VAR}="{",".join(str(op) for op in walk)}"  # seed {seed}, shard {shard}'


def with_replay(
    failure: oracle.OracleFailure,
    seed: int,
    shard: int,
    walk,
    index: int,
    start: State,
    on: str,
    pick: str,
    door: str = HTTP,
) -> oracle.OracleFailure:
    """The failure of step `index` of `walk` (begun in `start`) with its shortest replays
    (shrink_candidates) as SLEEPWAKE_WALK_REPLAY lines; `on`: what a replay runs on, `pick`: the
    --test_filter of the failing shard."""
    lines = [script(seed, shard, c) for c in shrink_candidates(walk, index, start, door)]
    first, *rest = failure.failures()
    detail = (
        f"replay, shortest first, on {on} ({REPLAY_VAR} runs it in the shard {pick} picks; a run that picks "
        "none refuses it):\n    " + "\n    ".join(lines)
    )
    return oracle.OracleFailure(first.oracle_id, first.what, first.measured, first.bound, first.relation, rest, detail)


def parse_script(text: str) -> list:
    """The operations of a replay line (script's output) or of the variable's bare value."""
    m = _SCRIPT.match(text)
    if not m:
        raise ValueError(f'not a walk replay: {text!r}; expected {REPLAY_VAR}="op,op,..." or "op,op,..."')
    return [ops.parse(token) for token in m.group(1).split(",") if token.strip()]


def terminal_pairs(door: str = HTTP) -> dict:
    """{(known divergence, level, tags asleep): [operation, ...]} of every terminal pair (operations.
    terminal) the states reachable through `door` allow, operations in ALL's order."""
    kinds: collections.defaultdict[tuple, list] = collections.defaultdict(list)
    for state in reachable_states(door):
        for op in ops.ALL:
            if ops.door_why_not(op, state, door):
                continue
            name = ops.terminal(op, state)
            key = (name, state.level, tuple(sorted(state.asleep_tags)))
            if name and op not in kinds[key]:
                kinds[key].append(op)
    return {k: sorted(v, key=ops.ALL.index) for k, v in sorted(kinds.items(), key=lambda kv: (kv[0][0], kv[0][1:]))}


# Where a kind of terminal pair holds several operations, the one a probe makes: a reload that pushes a
# checkpoint (what an RL trainer sends), a wake of the KV cache alone. The others reach the same vLLM
# code (GPUModelRunner.reload_weights into the unmapped pool; CuMemAllocator.wake_up of the KV pool
# first), which the probe's answer and the state after it pin.
PROBED = {ops.RELOAD_ASLEEP: ops.reload("B"), ops.KV_FIRST_AFTER_LEVEL2: ops.wake(["kv_cache"])}


def terminal_probes(door: str = HTTP) -> list:
    """One walk per kind of terminal pair (terminal_pairs): the shortest way from INITIAL to a state of
    that kind, then its operation (PROBED, else the kind's only one), which ends the server's usable
    life where its known divergence applies. The test gives probe i to shard i, after its walks. Read
    from the written plan where there is one for the door."""
    written = _written(door)
    if written is not None:
        return [list(map(ops.parse, probe)) for probe in written["probes"]]
    return plan_probes(door)


def plan_probes(door: str = HTTP) -> list:
    """terminal_probes, planned in this process (as plan_walks plans the walks)."""
    return [list(probe) for probe in _probes(door)]


@functools.cache
def _probes(door: str) -> tuple:
    """plan_probes' walks, once per door: every shard of every cell asks which probe is its (walk/shards.py),
    and each search goes over the door's states."""
    probes = []
    for (name, level, asleep), kind_ops in terminal_pairs(door).items():
        op = PROBED.get(name, kind_ops[0])
        if op not in kind_ops:
            raise ValueError(f"the probe {op} of {name} is not among its pairs {kind_ops}")

        def there(st, o, nxt, op=op, name=name, where=(level, asleep)):
            return (nxt.level, tuple(sorted(nxt.asleep_tags))) == where and ops.terminal(op, nxt) == name

        path = _path(_first_path(INITIAL, there, door=door), f"from INITIAL to the terminal pair {op} of {name}")
        probes.append(tuple(path + [op]))
    return tuple(probes)


def run_shard(walker, shard: int, shards: int, seed: int, door: str = HTTP, cell=None):
    """Runs on walker (the server's or the engine tier's: anything with run(walks, seed, shard)) the
    shard's walks of plan_shards and returns (the shard's pairs, its walks); or, when
    SLEEPWAKE_WALK_REPLAY holds a shrunk failing walk, runs that one walk and returns None. A replay in a run
    that picks no test (no --test_filter: FILTER_VAR unset) is refused: every shard would walk it instead of
    its share and pass, a whole cell green having walked one failure's steps."""
    replay = os.environ.get(REPLAY_VAR)
    if replay and not os.environ.get(FILTER_VAR):
        raise oracle.Precondition(
            f"{REPLAY_VAR} is set in a run that picks no shard (no --test_filter), so every shard would walk the "
            f"replay instead of its share: pick the failing shard with the --test_filter its replay line names, "
            f"or unset {REPLAY_VAR} (--test_env passes it from your shell)"
        )
    if replay:
        walker.run([parse_script(replay)], seed, shard)
        return None
    walks, pairs = plan_shards(shards, seed, door, cell)[shard]
    walker.run(walks, seed, shard)
    return pairs, walks


@contextlib.contextmanager
def recorded_when_stopped(record):
    """Calls record() when the body raises (a failure stopped the shard's walks: what ran still counts),
    then re-raises the body's exception. A record() that raises an Exception adds a note to that exception
    and never takes its place: the verdict stays the oracle's, or the error's, that stopped the walks."""
    try:
        yield
    except BaseException as stopped:
        try:
            record()
        except Exception as unrecorded:  # any failure to record must leave the verdict alone
            note = f"the shard's walk coverage was not recorded: {unrecorded!r}"
            if hasattr(stopped, "add_note"):  # Python 3.11+; a runner's 3.10 gets the note on stderr
                stopped.add_note(note)
            else:
                print(note, file=sys.stderr)
        raise
