"""Writes the HTML report of a matrix run (and of the mutants, when they ran) from bazel-testlogs.

  bazel run //tools/report -- [TESTLOGS] [--out FILE] [--bep FILE]...
  python3 -m tools.report [TESTLOGS] [--out FILE] [--bep FILE]...   (from the workspace root)
  python3 -m tools.report [TESTLOGS] --text [--out FILE]             (the same run as text; the page too with --out)

  python3 -m tools.report [TESTLOGS] --gate [--bep FILE]...          (the walk cells' gate only: no page)

Both also show the main job's run history (tools/bench/runs.jsonl; --history FILE, --no_history).

Relative paths are the workspace's (bazel run runs in the runfiles tree). Exits 0 once the page is
written, whatever the tests' outcome (the page shows results, Bazel judges them), but for one verdict
Bazel cannot make: a state walk cell that ran without walking every pair of its door and running every
probe (filtered, replayed, a shard missing or stopped: tools/results/walk_gate.py) exits PARTIAL_EXIT (5),
so that a partial run is never taken for a green full one. 1: no page (a usage or file error).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from tools.report import reading, render, text, view
from tools.results import walk_gate

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = "sleepwake-report.html"  # beside the testlogs dir
BEP_FILE = ".bazel-bep.json"  # where .bazelrc has every bazel test write its build events
BEP_WAVES = ".bazel-bep-wave*.json"  # tools/run_matrix.sh's instead: one per wave (bazel test) of its run
HISTORY_FILE = os.path.join("tools", "bench", "runs.jsonl")  # the main job's run history, in the workspace


class UsageError(Exception):
    pass


def workspace() -> str:
    """The source tree: bazel run's BUILD_WORKSPACE_DIRECTORY, else the checkout holding this file."""
    return os.environ.get("BUILD_WORKSPACE_DIRECTORY") or REPO_ROOT


def resolve(path: str) -> str:
    """A path as the user meant it: relative to the workspace under bazel run, else to the cwd."""
    base = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def default_beps(ws: str) -> list[str]:
    """The build events of the workspace's last run: tools/run_matrix.sh's wave files when they are newer
    than BEP_FILE (which every other bazel test writes), else BEP_FILE; [] when there is neither."""
    waves = sorted(glob.glob(os.path.join(ws, BEP_WAVES)))
    single = os.path.join(ws, BEP_FILE)
    if waves and (not os.path.isfile(single) or max(os.path.getmtime(w) for w in waves) >= os.path.getmtime(single)):
        return waves
    return [single] if os.path.isfile(single) else []


def testlogs_root(path: str) -> str:
    """The testlogs dir holding tests/sleep_wake (or tests/mutants); also accepted: that package dir."""
    if not os.path.isdir(path):
        raise UsageError(
            f"no directory {path}: run the matrix first (tools/run_matrix.sh) or pass the "
            "bazel-testlogs directory of a run"
        )
    for package in ("sleep_wake", "mutants"):
        if os.path.basename(path) == package and os.path.basename(os.path.dirname(path)) == "tests":
            return os.path.dirname(os.path.dirname(path))
    if not any(os.path.isdir(os.path.join(path, "tests", p)) for p in ("sleep_wake", "mutants")):
        raise UsageError(
            f"{path} holds no tests/sleep_wake or tests/mutants results: pass the "
            "bazel-testlogs directory of a matrix or mutant run"
        )
    return path


