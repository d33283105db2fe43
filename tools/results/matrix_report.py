"""Summarises a matrix run from bazel-testlogs: cells, instances, server starts and measurements.

Usage: python3 tools/results/matrix_report.py [bazel-testlogs/tests/sleep_wake] [--bep FILE | --no_bep] [--json]

Reads each cell's test.xml (JUnit) and test.outputs/measurements.jsonl (what the tests recorded) and
prints, per measured key, the spread across cells, so thresholds can be set from measurement. A cell
is a target named *_eager or *_graph, or one shard of such a target (sharded_mrv1_eager/shard_3_of_11).

Cells that prove nothing are flagged, never counted as passed:
  no test case ran  its test.xml holds no case that ran: zero cases, or only the skipped record of a
                    --test_filter or shard that selected nothing.
  stale             its test.xml is not among the results of the bazel test the build events describe
                    (--bep, default .bazel-bep.json, which .bazelrc makes every bazel test write):
                    an earlier invocation left it in bazel-testlogs. Listed, left out of every count.
Exit: 0 when every counted cell passed and ran a case; 1 otherwise (or when no cell is counted).
"""
import argparse
import collections
import dataclasses
import json
import os
import statistics
import sys

if not __package__:
    # Run as a script (python3 tools/X.py): make the workspace root, which holds `tools`, importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tools.results import testlogs  # noqa: E402

CELL_SUFFIXES = ("_eager", "_graph")


def _measurements(cell_dir):
    text = testlogs.read_output(cell_dir, "measurements.jsonl") or ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclasses.dataclass
class Report:
    cells: dict  # cell -> Counter of case outcomes, for the cells counted
    stale: list  # cells left by an earlier invocation (not counted)
    by_key: dict  # measured key -> [(value, cell)]

    @property
    def failed(self):
        return sorted(c for c, n in self.cells.items() if n["failed"])

    @property
    def ran_nothing(self):
        return sorted(c for c, n in self.cells.items() if not any(n[o] for o in testlogs.RAN))


def cell_dirs(root):
    """cell name -> the directory holding its test.xml, for every cell under root."""
    found = {}
    for name in sorted(os.listdir(root)):
        target_dir = os.path.join(root, name)
        if os.path.isdir(target_dir) and name.endswith(CELL_SUFFIXES):
            for result_dir in testlogs.result_dirs(target_dir):
                found[os.path.relpath(result_dir, root)] = result_dir
    return found


def report(root, invocation=None):
    """The report of the cells under root; with an invocation (testlogs.read_bep), only its results count."""
    ours = None
    if invocation is not None:
        ours = {os.path.realpath(r.xml) for r in invocation.results if r.xml}
    cells, stale, rows = {}, [], []
    for name, cell_dir in cell_dirs(root).items():
        xml = os.path.join(cell_dir, "test.xml")
        if ours is not None and os.path.realpath(xml) not in ours:
            stale.append(name)
            continue
        cells[name] = testlogs.junit_outcomes(xml)
        rows += [dict(r, cell=name) for r in _measurements(cell_dir)]
    by_key = collections.defaultdict(list)
    for r in rows:
        if isinstance(r.get("value"), (int, float)):
            by_key[r["key"]].append((r["value"], r["cell"]))
    return Report(cells=cells, stale=stale, by_key=by_key)


def _load_invocation(args):
    """(the invocation to count, a line saying where it came from)."""
    if args.no_bep:
        return None, "no build events (--no_bep): every cell counted; stale ones cannot be told apart"
    if not os.path.exists(args.bep):
        return None, (f"no build event file {args.bep}: every cell counted; stale ones cannot be told"
                      " apart (pass --bep FILE)")
    invocation = testlogs.read_bep(args.bep)
    return invocation, (f"the bazel test of {args.bep}:"
                        f" `bazel {invocation.command} {' '.join(invocation.patterns)}`")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="bazel-testlogs/tests/sleep_wake",
                        help="the testlogs directory of the matrix package")
    parser.add_argument("--bep", default=testlogs.BEP_FILE,
                        help="build event file (JSON) of the bazel test to report; its results alone count")
    parser.add_argument("--no_bep", action="store_true", help="count every cell under root, stale or not")
    parser.add_argument("--json", action="store_true", help="also print every measurement as JSON")
    args = parser.parse_args(argv[1:])
    root = args.root
    invocation, source = _load_invocation(args)
    result = report(root, invocation)
    total = collections.Counter()
    for counts in result.cells.values():
        total.update(counts)
    bad = set(result.failed) | set(result.ran_nothing)
    print(f"results of {source}")
    print(f"cells: {len(result.cells)} ({len(result.cells) - len(bad)} passed, {len(result.failed)} failed,"
          f" {len(result.ran_nothing)} ran no test case); instances: {dict(total)}")
    for c in result.failed:
        print(f"  failed: {c}")
    for c in result.ran_nothing:
        print(f"  no test case ran: {c} (zero cases, or a filter or shard that selected nothing)")
    if result.stale:
        print(f"stale, not counted: {len(result.stale)} cell(s) in {root} that this bazel test did not run"
              " (left by an earlier one)")
        for c in result.stale:
            print(f"  stale: {c}")
    starts = sorted(v for v, _ in result.by_key.get("server_start_s", []))
    if starts:
        print(f"server starts: {len(starts)}; median {statistics.median(starts):.1f} s, "
              f"min {starts[0]:.1f} s, max {starts[-1]:.1f} s")
    for key, values in sorted(result.by_key.items()):
        vs = sorted(v for v, _ in values)
        print(f"{key:45s} n={len(vs):3d} min={vs[0]:.6g} median={statistics.median(vs):.6g} max={vs[-1]:.6g}"
              f"  (max in {max(values)[1]})")
    if args.json:
        print(json.dumps({k: sorted(v) for k, v in result.by_key.items()}))
    return 1 if bad or not result.cells else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
