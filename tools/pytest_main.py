"""Main of every sleepwake py_test: runs pytest over the test files Bazel passes as arguments.

Usage (what the sleepwake_py_test macro does): pytest_main.py FILE... [EXTRA_PYTEST_ARGS...], with the
cwd at the workspace root of the runfiles tree. Bazel's test protocol maps onto pytest like this:
  TESTBRIDGE_TEST_ONLY (--test_filter)      selects tests by pytest id fragment, name or -k expression
  TEST_TOTAL_SHARDS / TEST_SHARD_INDEX      split the tests, keeping each test class in one shard
  TEST_SHARD_STATUS_FILE                    touched: tells Bazel this runner understands sharding
  XML_OUTPUT_FILE / TEST_TARGET             JUnit XML report and its suite name
  TEST_PREMATURE_EXIT_FILE                  exists while pytest runs, gone once it has finished
  TEST_TMPDIR                               parent of pytest's basetemp
"""

from __future__ import annotations

import os
import signal
import sys

if __name__ == "__main__":
    # Python puts the script's directory, symlinks resolved, first on sys.path: under Bazel that is
    # tools/ of the source tree, outside the runfiles, through which tests could import files no
    # target declares. The workspace root (the cwd) takes its place, as in Bazel's PYTHONPATH; it also
    # makes `tools` importable when this file is run directly.
    sys.path[0] = os.getcwd()

import pytest  # noqa: E402

from tools.pytest_bazel_plugin import FilterPlugin, ShardPlugin  # noqa: E402

_NO_TESTS_COLLECTED = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


def _pytest_args(files_and_args: list[str]) -> list[str]:
    args = [
        "-p", "no:cacheprovider",  # the runfiles tree is read-only and never reused by a later run
        "-ra",  # the reason for every non-passing test, at the end of test.log
        "--rootdir", os.getcwd(),  # node ids are workspace paths, whatever files a target holds
        "-o", "log_cli=false",  # live logs would interleave with the report; failures show captured logs
    ]
    if not sys.stdout.isatty():
        args.append("--color=no")  # test.log is read as plain text
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        # xunit2 is the schema-valid JUnit flavour; Bazel reads testsuite/testcase/failure from it.
        args += [f"--junitxml={xml}", "-o", "junit_family=xunit2"]
        if os.environ.get("TEST_TARGET"):
            args += ["-o", f"junit_suite_name={os.environ['TEST_TARGET']}"]
    if os.environ.get("TEST_TMPDIR"):
        # A subdirectory: pytest empties its basetemp first, and TEST_TMPDIR is also HOME.
        args.append("--basetemp=" + os.path.join(os.environ["TEST_TMPDIR"], "pytest"))
    return args + files_and_args


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum} (Bazel's test timeout sends SIGTERM)")


def _explain_no_tests(code: int, test_filter: FilterPlugin, sharder: ShardPlugin,
                      argv: list[str]) -> int:
    """Maps pytest's "no tests ran" to pass or fail: only a filter or a shard may select nothing."""
    if code != _NO_TESTS_COLLECTED:
        return code
    if test_filter.collected == 0 and not test_filter.text:
        print(f"pytest_main: FAILED: the files given ({' '.join(argv)}) define no tests. pytest"
              " collects functions named test* and classes named Test* (without __init__); fix the"
              " names or drop the file from the target.")
        return 1
    if test_filter.text and test_filter.selected == 0:
        print(f"pytest_main: filter {test_filter.text!r} matched no test in this target; passing.")
        return 0
    if sharder.total > 1 and sharder.offered and not sharder.kept:
        print(f"pytest_main: shard index {sharder.index} of {sharder.total} shards got no test class"
              " (the target has fewer test groups than shards); passing.")
        return 0
    return code  # e.g. extra -k/-m arguments deselected everything: a failure, as in plain pytest


def _shard_env() -> tuple[int, int]:
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "0") or 0)
    index = int(os.environ.get("TEST_SHARD_INDEX", "0") or 0)
    if total > 1 and not 0 <= index < total:
        raise SystemExit(f"pytest_main: TEST_SHARD_INDEX={index} is outside 0..{total - 1}"
                         f" (TEST_TOTAL_SHARDS={total}); Bazel sets both, check the environment.")
    return index, total


def main(argv: list[str]) -> int:
    index, total = _shard_env()
    premature_exit_file = os.environ.get("TEST_PREMATURE_EXIT_FILE")
    if premature_exit_file:
        open(premature_exit_file, "w").close()  # a test that kills the process leaves it behind
    if os.environ.get("TEST_SHARD_STATUS_FILE"):
        open(os.environ["TEST_SHARD_STATUS_FILE"], "a").close()
    # On a timeout Bazel sends SIGTERM, then SIGKILL after a grace period. As a KeyboardInterrupt it
    # lets pytest tear fixtures down (stopping servers, saving their logs) and write the XML report.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)

    test_filter = FilterPlugin(os.environ.get("TESTBRIDGE_TEST_ONLY", ""))
    sharder = ShardPlugin(index, total)
    code = int(pytest.main(_pytest_args(argv), plugins=[test_filter, sharder]))
    code = _explain_no_tests(code, test_filter, sharder, argv)

    # Only here: an exception escaping pytest is a premature exit too, so no try/finally.
    if premature_exit_file and os.path.exists(premature_exit_file):
        os.remove(premature_exit_file)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