def read_record(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"no readable run record {path} ({e}): pass the sleepwake-run.json of the run") from None


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="tools.report", description=__doc__.splitlines()[0])
    parser.add_argument(
        "testlogs",
        nargs="?",
        default=None,
        help="the bazel-testlogs directory of the run (default: the workspace's bazel-testlogs)",
    )
    parser.add_argument(
        "--out", default=None, help=f"the page to write (default: {DEFAULT_OUT} beside the testlogs directory)"
    )
    parser.add_argument(
        "--bep",
        action="append",
        default=None,
        help=f"a build event file of the run, to flag stale cells; once per bazel test of the run "
        f"(default: the workspace's newer of {BEP_WAVES}, tools/run_matrix.sh's waves, and "
        f"{BEP_FILE})",
    )
    parser.add_argument(
        "--text",
        action="store_true",
        help="print the run as text (headline, failing cells, counts, measurement spread); writes the "
        "page only when --out is given too",
    )
    parser.add_argument("--no_bep", action="store_true", help="read no build events (stale cells not flagged)")
    parser.add_argument(
        "--gate",
        action="store_true",
        help="judge only the state walk cells that ran (each must walk every pair of its door and run every "
        f"probe): print each one's verdict, write no page, exit {walk_gate.PARTIAL_EXIT} where one is partial; "
        "testlogs without a walk cell's results pass (tools/run_matrix.sh and tools/test.sh run it after Bazel)",
    )
    parser.add_argument(
        "--record",
        help="the run's record (sleepwake-run.json, tools/bench/run_record.py): where the run's time went, as a"
        " picture, and its replay on more GPUs",
    )
    parser.add_argument(
        "--history",
        default=None,
        help=f"the main job's run history to draw (default: the workspace's {HISTORY_FILE}; tools/bench/history.py)",
    )
    parser.add_argument("--no_history", action="store_true", help="draw no run history")
    return parser.parse_args(argv[1:])


def gate(run: view.Run) -> int:
    """The walk cells' gate of the run (--gate): a line per walk cell that ran; PARTIAL_EXIT where one is
    partial, else 0."""
    walks = run.walk_coverage()
    for w in walks:
        print(f"walk gate: {w.cell.name}: {w.gate_text()}")
    partial = run.partial_walks()
    if partial:
        print(
            f"walk gate: PARTIAL: {len(partial)} of {len(walks)} state walk cell(s) did not walk every pair of "
            f"their door and run every probe; exit {walk_gate.PARTIAL_EXIT}, never a green full run",
            file=sys.stderr,
        )
        return walk_gate.PARTIAL_EXIT
    print(f"walk gate: {len(walks)} state walk cell(s) ran, each full" if walks else "walk gate: no walk cell ran")
    return 0


def main(argv) -> int:
    args = parse_args(argv)
    ws = workspace()
    if args.gate:
        try:
            root = testlogs_root(resolve(args.testlogs) if args.testlogs else os.path.join(ws, "bazel-testlogs"))
        except UsageError as e:
            print(f"walk gate: no walk cell ran ({e})")
            return 0
        beps = [] if args.no_bep else [resolve(b) for b in args.bep] if args.bep else default_beps(ws)
        return gate(view.load_run(root, ws, beps))
    try:
        root = testlogs_root(resolve(args.testlogs) if args.testlogs else os.path.join(ws, "bazel-testlogs"))
        out = resolve(args.out) if args.out else os.path.join(os.path.dirname(os.path.abspath(root)), DEFAULT_OUT)
        beps = [] if args.no_bep else [resolve(b) for b in args.bep] if args.bep else default_beps(ws)
        for bep in beps if args.bep else []:
            if not os.path.isfile(bep):
                raise UsageError(f"no build event file {bep}: pass the --build_event_json_file of each bazel test")
        run = view.load_run(root, ws, beps, read_record(resolve(args.record)) if args.record else None)
        runs = None
        if not args.no_history:
            runs = reading.read_history(resolve(args.history) if args.history else os.path.join(ws, HISTORY_FILE))
        if args.text:
            sys.stdout.write(text.summary(run, runs))
            if not args.out:
                return walk_gate.PARTIAL_EXIT if run.partial_walks() else 0
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            f.write(render.page(run, os.path.dirname(out), runs))
    except (UsageError, OSError) as e:
        print(f"tools.report: {e}", file=sys.stderr)
        return 1
    states = ", ".join(f"{n} {s}" for s, n in sorted(run.states(run.generated()).items()))
    print(f"report: {out} ({len(run.generated())} cells: {states}" + ("; mutants" if run.mutation else "") + ")")
    return walk_gate.PARTIAL_EXIT if run.partial_walks() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
