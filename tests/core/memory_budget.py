"""The figures a cell's servers declare their memory phases with under the launcher's memory_phase_rule
bytes (tools/launcher/memory_budget.py): what a sleep frees at least and the most a start step maps besides
the weights and the KV cache, each read per cell from the thresholds table by the names memory_budget.json
gives, and the margin and the most a step or call that only fills a pool maps beside it, with the reason
for each, from that file."""

from __future__ import annotations

import dataclasses
import functools
import json
import os

from tests.core import thresholds
from tests.core.cells import CellSpec

DATA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memory_budget.json")


@functools.cache
def data(path: str = DATA_FILE) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def budgeted(cell: CellSpec, path: str = DATA_FILE) -> CellSpec:
    """The cell with its configuration's memory_phase_margin, sleep_frees_bytes, step_overhead_bytes and
    load_overhead_bytes from the data, where its environment set none (0)."""
    config, figures = cell.config, data(path)
    values: dict[str, object] = {
        "memory_phase_margin": float(figures["margin"]["value"]),
        "sleep_frees_bytes": int(
            thresholds.get(figures["sleep_frees"]["threshold"], cell.id)
            * getattr(config, figures["sleep_frees"]["times"])
        ),
        "step_overhead_bytes": int(thresholds.get(figures["step_overhead"]["threshold"], cell.id)),
        "load_overhead_bytes": int(figures["load_overhead"]["value"]),
    }
    unset = {name: value for name, value in values.items() if not getattr(config, name)}
    return dataclasses.replace(cell, config=dataclasses.replace(config, **unset))  # type: ignore[arg-type]
