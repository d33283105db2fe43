"""The weight-update axes of a run, counted from the test cases that ran: each RL framework's recipe (the
rl_recipes class, one test per framework sequence) and each push way (weight_sync's tests, one per way),
with the verdict each got in each cell that ran it; and each operation of the state walk (the pushes,
/pause and /resume among them), with the pairs its steps walked in each walk cell and the steps a failure
named it at. A recipe, way or operation that ran nowhere is absent, so a filtered run cannot pass for one
that covered them."""

from __future__ import annotations

import dataclasses
import re

RECIPES_CLASS = "rl_recipes"
PUSH_CLASS = "weight_sync"
# weight_sync's parametrised ids: test_x[<way>-<cell id>] (tests/sleep_wake/test_weight_sync.py PUSH_WAYS).
_PUSH_ID = re.compile(r"\[(?P<way>[a-z]+)-[A-Z0-9]+-[a-z]+\]$")
_CELL_ID = re.compile(r"\[[^\]]*\]$")
WALK_CLASS = "state_walk"
WALK_KEY = "walk_coverage"  # the shards' records (tests/core/walk/coverage.py record_walk_coverage)
# A walk failure names its step: "walk step 6 (push:tensor:B from ...)", "walk probe reload:- from (...)".
_WALK_STEP = re.compile(r"walk (?:step \d+|probe) \((?P<op>[^\s()]+) from")
_CHECKPOINT = re.compile(r":[AB]$")  # push:tensor:B and push:tensor:A are one operation, pushing either


@dataclasses.dataclass(frozen=True)
class Row:
    """One recipe or push way: its verdict per cell label (passed, failed, skipped, or n/m passed)."""

    name: str
    by_cell: dict

    @property
    def outcome(self) -> str:
        """failed if it failed anywhere, passed if it passed everywhere it ran, else skipped or not run."""
        verdicts = set(self.by_cell.values())
        if not verdicts:
            return "not run"
        if any(v.startswith("failed") for v in verdicts):
            return "failed"
        if all(v.startswith("passed") for v in verdicts):
            return "passed"
        return "skipped" if verdicts == {"skipped"} else "partly skipped"


def _verdict(outcomes: list[str]) -> str:
    failed, passed = outcomes.count("failed"), outcomes.count("passed")
    if failed:
        return f"failed {failed}/{len(outcomes)}"
    if passed == len(outcomes):
        return "passed" if passed == 1 else f"passed {passed}/{len(outcomes)}"
    return "skipped" if not passed else f"passed {passed}/{len(outcomes)}"


def _rows(cells, test_class: str, key) -> list[Row]:
    found: dict[str, dict[str, list[str]]] = {}
    for cell in cells:
        if cell.test_class != test_class:
            continue
        for case in cell.cases:
            name = key(case.name)
            if name:
                found.setdefault(name, {}).setdefault(cell.label, []).append(case.outcome)
    return [Row(name, {label: _verdict(o) for label, o in sorted(by.items())}) for name, by in sorted(found.items())]


def recipes(cells) -> list[Row]:
    """Each rl_recipes test (a framework's sequence) with its verdict in every cell that ran it."""
    return _rows(cells, RECIPES_CLASS, lambda name: _CELL_ID.sub("", name))


def push_ways(cells) -> list[Row]:
    """Each push way with its weight_sync verdicts (over that way's tests) in every cell that ran it."""
    return _rows(cells, PUSH_CLASS, lambda name: (m := _PUSH_ID.search(name)) and m.group("way"))


def _operation(op: str) -> str:
    return _CHECKPOINT.sub("", op.replace(":-", ""))


def walk_operations(cells) -> list[Row]:
    """Each operation the walk cells' executed steps made, per cell: "passed, N pairs" (the pairs of its
    door's model its steps walked there, every step judged) or "failed at K steps" (the steps a failing
    shard's oracles named it at)."""
    walked: dict[str, dict[str, set]] = {}
    failed: dict[str, dict[str, int]] = {}
    for cell in cells:
        if cell.test_class != WALK_CLASS:
            continue
        for record in cell.records:
            if record.get("key") == WALK_KEY:
                for pair in record.get("visited_pairs", []):
                    op = _operation(str(pair).split(" in ", 1)[0])
                    walked.setdefault(op, {}).setdefault(cell.label, set()).add(pair)
        for case in cell.cases:
            if case.outcome == "failed":
                for m in _WALK_STEP.finditer(case.text or case.message):
                    steps = failed.setdefault(_operation(m.group("op")), {})
                    steps[cell.label] = steps.get(cell.label, 0) + 1
    rows = []
    for op in sorted(set(walked) | set(failed)):
        labels = set(walked.get(op, {})) | set(failed.get(op, {}))
        by_cell = {
            label: (
                f"failed at {failed[op][label]} steps"
                if failed.get(op, {}).get(label)
                else f"passed, {len(walked[op][label])} pairs"
            )
            for label in sorted(labels)
        }
        rows.append(Row(op, by_cell))
    return rows


def lines(cells) -> list[str]:
    """The --text report's lines: one per recipe, push way and walk operation that ran."""
    out = []
    for title, rows in (
        ("RL recipe", recipes(cells)),
        ("push way", push_ways(cells)),
        ("walk operation", walk_operations(cells)),
    ):
        for row in rows:
            where = ", ".join(f"{label} {v}" for label, v in row.by_cell.items())
            out.append(f"{title} {row.name}: {row.outcome} ({where})")
    return out
