"""Writes a walk cell's plan ahead (plan.PLANNED_VAR reads it): the cell's walks and terminal probes as
operation tokens, and the model's state count, for one door, runner and execution mode. A Bazel action
per walk cell runs it (tests/core/walk/BUILD.bazel), so the plan is made once per build and
shared through the cache instead of in every shard's process."""

from __future__ import annotations

import argparse
import json
import sys

from tests.core.walk import plan
from tools import matrix


def contents(seed: int, max_steps: int, door: str) -> dict:
    """The written plan of a cell: what plan.cell_walks, plan.terminal_probes, plan.model_state_count and
    plan.pair_count read back, and what it was planned with."""
    return {
        "planner": plan.planner_digest(),
        "door": door,
        "seed": seed,
        "max_steps": max_steps,
        "walks": [[str(op) for op in walk] for walk in plan.cell_walks(seed, max_steps, door)],
        "probes": [[str(op) for op in probe] for probe in plan.plan_probes(door)],
        "model_states": len(plan.reachable_states(door)),
        "pairs": len(plan.reachable_pairs(door)),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--door", required=True, choices=matrix.FRONT_DOORS, help="the cell's front door")
    parser.add_argument("--runner", required=True, choices=sorted(matrix.RUNNERS), help="the cell's model runner")
    parser.add_argument("--mode", required=True, choices=sorted(matrix.EXECUTION_MODES), help="its execution mode")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    seed = plan.cell_seed(plan.SEED, matrix.cell_id(args.runner, args.mode))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(contents(seed, plan.MAX_STEPS, args.door), f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
