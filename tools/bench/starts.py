"""How many servers a matrix run starts under server reuse: a replay of the parking (tools/launcher/parking.py)
over a wave's units, and the floor no schedule goes below.

Each unit is one Bazel test that needs one server of its configuration (the parking key) and does one of:
  LENDS  borrows a parked server of its key, else starts one, and gives it back (parks it) at its end;
  ENDS   borrows or starts like LENDS, and stops its server at its end (a terminal probe: ENDS_SERVER);
  FRESH  starts a server of its own and stops it (FRESH_SERVER).
The replay, kept simple on purpose: the units start in the given order whenever one of `jobs` test jobs is
free; each takes a parked server of its key, else a free slot (a start), else stops the oldest server parked
under another key (a start; the launcher evicts one after parking.EVICT_AFTER_S), else waits for a slot or a
server of its key. A parked server keeps its slot. Units last their given seconds; the reset check never
refuses (a refusal adds a start). A wave's parked servers pass to the next wave when `carry` says so.

Counted from what ran, the run record's server_starts (run_record.py) is the figure a run is judged by; this
says what to expect and, with floor(), what no order of the units can beat.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq

LENDS, ENDS, FRESH = "lends", "ends", "fresh"


@dataclasses.dataclass(frozen=True)
class Unit:
    name: str
    key: str  # the configuration its server must have (the launcher's parking key)
    kind: str  # LENDS, ENDS or FRESH
    seconds: float = 1.0


@dataclasses.dataclass
class Replayed:
    starts: int
    taken_over: int  # tenancies of a parked server
    evicted: int  # parked servers stopped for another key's start
    parked: dict  # key -> servers still parked at the end, oldest first (their park times)


def replay(units: list[Unit], jobs: int, slots: int, parked: dict | None = None) -> Replayed:
    """The servers the units start, run in this order on `jobs` test jobs and `slots` GPU slots; parked: the
    servers an earlier wave left parked (key -> park times), which hold slots too."""
    if jobs < 1 or slots < 1:
        raise ValueError(f"jobs {jobs} and slots {slots}: each must be >= 1")
    for u in units:
        if u.kind not in (LENDS, ENDS, FRESH):
            raise ValueError(f"unit {u.name}: kind {u.kind!r} is none of {LENDS}, {ENDS}, {FRESH}")
    waiting = collections.deque(units)
    parked_at = {k: list(v) for k, v in (parked or {}).items()}
    running: list[tuple[float, int, Unit]] = []  # (end time, order, unit): each holds a server and its slot
    now, order = 0.0, 0
    starts = taken = evicted = 0

    def held() -> int:
        return len(running) + sum(len(v) for v in parked_at.values())

    def place(u: Unit) -> bool:
        nonlocal starts, taken, evicted
        if u.kind != FRESH and parked_at.get(u.key):
            parked_at[u.key].pop(0)
            taken += 1
            return True
        if held() >= slots:
            others = [(t[0], k) for k, t in parked_at.items() if t and (u.kind == FRESH or k != u.key)]
            if not others:
                return False
            _, key = min(others)
            parked_at[key].pop(0)
            evicted += 1
        starts += 1
        return True

    while waiting or running:
        while waiting and len(running) < jobs and place(waiting[0]):
            u = waiting.popleft()
            heapq.heappush(running, (now + u.seconds, order, u))
            order += 1
        if not running:  # nothing runs and the next unit cannot be placed: no slot will ever free
            raise ValueError(f"unit {waiting[0].name} can never get a slot: {slots} slot(s) all held parked")
        now, _, done = heapq.heappop(running)
        if done.kind == LENDS:
            parked_at.setdefault(done.key, []).append(now)
    return Replayed(starts, taken, evicted, {k: v for k, v in parked_at.items() if v})


def replay_waves(waves: list[tuple[list[Unit], int]], slots: int, carry: bool = True) -> int:
    """The starts of waves run in turn, each (its units, its jobs); carry: the servers a wave left parked
    are there for the next (its first cells come within park_s)."""
    parked: dict = {}
    total = 0
    for units, jobs in waves:
        r = replay(units, jobs, slots, parked if carry else None)
        total += r.starts
        parked = r.parked
    return total


def floor(units: list[Unit]) -> int:
    """The fewest starts any order and any number of slots allows: per key, every FRESH unit, and every
    server that ends (an ENDS unit), or one server where none of the key's units ends one."""
    by_key: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for u in units:
        by_key[u.key][u.kind] += 1
    return sum(c[FRESH] + max(c[ENDS], 1 if c[LENDS] else 0) for c in by_key.values())
