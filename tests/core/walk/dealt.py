"""docs/walk/dealt.md, generated from the walk's model: which cells of a door walk which pairs (plan.deal) and,
per operation, why its path reaches the worker or stops above it (operations.REACHES_WORKER).

    python3 -m tests.core.walk.dealt > docs/walk/dealt.md

(unit:dealt_unit_test fails when the committed page differs from what this prints.)
"""

from __future__ import annotations

import collections
import sys

from tests.core.walk import operations as ops
from tests.core.walk import plan
from tools.matrix import FRONT_DOORS, cell_id


def _door_rows() -> list[str]:
    rows = []
    for door in FRONT_DOORS:
        pairs, worker = plan.reachable_pairs(door), plan.worker_pairs(door)
        shares = ", ".join(f"{cell_id(*cell)} {len(share)}" for cell, share in plan.deal(door).items())
        rows.append(f"| `{door}` | {len(pairs)} | {len(worker)} | {len(pairs) - len(worker)} | {shares} |")
    return rows


def _operation_rows() -> list[str]:
    counts: collections.Counter = collections.Counter()
    for door in FRONT_DOORS:
        worker = plan.worker_pairs(door)
        for pair in plan.reachable_pairs(door):
            counts[(pair[1].name, pair in worker)] += 1
    names = list(dict.fromkeys(op.name for op in ops.ALL))
    return [
        f"| `{name}` | {counts[(name, True)]} | {counts[(name, False)]} | {ops.REACHES_WORKER[name].reason} |"
        for name in names
    ]


def render() -> str:
    lines = [
        "# Which cells walk which pairs",
        "",
        "Generated from the walk's model by `python3 -m tests.core.walk.dealt > docs/walk/dealt.md`; "
        "`unit:dealt_unit_test` fails when this page is stale.",
        "",
        "A door's cells differ by model runner and execution mode, which live in the worker. A pair whose path "
        "reaches the worker (operations.reaches_worker, from vLLM 0.26.0's code) is walked in every cell of its "
        "door; a pair decided above it (the API server, the engine core's scheduler, the executor's bookkeeping) "
        "runs the same code in every cell, so it is walked once per runner, the runner's cells splitting them "
        "(plan.deal). A cell run alone (the fake tier's, the mutants': `SLEEPWAKE_WALK_SHARE=door`) walks every "
        "pair of its door. The report's gate (tools/results/walk_gate.py) holds a cell full when its shards "
        "walked every pair of its door that reaches the worker and its door's cells together walked every pair.",
        "",
        "| door | pairs | reach the worker | decided above it | each cell's share |",
        "|---|---|---|---|---|",
        *_door_rows(),
        "",
        "## Per operation",
        "",
        "Pairs counted over every door.",
        "",
        "| operation | pairs reaching the worker | pairs above it | why (vLLM 0.26.0) |",
        "|---|---|---|---|",
        *_operation_rows(),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
