"""The state walk's gate: a walk cell is full only when the union of its shards' executed-step records holds
every pair of its door that reaches the worker, the union over its door's cells that ran holds every
reachable pair of the door, and every terminal probe of its door ran; anything less is partial.

The door's cells split the pairs decided above the worker (tests/core/walk/plan.py deal: each walked once
per runner), and walk every pair that reaches the worker, where the runner and the execution mode matter,
each of them. So a cell is judged on the worker's pairs by its own shards and on the rest by its door's.
Each shard of a walk cell records what its steps visited (tests/core/walk/coverage.py, key walk_coverage):
the door's reachable pairs it walked and those of them that reached the worker, by name, the door's pair,
worker pair and probe counts from the model, the probes it ran, whether a failure stopped it and whether it
walked a replay (SLEEPWAKE_WALK_REPLAY) instead of its share. A shard that passed proves only its share: a
cell whose shards a --test_filter or a shard split deselected passes shard by shard having walked a part, a
replay passes having walked one failure's steps, and a shard a failure stopped never ran its probe. So the
cell is judged here, on the union of what its shards (and its door's cells) ran: the report (tools/report)
says "partial" in its headline and exits PARTIAL_EXIT, and tools/run_matrix.sh and tools/test.sh exit
PARTIAL_EXIT where every test passed but a walk cell is partial, so such a run is never a green full cell.
"""

from __future__ import annotations

import dataclasses

# The exit status of a run whose tests passed but whose walk is partial (none of Bazel's own: 1 build, 2
# command line, 3 tests failed, 4 no tests). A failed test keeps its own status.
PARTIAL_EXIT = 5
KEY = "walk_coverage"  # the measurement key of a shard's record (tests/core/walk/coverage.py writes it)


@dataclasses.dataclass(frozen=True)
class Gate:
    """A walk cell's verdict from its shards' records: full when `reasons` is empty."""

    pairs_walked: int  # the union of the door's pairs the executed steps of its cells' shards visited
    door_pairs: int | None  # the door's reachable pairs, as the model counts them; None: not recorded
    worker_walked: int  # the union of the door's pairs that reach the worker this cell's shards visited
    worker_pairs: int | None  # the door's pairs that reach the worker, as the model counts them
    probes_ran: int
    door_probes: int | None
    reasons: tuple[str, ...]

    @property
    def full(self) -> bool:
        return not self.reasons


def _one(rows: list[dict], field: str) -> int | None:
    """The value every row records for `field`, None where one lacks it or they differ."""
    values = {r.get(field) for r in rows}
    value = values.pop() if len(values) == 1 else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _union(rows, field: str) -> set:
    return {str(p) for r in rows if isinstance(r.get(field), list) for p in r[field]}


def judge(rows: dict, expected_shards: int, door_rows: list | None = None) -> Gate:
    """The gate of a cell whose shards left `rows` (shard -> its last walk_coverage record), of the
    `expected_shards` the spec gives it (tools/matrix.bzl SHARD_COUNTS); door_rows: the records of every cell
    of its door that ran, its own included (None: the cell walks its door alone)."""
    records = list(rows.values())
    door_records = records if door_rows is None else list(door_rows)
    reasons = []
    missing = sorted(set(range(expected_shards)) - set(rows))
    if missing:
        reasons.append(
            f"{len(missing)} of {expected_shards} shards recorded no coverage (a --test_filter or shard split "
            f"left them out, or they never ran): {', '.join(map(str, missing[:10]))}"
        )
    replayed = sorted(s for s, r in rows.items() if r.get("replay"))
    if replayed:
        reasons.append(f"{len(replayed)} shard(s) walked SLEEPWAKE_WALK_REPLAY instead of their share")
    stopped = sorted(s for s, r in rows.items() if r.get("completed") is False and not r.get("replay"))
    if stopped:
        reasons.append(
            f"a failure stopped {len(stopped)} shard(s) before their share's end: {', '.join(map(str, stopped))}"
        )
    door_pairs, door_probes = _one(door_records, "door_pairs"), _one(records, "door_probes")
    worker_pairs = _one(door_records, "worker_pairs")
    if records and (door_pairs is None or door_probes is None or worker_pairs is None):
        reasons.append("the shards' records do not name one count of the door's pairs, worker pairs and probes")
    if any(not isinstance(r.get(f), list) for r in door_records for f in ("visited_pairs", "worker_visited_pairs")):
        reasons.append("a shard recorded no list of the pairs it walked, so no union can be counted")
    worker = _union(records, "worker_visited_pairs")
    if worker_pairs is not None and len(worker) < worker_pairs:
        reasons.append(f"{len(worker)} of the door's {worker_pairs} pairs that reach the worker walked in this cell")
    walked = _union(door_records, "visited_pairs")
    if door_pairs is not None and len(walked) < door_pairs:
        cells = "" if door_rows is None else " by its door's cells together"
        reasons.append(f"{len(walked)} of the door's {door_pairs} pairs walked{cells}")
    probes = sum(len(r.get("terminal_probes") or []) for r in records)
    if door_probes is not None and probes < door_probes:
        reasons.append(f"{probes} of the door's {door_probes} terminal probes ran")
    if not records and not missing:
        reasons.append("no shard recorded coverage")
    return Gate(len(walked), door_pairs, len(worker), worker_pairs, probes, door_probes, tuple(reasons))
