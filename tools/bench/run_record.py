"""One matrix run as a JSON record, written by tools/run_matrix.sh after every run (sleepwake-run.json):
the machine and what it ran (vLLM's build, torch, the GPUs and driver: @sleepwake_gpu's identity.txt
beside the test logs), the run's verdict and elapsed time, its GPU server starts and whether the machine
was fresh or warm, then where the GPU cells' time went (bazel_runs). The main job's record also goes into
the run history, tools/bench/runs.jsonl, as one line (tools/bench/history.py).

    python3 -m tools.bench.run_record bazel-testlogs/tests/sleep_wake --out sleepwake-run.json \\
        --gpus 1 --cores 16 --rc 0 --machine_state fresh --wave_s 212.7 --wave_s 173.7 --bep .bazel-bep-wave1.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tools.bench import bazel_runs
from tools.report import reading
from tools.results import testlogs

MACHINE_STATES = ("fresh", "warm")  # fresh: no earlier run_matrix.sh run on this host (run_matrix.sh says how)


def _cell_outcomes(units: list[dict]) -> dict[tuple[str, str], dict]:
    """(front door, GPU cell name) -> its test cases' outcome counts, summed over its units (its shards)."""
    out: dict[tuple[str, str], dict] = {}
    for unit in units:
        door = bazel_runs.door_of(unit["cell"])
        if door is None:
            continue  # the fake tier's targets, unit tests: no cell of the matrix
        counts = out.setdefault((door, unit["cell"]), {})
        for outcome, n in unit.get("outcomes", {}).items():
            counts[outcome] = counts.get(outcome, 0) + n
    return out


def cells_by_door(units: list[dict]) -> dict[str, dict]:
    """door -> {"cells", "passed", "failed"} of the GPU cells among the units: counted from the results
    that are there, so a door none of whose cells ran is absent. A cell failed if a case of it failed,
    passed if a case ran and none failed; one that is neither ran no case."""
    out: dict[str, dict] = {}
    for (door, _), counts in _cell_outcomes(units).items():
        tally = out.setdefault(door, {"cells": 0, "passed": 0, "failed": 0})
        tally["cells"] += 1
        tally["failed"] += bool(counts.get("failed"))
        tally["passed"] += bool(counts.get("passed")) and not counts.get("failed")
    return out


def cases_of(xmls) -> dict[str, int]:
    """{"passed", "failed", "skipped"}: the test cases of these test.xml files (an invocation's results,
    every target's, the fake tier's and the unit tests' too), as tools/results/ran_tests.py counts them."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for xml in sorted(xmls):
        if os.path.exists(xml):
            for outcome, n in testlogs.junit_outcomes(xml).items():
                totals[outcome] = totals.get(outcome, 0) + n
    return totals


def parse_identity(text: str) -> dict[str, str]:
    """identity.txt (third_party/gpu_runtime/gpu_runtime.bzl), one `name: value` a line, as a dict."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(": ")
        if sep:
            out[name.strip()] = value.strip()
    return out


def record(
    units: list[dict],
    *,
    gpus: int,
    cores: int,
    rc: int,
    machine_state: str,
    waves_s: list[float],
    identity: dict[str, str] | None = None,
    cases: dict[str, int] | None = None,
) -> dict:
    """The run's record: `matrix` holds the figures the speed issue names (status, elapsed_s,
    server_starts, machine_state), counted from the cells' own timings (launch_to_health_s: a start's own
    seconds, without the wait for a GPU slot), the cells that ran by front door (cells_by_door) and the
    walk's shards against the walk issue's bound (bazel_runs.walk_shards, on Bazel's clock where the
    build events timed every shard) and `cases`, the outcomes of every test case of the run's results
    (cases_of: what ran_tests counts; None without build events to name them);
    `cell_time` the breakdown."""
    if machine_state not in MACHINE_STATES:
        raise ValueError(f"machine_state {machine_state!r}: say one of {', '.join(MACHINE_STATES)}")
    elapsed = round(sum(waves_s), 1) if waves_s else None
    gpu = bazel_runs.gpu_units(units)
    starts = bazel_runs.gpu_timings(gpu)
    counted = {
        # Counted only from matrix cells: a run of other targets (the mutants', whose servers their inner
        # runs start) has none to count from, which is no count of zero.
        "server_starts": sum(t["launches"] for t in starts) if gpu else None,
        # Tenancies of a server another cell started and gave back (tools/launcher/parking.py), those
        # whose reset the suite's check refused (then a start of its own follows) included.
        "servers_taken_over": sum(t["launches"] == 0 for t in starts) if gpu else None,
        "launch_to_health_s": bazel_runs.summarise(t["start_s"] for t in starts if t["launches"]),
    }
    if not gpu:
        counted["not_counted"] = "no GPU cell of the matrix ran: servers are counted from the cells' own timings"
    return {
        # Only a run whose GPU cells ran fetched @sleepwake_gpu for the vLLM it served: the file a run that
        # stopped before them left may name an earlier run's release.
        "machine": {"gpus": gpus, "cores": cores, "identity": identity if gpu else None},
        "matrix": {
            "status": "green" if rc == 0 else "red",
            "rc": rc,
            "elapsed_s": elapsed,
            "waves_s": waves_s,
            **counted,
            "gpu_units": len(gpu),
            "cells_by_door": cells_by_door(units),
            "cases": cases,
            "walk_shards": bazel_runs.walk_shards(units),
            "machine_state": machine_state,
            **bazel_runs.matrix_measures(units, elapsed),
        },
        "cell_time": bazel_runs.cell_breakdown(units, elapsed),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("testlogs", help="the cells' test logs, e.g. bazel-testlogs/tests/sleep_wake")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--gpus", type=int, required=True, help="the GPUs the run used")
    parser.add_argument("--cores", type=int, required=True, help="the runner's cores")
    parser.add_argument("--rc", type=int, required=True, help="the run's exit status (0: green)")
    parser.add_argument("--machine_state", choices=MACHINE_STATES, required=True, help="fresh or warm")
    parser.add_argument("--wave_s", type=float, action="append", default=[], help="a wave's seconds (repeatable)")
    parser.add_argument("--bep", action="append", default=[], help="a wave's build event file (repeatable)")
    args = parser.parse_args(argv)
    missing = [bep for bep in args.bep if not os.path.exists(bep)]
    if missing:
        print(f"run_record: no build event file {missing[0]}; pass the files run_matrix.sh wrote", file=sys.stderr)
        return 1
    invocation = reading.read_invocation(args.bep) if args.bep else None
    only, attempt_s = (invocation.xmls, invocation.attempt_s) if invocation else (None, None)
    units = bazel_runs.test_units(args.testlogs, only, attempt_s) if os.path.isdir(args.testlogs) else []
    identity_path = reading.identity_file(args.testlogs) if os.path.isdir(args.testlogs) else None
    identity = parse_identity(reading.read_text(identity_path)) if identity_path else None
    result = record(
        units,
        gpus=args.gpus,
        cores=args.cores,
        rc=args.rc,
        machine_state=args.machine_state,
        waves_s=args.wave_s,
        identity=identity,
        cases=cases_of(invocation.xmls) if invocation else None,
    )
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    m = result["matrix"]
    print(
        f"run record: {args.out} ({m['status']}, {m['elapsed_s']} s, {m['server_starts']} server starts,"
        f" {m['machine_state']} machine)"
    )
    if m["walk_shards"]:
        print("run record: " + bazel_runs.walk_shards_text(m["walk_shards"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
