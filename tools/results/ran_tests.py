"""Fails when the last `bazel test` ran no test case: every test result skipped or empty.

    python3 tools/results/ran_tests.py [BEP_FILE...]

BEP_FILE defaults to .bazel-bep.json, which .bazelrc makes every `bazel test` write. tools/test.sh and
tools/run_matrix.sh run this after Bazel; after a plain `bazel test`, run it yourself. Several files
are judged as one run (run_matrix.sh's waves): a case that ran in any of them counts.

Why a separate step: a --test_filter that matches nothing in one target is legitimate (it may name a
test of another target of the same pattern), so such a target passes, reported as skipped
(tools/pytest_bridge/pytest_main.py). Only the invocation as a whole can tell that nothing ran at all, and Bazel has
no such check (it exits 0). The build events list exactly this invocation's results, cached ones
included, so results left in bazel-testlogs by earlier invocations never count.

Exit: 0 at least one test case ran; 1 none ran; 2 no usable build event file.
"""

from __future__ import annotations

import collections
import os
import sys

if not __package__:
    # Run as a script (python3 tools/X.py): make the workspace root, which holds `tools`, importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tools.results import testlogs  # noqa: E402


def summarize(invocation: testlogs.Invocation) -> tuple[collections.Counter, list[str], list[str]]:
    """(case outcomes over every result, distinct skip reasons, results whose test.xml is unreadable)."""
    totals: collections.Counter = collections.Counter()
    reasons: list[str] = []
    unreadable: list[str] = []
    for result in invocation.results:
        if result.xml is None or not os.path.exists(result.xml):
            unreadable.append(
                f"{result.label} (shard {result.shard}, run {result.run}): {result.xml or 'no local test.xml'}"
            )
            continue
        totals.update(testlogs.junit_outcomes(result.xml))
        reasons += [r for r in testlogs.skip_reasons(result.xml) if r not in reasons]
    return totals, reasons, unreadable


def main(argv: list[str]) -> int:
    beps = argv[1:] or [testlogs.BEP_FILE]
    invocations = []
    for bep in beps:
        if not os.path.exists(bep):
            print(
                f"ran_tests: no build event file {bep}: run `bazel test` in this workspace first (.bazelrc"
                " writes it), or pass the file given to --build_event_json_file",
                file=sys.stderr,
            )
            return 2
        invocations.append(testlogs.read_bep(bep))
    commands = [f"`bazel {i.command} {' '.join(i.patterns)}`" for i in invocations]
    what = " and ".join(dict.fromkeys(commands)) + (f" ({len(commands)} invocations)" if len(commands) > 1 else "")
    results = [r for i in invocations for r in i.results]
    if not results:
        print(
            f"ran_tests: FAILED: {what} has no test result in {' '.join(beps)}: no test target was built"
            " and run (a build error, or every target filtered out by tags)",
            file=sys.stderr,
        )
        return 2
    totals, reasons, unreadable = summarize(testlogs.Invocation(command="test", patterns=[], results=results))
    ran = sum(totals[outcome] for outcome in testlogs.RAN)
    for line in unreadable:
        print(f"ran_tests: cannot read the test.xml of {line}", file=sys.stderr)
    if ran == 0:
        print(
            f"ran_tests: FAILED: no test case ran in {what}: all {len(results)} test"
            f" result(s) are skipped or empty ({totals['skipped']} skipped case(s)). Why:",
            file=sys.stderr,
        )
        for reason in reasons[:5] or ["(no reason recorded)"]:
            print(f"  {reason}", file=sys.stderr)
        print(
            "Fix the --test_filter (a test id fragment or a -k expression over class, test and"
            " parameter names) or the targets.",
            file=sys.stderr,
        )
        return 1
    print(
        f"ran_tests: {ran} test case(s) ran in {what} ({totals['passed']} passed, {totals['failed']}"
        f" failed, {totals['skipped']} skipped) over {len(results)} test result(s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
