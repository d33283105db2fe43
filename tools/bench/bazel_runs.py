"""What a `bazel test` run says about time: Bazel's elapsed time and per-target results from its
output, and the server starts the cells recorded (measurements.jsonl, key server_start_s)."""

from __future__ import annotations

import json
import os
import re
import statistics

from tools import testlogs

_ELAPSED = re.compile(r"^INFO: Elapsed time: ([\d.]+)s", re.M)
# "//tests/sleep_wake:flags_mrv1_eager      PASSED in 23.1s", "(cached) PASSED in 3.2s",
# "FAILED in 2 out of 2 in 12.0s", "TIMEOUT in 900.1s"
_TARGET = re.compile(r"^(//\S+)\s+(\(cached\) )?(PASSED|FAILED|FLAKY|TIMEOUT|NO STATUS)\b(?:.* in ([\d.]+)s)?", re.M)


def elapsed_s(output: str) -> float | None:
    """Bazel's own "Elapsed time" (the last one, for output holding several commands)."""
    found = _ELAPSED.findall(output)
    return float(found[-1]) if found else None


def target_results(output: str) -> dict:
    """target -> {"status", "cached", "seconds"} from Bazel's test summary."""
    return {m.group(1): {"status": m.group(3), "cached": bool(m.group(2)),
                         "seconds": float(m.group(4)) if m.group(4) else None}
            for m in _TARGET.finditer(output)}


def recorded_starts(testlogs_dir: str) -> list[dict]:
    """Every server_start_s a cell under testlogs_dir recorded: {"cell", "seconds", "start_mode"}."""
    out = []
    if not os.path.isdir(testlogs_dir):
        return out
    for cell in sorted(os.listdir(testlogs_dir)):
        text = testlogs.read_output(os.path.join(testlogs_dir, cell), "measurements.jsonl") or ""
        for line in text.splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("key") == "server_start_s":
                out.append({"cell": cell, "seconds": float(entry["value"]), "start_mode": entry.get("start_mode")})
    return out


def summarise(values) -> dict:
    """count, median, min, max of a list of seconds (empty: count 0 only)."""
    values = list(values)
    if not values:
        return {"count": 0}
    return {"count": len(values), "median_s": round(statistics.median(values), 2),
            "min_s": round(min(values), 2), "max_s": round(max(values), 2)}
