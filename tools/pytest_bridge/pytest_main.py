"""Main of every sleepwake py_test: runs pytest over the test files Bazel passes as arguments.

Usage (what the sleepwake_py_test macro does): pytest_main.py FILE... [EXTRA_PYTEST_ARGS...], with the
cwd at the workspace root of the runfiles tree. Bazel's test protocol maps onto pytest like this:
  TESTBRIDGE_TEST_ONLY (--test_filter)      selects tests by test id fragment, name or -k expression
  TEST_TOTAL_SHARDS / TEST_SHARD_INDEX      split the tests, keeping each test class in one shard
  TEST_SHARD_STATUS_FILE                    touched: tells Bazel this runner understands sharding
  XML_OUTPUT_FILE / TEST_TARGET             JUnit XML report and its suite name
  TEST_PREMATURE_EXIT_FILE                  exists while the test runs, gone once pytest has finished
  TEST_TMPDIR                               parent of pytest's basetemp

pytest runs in a child process (tools/pytest_bridge/pytest_session.py) that writes a completion record only after
pytest's session has finished. This process passes it SIGTERM and SIGINT, waits for it, and fails the
test when the record is missing, whatever the exit code: Bazel 4.2.3 notes a left-behind
TEST_PREMATURE_EXIT_FILE but still takes the exit code, so an os._exit(0) in a test or a fixture
would otherwise pass.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile

if __name__ == "__main__":
    # Python puts the script's directory, symlinks resolved, first on sys.path: under Bazel that is
    # tools/ of the source tree, outside the runfiles, through which tests could import files no
    # target declares. The workspace root (the cwd) takes its place, as in Bazel's PYTHONPATH; it also
    # makes `tools` importable when this file is run directly.
    sys.path[0] = os.getcwd()

from tools.pytest_bridge import junit_report  # noqa: E402

_NO_TESTS_COLLECTED = 5  # pytest.ExitCode.NO_TESTS_COLLECTED
_PR_SET_PDEATHSIG = 1


def _shard_env() -> tuple[int, int]:
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "0") or 0)
    index = int(os.environ.get("TEST_SHARD_INDEX", "0") or 0)
    if total > 1 and not 0 <= index < total:
        raise SystemExit(
            f"pytest_main: TEST_SHARD_INDEX={index} is outside 0..{total - 1}"
            f" (TEST_TOTAL_SHARDS={total}); Bazel sets both, check the environment."
        )
    return index, total


def _filter_hint(record: dict) -> str:
    text = record["filter"]
    if text.startswith("-") or "," in text:
        return (
            " It looks like a gtest filter: --test_filter here is a test id fragment or a -k"
            " expression; write `a or b` for several tests and `not x` to leave one out."
        )
    if not record["filter_is_expression"]:
        return " It is not a valid -k expression either (`x or` is incomplete)."
    return ""


def _explain_no_tests(record: dict, argv: list[str], index: int, total: int):
    """Maps pytest's "no tests ran" to (exit code, outcome for a one-case report or None, reason).

    Only a filter or a shard may select nothing: the target then passes, reported as skipped, and a
    bazel test in which no target ran a test is failed by tools/results/ran_tests.py (which tools/test.sh and
    tools/run_matrix.sh run).
    """
    code = record["exit_code"]
    if code != _NO_TESTS_COLLECTED:
        return code, None, None
    if record["collected"] == 0 and not record["filter"]:
        reason = (
            f"the files given ({' '.join(argv)}) define no tests. pytest collects functions"
            " named test* and classes named Test* (without __init__); fix the names or drop the"
            " file from the target."
        )
        print(f"pytest_main: FAILED: {reason}")
        return 1, "error", reason
    if record["filter"] and record["selected"] == 0:
        reason = f"--test_filter {record['filter']!r} matched no test in this target." + _filter_hint(record)
        print(f"pytest_main: {reason} This target passes as skipped.")
        return 0, "skipped", reason
    if total > 1 and record["shard_offered"] and not record["shard_kept"]:
        reason = (
            f"shard index {index} of {total} shards got no test class (the target has fewer test groups than shards)."
        )
        print(f"pytest_main: {reason} This shard passes as skipped.")
        return 0, "skipped", reason
    return code, None, None  # e.g. extra -k/-m arguments deselected everything: a failure, as in pytest


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it (a clean pytest teardown) if this process dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _run_session(record_path: str, current_test: str, argv: list[str]) -> int:
    # This process imports no pytest: the child alone pays for it.
    child = subprocess.Popen(
        [sys.executable, "-m", "tools.pytest_bridge.pytest_session", record_path, current_test] + argv,
        preexec_fn=_die_with_parent,
    )

    def forward(signum, frame):
        child.send_signal(signum)  # a no-op once the child has been reaped

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _premature_exit(returncode: int, current_test: str) -> str:
    if returncode < 0:
        how = f"was killed by {signal.Signals(-returncode).name}"
    else:
        how = f"exited with code {returncode}"
    try:
        with open(current_test, encoding="utf-8") as f:
            where = f"in {f.read()} (its set-up, call or teardown)"
    except FileNotFoundError:
        where = "before any test started (while collecting, or in a conftest)"
    return (
        f"the test process {how} {where} before pytest finished its session: a test or fixture"
        " ended the process (os._exit, a crash, a kill). This is a failure whatever the exit code;"
        " see test.log for how far it got."
    )


def main(argv: list[str]) -> int:
    index, total = _shard_env()
    premature_exit_file = os.environ.get("TEST_PREMATURE_EXIT_FILE")
    if premature_exit_file:
        open(premature_exit_file, "w").close()  # removed below only once pytest has finished
    if os.environ.get("TEST_SHARD_STATUS_FILE"):
        open(os.environ["TEST_SHARD_STATUS_FILE"], "a").close()
    xml = os.environ.get("XML_OUTPUT_FILE")
    suite = os.environ.get("TEST_TARGET", "pytest_main")

    with tempfile.TemporaryDirectory(prefix="pytest_main-", dir=os.environ.get("TEST_TMPDIR")) as tmp:
        record_path, current_test = os.path.join(tmp, "session.json"), os.path.join(tmp, "current_test")
        returncode = _run_session(record_path, current_test, argv)
        record = _read_json(record_path)
        if record is None:
            message = _premature_exit(returncode, current_test)
            print(f"\npytest_main: FAILED: {message}", flush=True)  # after a cut-off line
            if xml:
                junit_report.write_single_case(xml, suite, "pytest session", "error", message)
            return 1  # TEST_PREMATURE_EXIT_FILE stays: Bazel records test.exited_prematurely

    code, outcome, reason = _explain_no_tests(record, argv, index, total)
    if outcome and xml:
        name = "no test selected" if outcome == "skipped" else "no test defined"
        junit_report.write_single_case(xml, suite, name, outcome, reason)
    if premature_exit_file:
        os.remove(premature_exit_file)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
