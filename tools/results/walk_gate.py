"""The state walk's gate: a walk cell is full only when the union of its shards' executed-step records is
every reachable pair of its door and every terminal probe of its door ran; anything less is partial.

Each shard of a walk cell records what its steps visited (tests/core/walk/coverage.py, key walk_coverage):
the door's reachable pairs it walked, by name, the door's pair and probe counts from the model, the probes
it ran, whether a failure stopped it and whether it walked a replay (SLEEPWAKE_WALK_REPLAY) instead of its
share. A shard that passed proves only its share: a cell whose shards a --test_filter or a shard split
deselected passes shard by shard having walked a part, a replay passes having walked one failure's steps,
and a shard a failure stopped never ran its probe. So the cell is judged here, on the union of what its
shards ran: the report (tools/report) says "partial" in its headline and exits PARTIAL_EXIT, and
tools/run_matrix.sh and tools/test.sh exit PARTIAL_EXIT where every test passed but a walk cell is
partial, so such a run is never a green full cell.
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

    pairs_walked: int  # the union of the door's pairs the shards' executed steps visited
    door_pairs: int | None  # the door's reachable pairs, as the model counts them; None: not recorded
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


def judge(rows: dict, expected_shards: int) -> Gate:
    """The gate of a cell whose shards left `rows` (shard -> its last walk_coverage record), of the
    `expected_shards` the spec gives it (tools/matrix.bzl SHARD_COUNTS)."""
    records = list(rows.values())
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
    door_pairs, door_probes = _one(records, "door_pairs"), _one(records, "door_probes")
    if records and (door_pairs is None or door_probes is None):
        reasons.append("the shards' records do not name one count of the door's pairs and probes")
    if any(not isinstance(r.get("visited_pairs"), list) for r in records):
        reasons.append("a shard recorded no list of the pairs it walked, so no union can be counted")
    walked = {str(p) for r in records if isinstance(r.get("visited_pairs"), list) for p in r["visited_pairs"]}
    if door_pairs is not None and len(walked) < door_pairs:
        reasons.append(f"{len(walked)} of the door's {door_pairs} pairs walked")
    probes = sum(len(r.get("terminal_probes") or []) for r in records)
    if door_probes is not None and probes < door_probes:
        reasons.append(f"{probes} of the door's {door_probes} terminal probes ran")
    if not records and not missing:
        reasons.append("no shard recorded coverage")
    return Gate(len(walked), door_pairs, probes, door_probes, tuple(reasons))
