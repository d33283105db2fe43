"""The pytest session of one Bazel test: tools/pytest_bridge/pytest_main.py runs this module as its child process.

    python3 -m tools.pytest_bridge.pytest_session RECORD CURRENT_TEST FILE... [EXTRA_PYTEST_ARGS...]

Runs pytest in this process with the Bazel plugins (--test_filter, sharding) and, only once pytest.main
has returned (the session finished, fixtures torn down, the JUnit XML written), writes RECORD: a JSON
completion record with pytest's exit code and the selection counts. A process that ends any other way
(os._exit in a test or a fixture, a crash, SIGKILL) leaves no record, and pytest_main fails the test
whatever its exit code. While tests run, CURRENT_TEST holds the node id of the test last started, so
that failure can name where the process died. SLEEPWAKE_PROFILE_TESTS=1 profiles the session's CPU.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import signal
import sys
import time

import pytest

from tools.pytest_bridge.pytest_bazel_plugin import FilterPlugin, ShardPlugin


def pytest_args(files_and_args: list[str]) -> list[str]:
    args = [
        "-p",
        "no:cacheprovider",  # the runfiles tree is read-only and never reused by a later run
        "-ra",  # the reason for every non-passing test, at the end of test.log
        "--rootdir",
        os.getcwd(),  # node ids are workspace paths, whatever files a target holds
        "-o",
        "log_cli=false",  # live logs would interleave with the report; failures show captured logs
        # Only the bridge's plugins: a runner's Python may hold others (the H200 image has pytest-timeout,
        # -xdist, -cov, -mock, -benchmark, hypothesis' and anyio's), which would change how a cell runs,
        # and pytest assertion-rewrites every module of an autoloaded plugin's package as it imports it:
        # hypothesis' and anyio's alone were most of a one-test session's CPU, in every test process
        # (docs/design.md).
        "--disable-plugin-autoload",
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


class _Progress:
    """Keeps CURRENT_TEST at the node id of the test being run (set-up, call and teardown)."""

    def __init__(self, path: str):
        self.path = path

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(nodeid)


def _interrupt_once(signum, frame):
    # Bazel's timeout SIGTERMs the whole process group and pytest_main forwards what it receives, so
    # this process may get the signal twice: a second KeyboardInterrupt would cut short the fixture
    # teardown (stopping vLLM servers, saving their logs) the first one started. Bazel's SIGKILL
    # after its grace period still ends a teardown that hangs.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum} (Bazel's test timeout sends SIGTERM)")


# --test_env=SLEEPWAKE_PROFILE_TESTS=1: where the test process's own CPU goes (on the H200 a walk step costs
# its test process several times what it costs on the fake tier, docs/design.md), by function, in
# the target's outputs. Its CPU time, not wall time: waiting on the server is not the test's cost.
PROFILE_ENV = "SLEEPWAKE_PROFILE_TESTS"
PROFILE_FILE = "test_profile.txt"
PROFILE_ROWS = 40


def _profiled(run):
    """run(), under cProfile when PROFILE_ENV is 1: the top PROFILE_ROWS functions by own and by cumulative
    CPU time go to $TEST_UNDECLARED_OUTPUTS_DIR/PROFILE_FILE (or the cwd outside Bazel)."""
    if os.environ.get(PROFILE_ENV) != "1":
        return run()
    profile = cProfile.Profile(time.process_time)
    try:
        return profile.runcall(run)
    finally:
        out = io.StringIO()
        for order in ("tottime", "cumulative"):
            out.write(f"# the test process's CPU seconds by function, sorted by {order}\n")
            pstats.Stats(profile, stream=out).sort_stats(order).print_stats(PROFILE_ROWS)
        path = os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or os.getcwd(), PROFILE_FILE)
        with open(path, "w", encoding="utf-8") as f:
            f.write(out.getvalue())


def _write_atomically(path: str, record: dict) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)  # the parent never reads half a record


def main(argv: list[str]) -> int:
    record_path, current_test, files_and_args = argv[0], argv[1], argv[2:]
    signal.signal(signal.SIGTERM, _interrupt_once)
    signal.signal(signal.SIGINT, _interrupt_once)
    test_filter = FilterPlugin(os.environ.get("TESTBRIDGE_TEST_ONLY", ""))
    sharder = ShardPlugin(
        int(os.environ.get("TEST_SHARD_INDEX", "0") or 0), int(os.environ.get("TEST_TOTAL_SHARDS", "0") or 0)
    )
    code = int(
        _profiled(
            lambda: pytest.main(pytest_args(files_and_args), plugins=[test_filter, sharder, _Progress(current_test)])
        )
    )
    _write_atomically(
        record_path,
        {
            "exit_code": code,
            "filter": test_filter.text,
            "filter_is_expression": test_filter.is_expression,
            "collected": test_filter.collected,
            "selected": test_filter.selected,
            "shard_offered": sharder.offered,
            "shard_kept": sharder.kept,
        },
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
