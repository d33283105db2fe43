"""The weight-update axes of a run, counted from the test cases that ran: each RL framework's recipe (the
rl_recipes class, one test per framework sequence) and each push way (weight_sync's tests, one per way),
with the verdict each got in each cell that ran it. A recipe or way that ran nowhere is listed as not run,
so a filtered run cannot pass for one that covered them."""

from __future__ import annotations

import dataclasses
import re

RECIPES_CLASS = "rl_recipes"
PUSH_CLASS = "weight_sync"
# weight_sync's parametrised ids: test_x[<way>-<cell id>] (tests/sleep_wake/test_weight_sync.py PUSH_WAYS).
_PUSH_ID = re.compile(r"\[(?P<way>[a-z]+)-[A-Z0-9]+-[a-z]+\]$")
_CELL_ID = re.compile(r"\[[^\]]*\]$")


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


def lines(cells) -> list[str]:
    """The --text report's lines: one per recipe and push way that ran."""
    out = []
    for title, rows in (("RL recipe", recipes(cells)), ("push way", push_ways(cells))):
        for row in rows:
            where = ", ".join(f"{label} {v}" for label, v in row.by_cell.items())
            out.append(f"{title} {row.name}: {row.outcome} ({where})")
    return out
