"""Writes a walk cell's plan ahead (plan.PLANNED_VAR reads it): the cell's walks (one a shard) and terminal
probes as operation tokens, and the model's state and pair counts, for one door, runner and execution mode,
over the cell's share of the door's pairs or every one of them (--share, plan.SHARE_VAR). A Bazel action
per walk cell runs it (tests/core/walk/BUILD.bazel), so the plan is made once per build and
shared through the cache instead of in every shard's process."""

from __future__ import annotations

import argparse
import json
import sys

from tests.core.walk import plan
from tools import matrix


def contents(seed: int, shards: int, door: str, cell=None) -> dict:
    """The written plan of a cell (cell: (runner, mode) for its share, None for every pair of the door): what
    plan.cell_walks, plan.plan_shards (each shard's own steps), plan.terminal_probes, plan.model_state_count,
    plan.pair_count and plan.worker_pair_count read back, and what it was planned with."""
    return {
        "planner": plan.planner_digest(),
        "door": door,
        "seed": seed,
        "shards": shards,
        "cell": None if cell is None else list(cell),
        "walks": [[str(op) for op in walk] for walk in plan.cell_walks(seed, shards, door, cell)],
        "own_steps": plan.own_steps(shards, seed, door, cell),
        "probes": [[str(op) for op in probe] for probe in plan.plan_probes(door)],
        "model_states": len(plan.reachable_states(door)),
        "pairs": len(plan.reachable_pairs(door)),
        "worker_pairs": len(plan.worker_pairs(door)),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--door", required=True, choices=matrix.FRONT_DOORS, help="the cell's front door")
    parser.add_argument("--runner", required=True, choices=sorted(matrix.RUNNERS), help="the cell's model runner")
    parser.add_argument("--mode", required=True, choices=sorted(matrix.EXECUTION_MODES), help="its execution mode")
    parser.add_argument(
        "--share",
        default=plan.CELL_SHARE,
        choices=(plan.CELL_SHARE, plan.DOOR_SHARE),
        help="plan the cell's share of its door's pairs (the GPU matrix) or every pair of the door (one cell alone)",
    )
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    seed = plan.cell_seed(plan.SEED, matrix.cell_id(args.runner, args.mode))
    shards = matrix.shard_count("state_walk", args.mode, args.door)
    cell = None if args.share == plan.DOOR_SHARE else (args.runner, args.mode)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(contents(seed, shards, args.door, cell), f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
