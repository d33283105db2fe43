"""What a `bazel test` run says about time: Bazel's elapsed time and per-target results from its
output, and where the GPU cells' time went: the server timings they recorded (measurements.jsonl, key
server_timings, tools/launcher/timings.py)."""

from __future__ import annotations

import json
import os
import re
import statistics

from tools import matrix
from tools.results import testlogs

_ELAPSED = re.compile(r"^INFO: Elapsed time: ([\d.]+)s", re.M)
_CRITICAL = re.compile(r"^INFO: Elapsed time: [\d.]+s, Critical Path: ([\d.]+)s", re.M)
# tools/run_matrix.sh's line after the run: "run_matrix.sh: host CPUs busy 63% of 16 during bazel test"
_CPU_BUSY = re.compile(r"^run_matrix\.sh: host CPUs busy (\d+)% of (\d+) during bazel test", re.M)
# tools/run_matrix.sh's line after its waves: "run_matrix.sh: bazel test took 271.3 s in 2 waves (150.2 121.1 s)"
_WAVES = re.compile(r"^run_matrix\.sh: bazel test took ([\d.]+) s in (\d+) waves", re.M)
# "//tests/sleep_wake:flags_mrv1_eager      PASSED in 23.1s", "(cached) PASSED in 3.2s",
# "FAILED in 2 out of 2 in 12.0s", "TIMEOUT in 900.1s"
_TARGET = re.compile(r"^(//\S+)\s+(\(cached\) )?(PASSED|FAILED|FLAKY|TIMEOUT|NO STATUS)\b(?:.* in ([\d.]+)s)?", re.M)


def elapsed_s(output: str) -> float | None:
    """Bazel's own "Elapsed time" (the last one, for output holding several commands); for run_matrix.sh's
    waves, the time of all of them."""
    waves = _WAVES.findall(output)
    if waves:
        return float(waves[-1][0])
    found = _ELAPSED.findall(output)
    return float(found[-1]) if found else None


def host_cpu_busy(output: str) -> dict | None:
    """How busy the host's CPUs were while run_matrix.sh's Bazel ran: {"share": 0..1, "cpus": N}."""
    found = _CPU_BUSY.findall(output)
    return {"share": int(found[-1][0]) / 100, "cpus": int(found[-1][1])} if found else None


def critical_path_s(output: str) -> float | None:
    """Bazel's critical path of the last command: the longest chain of actions, here the slowest cell;
    for run_matrix.sh's waves, which run one after the other, the sum of theirs."""
    found = _CRITICAL.findall(output)
    waves = _WAVES.findall(output)
    count = int(waves[-1][1]) if waves else 1
    return round(sum(float(f) for f in found[-count:]), 1) if found else None


def target_results(output: str) -> dict:
    """target -> {"status", "cached", "seconds"} from Bazel's test summary."""
    return {m.group(1): {"status": m.group(3), "cached": bool(m.group(2)),
                         "seconds": float(m.group(4)) if m.group(4) else None}
            for m in _TARGET.finditer(output)}


FAKE_START_MODE = "fake"
# Where a GPU cell's time goes, in server_timings' fields; the rest of the cell's time is its tests'
# own requests and checks, pytest and the interpreter.
CELL_PHASES = (("lease_wait_s", "waiting for a GPU slot"),
               ("start_s", "server starts (launch to GET /health 200)"),
               ("memory_phase_wait_s", "waiting on GPU neighbours' memory phases"),
               ("stop_s", "teardowns and NVML release checks"))


def _records(testlogs_dir: str, key: str):
    """(cell, entry) for every measurement `key` the cells under testlogs_dir recorded."""
    if not os.path.isdir(testlogs_dir):
        return
    for cell in sorted(os.listdir(testlogs_dir)):
        text = testlogs.read_output(os.path.join(testlogs_dir, cell), "measurements.jsonl") or ""
        for line in text.splitlines():
            if line.strip():
                entry = json.loads(line)
                if entry.get("key") == key:
                    yield cell, entry


def gpu_only(timings: list[dict]) -> list[dict]:
    """The GPU servers' timings: the fake tier's cells run with the matrix and start in-process fakes."""
    return [t for t in timings if t["start_mode"] != FAKE_START_MODE]


def recorded_timings(testlogs_dir: str) -> list[dict]:
    """Every server_timings a cell recorded, with its "cell" and "start_mode"."""
    return [dict({k: entry.get(k, 0.0) for k, _ in CELL_PHASES}, cell=cell, start_mode=entry.get("start_mode"))
            for cell, entry in _records(testlogs_dir, "server_timings")]


def cell_breakdown(timings: list[dict], results: dict, package: str, elapsed_s: float | None) -> dict:
    """Where the GPU cells' time went: per phase the cell-seconds summed over the cells, the share of
    all GPU cells' time, and the median cell's; the rest is the tests' own work. mean_cells_in_flight
    (cell-seconds / Bazel's elapsed time) shows how full the slots were kept."""
    gpu = gpu_only(timings)
    cells = sorted({t["cell"] for t in gpu})
    seconds = {c: (results.get("%s:%s" % (package, c)) or {}).get("seconds") for c in cells}
    cells = [c for c in cells if seconds[c] is not None]
    if not cells:
        return {"cells": 0}
    per_cell = {c: {k: sum(t[k] for t in gpu if t["cell"] == c) for k, _ in CELL_PHASES} for c in cells}
    for c in cells:
        per_cell[c]["rest_s"] = max(seconds[c] - sum(per_cell[c].values()), 0.0)
    total = sum(seconds.values())
    phases = []
    for key, what in CELL_PHASES + (("rest_s", "the tests' own requests and checks, pytest"),):
        values = [per_cell[c][key] for c in cells]
        phases.append({"key": key, "what": what, "cell_seconds": round(sum(values), 1),
                       "share": round(sum(values) / total, 3) if total else None,
                       "median_cell_s": round(statistics.median(values), 2)})
    return {"cells": len(cells), "cell_seconds": round(total, 1), "median_cell_s": round(
                statistics.median(seconds.values()), 2), "phases": phases,
            "mean_cells_in_flight": round(total / elapsed_s, 1) if elapsed_s else None}


def summarise(values) -> dict:
    """count, median, min, max of a list of seconds (empty: count 0 only)."""
    values = list(values)
    if not values:
        return {"count": 0}
    return {"count": len(values), "median_s": round(statistics.median(values), 2),
            "min_s": round(min(values), 2), "max_s": round(max(values), 2)}


def matrix_measures(results: dict, timings: list[dict], breakdown: dict, elapsed_s: float | None,
                    package: str) -> dict:
    """The matrix's figures the speed targets name (report.TARGETS): Bazel's elapsed time, the median
    GPU server start, the longest GPU cell (any <class>_<runner>_<mode> of the spec, the walk's sharded
    ones too) and the share of the GPU cells' time spent waiting on neighbours' memory phases; None
    where unknown."""
    gpu = gpu_only(timings)
    cells = {"%s:%s_%s_%s" % (package, c, r, m) for c in matrix.SLEEP_WAKE_CLASSES for r in matrix.RUNNERS
             for m in matrix.EXECUTION_MODES}
    seconds = [r["seconds"] for target, r in results.items() if target in cells and r.get("seconds") is not None]
    waits = [p["share"] for p in breakdown.get("phases", []) if p["key"] == "memory_phase_wait_s"]
    return {"matrix_elapsed_s": elapsed_s,
            "matrix_start_median_s": summarise(t["start_s"] for t in gpu).get("median_s"),
            "longest_cell_s": max(seconds) if seconds else None,
            "wait_share": waits[0] if waits else None}
