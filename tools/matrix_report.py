"""Summarises a matrix run from bazel-testlogs: cells, instances, server starts and measurements.

Usage: python3 tools/matrix_report.py [bazel-testlogs/tests/sleep_wake] [--json]

Reads each cell's test.xml (JUnit) and test.outputs/measurements.jsonl (what the tests recorded) and
prints, per measured key, the spread across cells, so thresholds can be set from measurement.
"""
import collections
import json
import os
import statistics
import sys
import xml.etree.ElementTree as ET

if not __package__:
    # Run as a script (python3 tools/X.py): make the workspace root, which holds `tools`, importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools import testlogs  # noqa: E402


def _measurements(cell_dir):
    text = testlogs.read_output(cell_dir, "measurements.jsonl") or ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _junit(cell_dir):
    path = os.path.join(cell_dir, "test.xml")
    if not os.path.exists(path):
        return None
    counts = collections.Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[outcome] += 1
    return counts


def report(root):
    cells, rows = {}, []
    for name in sorted(os.listdir(root)):
        cell_dir = os.path.join(root, name)
        counts = _junit(cell_dir) if os.path.isdir(cell_dir) else None
        if counts is None or not any(name.endswith(s) for s in ("_eager", "_graph")):
            continue
        cells[name] = counts
        rows += [dict(r, cell=name) for r in _measurements(cell_dir)]
    by_key = collections.defaultdict(list)
    for r in rows:
        if isinstance(r.get("value"), (int, float)):
            by_key[r["key"]].append((r["value"], r["cell"]))
    return cells, by_key


def main(argv):
    root = next((a for a in argv[1:] if not a.startswith("--")), "bazel-testlogs/tests/sleep_wake")
    cells, by_key = report(root)
    total = collections.Counter()
    for counts in cells.values():
        total.update(counts)
    failed = sorted(c for c, n in cells.items() if n["failed"])
    print(f"cells: {len(cells)} ({len(cells) - len(failed)} passed); instances: {dict(total)}")
    for c in failed:
        print(f"  failed: {c}")
    starts = sorted(v for v, _ in by_key.get("server_start_s", []))
    if starts:
        print(f"server starts: {len(starts)}; median {statistics.median(starts):.1f} s, "
              f"min {starts[0]:.1f} s, max {starts[-1]:.1f} s")
    for key, values in sorted(by_key.items()):
        vs = sorted(v for v, _ in values)
        print(f"{key:45s} n={len(vs):3d} min={vs[0]:.6g} median={statistics.median(vs):.6g} max={vs[-1]:.6g}"
              f"  (max in {max(values)[1]})")
    if "--json" in argv:
        print(json.dumps({k: sorted(v) for k, v in by_key.items()}))
    return 1 if failed or not cells else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
