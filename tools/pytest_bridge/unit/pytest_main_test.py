"""Tests of tools/pytest_bridge/pytest_main.py and its plugins.

Runs pytest_main as Bazel would (a subprocess, controlled environment) over testdata/pytest_main/.
The tests are grouped in classes so that the target itself is sharded (BUILD: shard_count), one class
per shard, by the class-preserving split they test.
"""

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

import pytest

from tools.pytest_bridge.pytest_bazel_plugin import assign_groups, natural_key

# Paths come from this file, not the cwd: under Bazel the cwd is the runfiles root.
HERE = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PYTEST_MAIN = os.path.join(os.path.dirname(HERE), "pytest_main.py")
# Relative to the workspace root, as the macro passes them.
SAMPLES = os.path.relpath(os.path.join(HERE, "testdata", "pytest_main"), WORKSPACE)

# The outer Bazel run sets these for itself; the inner run must see only what each test sets.
PROTOCOL_VARS = (
    "TESTBRIDGE_TEST_ONLY",
    "TEST_TOTAL_SHARDS",
    "TEST_SHARD_INDEX",
    "TEST_SHARD_STATUS_FILE",
    "XML_OUTPUT_FILE",
    "TEST_PREMATURE_EXIT_FILE",
    "TEST_TARGET",
    "TEST_TMPDIR",
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
)

SCHEDULER_GATE = {
    "TestSchedulerGate::test_x[MRV1-eager]",
    "TestSchedulerGate::test_x[MRV1-graph]",
    "TestSchedulerGate::test_x[MRV2-eager]",
    "TestSchedulerGate::test_x[MRV2-graph]",
    "TestSchedulerGate::test_y",
}
OTHER = {"TestOther::test_x", "TestOther::test_graph_only"}
THIRD = {"TestThird::test_z"}
FUNCTIONS = {"sample_functions::test_a", "sample_functions::test_b", "sample_functions::test_c"}
SHARDED_SAMPLES = [
    "sharded/sample_flags.py",
    "sharded/sample_gate.py",
    "sharded/sample_latency.py",
    "sharded/sample_race.py",
]
SHARDED_CLASSES = {"TestFlags", "TestGate", "TestLatency", "TestRace"}


def _env(tmp_path, **overrides):
    env = {key: value for key, value in os.environ.items() if key not in PROTOCOL_VARS}
    (tmp_path / "tmpdir").mkdir(exist_ok=True)
    env.update(
        XML_OUTPUT_FILE=str(tmp_path / "test.xml"),
        TEST_TMPDIR=str(tmp_path / "tmpdir"),
        TEST_PREMATURE_EXIT_FILE=str(tmp_path / "premature_exit"),
    )
    env.update(overrides)
    return env


def _command(samples, extra_args=()):
    return [sys.executable, PYTEST_MAIN, *(os.path.join(SAMPLES, s) for s in samples), *extra_args]


def run_main(tmp_path, samples, extra_args=(), **env):
    """Runs pytest_main; returns (exit code, output, {short test id: outcome} from the JUnit XML)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        _command(samples, extra_args),
        cwd=WORKSPACE,
        env=_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr, _testcases(tmp_path / "test.xml")


def _testcases(xml_path):
    if not xml_path.exists():
        return {}
    outcomes = {}
    for case in ElementTree.parse(xml_path).getroot().iter("testcase"):
        # classname is the dotted module path, plus the class for methods.
        test_id = case.attrib["classname"].rsplit(".", 1)[-1] + "::" + case.attrib["name"]
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[test_id] = "failed"
        else:
            outcomes[test_id] = "skipped" if case.find("skipped") is not None else "passed"
    return outcomes


def _single_case(xml_path):
    """(outcome element tag, its message) of a report holding exactly one test case."""
    cases = list(ElementTree.parse(xml_path).getroot().iter("testcase"))
    assert len(cases) == 1, ElementTree.tostring(ElementTree.parse(xml_path).getroot())
    details = list(cases[0])
    assert len(details) == 1
    return details[0].tag, details[0].get("message")


def _run_shards(tmp_path, total):
    shards = []
    for index in range(total):
        shard_dir = tmp_path / f"shard{index}"
        status_file = shard_dir / "shard_status"
        code, output, cases = run_main(
            shard_dir,
            ["sample_classes.py", "sample_functions.py"],
            TEST_TOTAL_SHARDS=str(total),
            TEST_SHARD_INDEX=str(index),
            TEST_SHARD_STATUS_FILE=str(status_file),
        )
        assert code == 0, output
        assert status_file.exists(), "Bazel needs the shard status file touched"
        shards.append(set(cases))
    return shards


def _start_blocking_sample(tmp_path, new_session=False):
    """Runs sample_sigterm.py until its test blocks; returns (pytest_main's Popen, the pytest pid)."""
    proc = subprocess.Popen(
        _command(["sample_sigterm.py"]),
        cwd=WORKSPACE,
        env=_env(tmp_path, SAMPLE_SIGNAL_DIR=str(tmp_path)),
        start_new_session=new_session,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() or not (tmp_path / "started").read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the sample test did not start within 60 s: " + proc.communicate()[0])
        time.sleep(0.05)
    return proc, int((tmp_path / "started").read_text())


def _finish(proc):
    try:
        return proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()


class TestFilterSelects:
    """The filter keeps exactly the tests it names; without one, everything runs."""

    @pytest.mark.parametrize(
        "test_filter,expected",
        [
            ("TestSchedulerGate", SCHEDULER_GATE),  # a class name
            ("test_x", SCHEDULER_GATE - {"TestSchedulerGate::test_y"} | {"TestOther::test_x"}),  # a test name
            ("TestSchedulerGate::test_x[MRV1-eager]", {"TestSchedulerGate::test_x[MRV1-eager]"}),  # an id
            ("test_x[MRV2", {"TestSchedulerGate::test_x[MRV2-eager]", "TestSchedulerGate::test_x[MRV2-graph]"}),
            ("sample_classes.py::TestOther::test_x", {"TestOther::test_x"}),  # a node id with its file
            ("MRV1 and not graph", {"TestSchedulerGate::test_x[MRV1-eager]"}),  # -k expressions
            ("TestThird or graph_only", THIRD | {"TestOther::test_graph_only"}),
            ("test_a", {"sample_functions::test_a"}),
            (
                "schedulergate and mrv2",
                {
                    "TestSchedulerGate::test_x[MRV2-eager]",  # -k is case-insensitive
                    "TestSchedulerGate::test_x[MRV2-graph]",
                },
            ),
        ],
    )
    def test_filter_selects_exactly_the_matching_tests(self, tmp_path, test_filter, expected):
        code, output, cases = run_main(
            tmp_path, ["sample_classes.py", "sample_functions.py"], TESTBRIDGE_TEST_ONLY=test_filter
        )
        assert code == 0, output
        assert set(cases) == expected, output
        assert "deselected" in output

    def test_no_filter_runs_everything_and_writes_the_suite_name(self, tmp_path):
        code, output, cases = run_main(
            tmp_path, ["sample_classes.py", "sample_functions.py"], TEST_TARGET="//tools:sample"
        )
        assert code == 0, output
        assert cases == dict.fromkeys(SCHEDULER_GATE | OTHER | THIRD | FUNCTIONS, "passed")
        suite = ElementTree.parse(tmp_path / "test.xml").getroot().find("testsuite")
        assert suite is not None and suite.get("name") == "//tools:sample"

    def test_extra_args_after_the_files_reach_pytest(self, tmp_path):
        code, output, cases = run_main(tmp_path, ["sample_classes.py"], extra_args=["-k", "TestThird"])
        assert code == 0, output
        assert set(cases) == THIRD


class TestFilterMatchingNothing:
    """A filter that matches nothing passes as skipped, saying why; no filter and no test fails."""

    @pytest.mark.parametrize(
        "test_filter,hint",
        [
            ("no_such_test", None),
            ("MRV3 and eager", None),
            # Directory and module names are not test ids: pytest's -k alone would match them (every test
            # under tests/sleep_wake for `sleep`).
            ("testdata", None),
            ("pytest_main", None),
            ("sample_classes", None),
            # gtest-style and unparsable filters say how to write the filter instead.
            ("-test_x", "looks like a gtest filter"),
            ("test_x,test_y", "looks like a gtest filter"),
            ("test_x or", "not a valid -k expression"),
            ("(", "not a valid -k expression"),
        ],
    )
    def test_filter_matching_nothing_passes_as_skipped_and_says_why(self, tmp_path, test_filter, hint):
        code, output, cases = run_main(
            tmp_path, ["sample_classes.py"], TESTBRIDGE_TEST_ONLY=test_filter, TEST_TARGET="//tools:sample"
        )
        assert code == 0, output
        message = f"--test_filter {test_filter!r} matched no test in this target."
        assert message in output
        # The report says skipped, with the reason, never a passed case.
        assert cases == {"//tools:sample::no test selected": "skipped"}, output
        tag, reported = _single_case(tmp_path / "test.xml")
        assert tag == "skipped" and reported.startswith(message)
        if hint:
            assert hint in reported and hint in output
        assert not (tmp_path / "premature_exit").exists()

    def test_file_without_tests_fails_with_a_clear_message(self, tmp_path):
        code, output, cases = run_main(tmp_path, ["sample_empty.py"])
        assert code == 1, output
        assert "define no tests" in output
        assert cases == {"pytest_main::no test defined": "failed"}

    def test_file_without_tests_passes_under_a_filter(self, tmp_path):
        code, output, _ = run_main(tmp_path, ["sample_empty.py"], TESTBRIDGE_TEST_ONLY="test_a")
        assert code == 0, output


class TestSharding:
    """Shards partition the tests, keeping each test class (and its server) in one shard."""

    def test_shards_partition_the_tests_keeping_groups_together(self, tmp_path):
        shards = _run_shards(tmp_path, 3)
        # Groups in node id order: TestOther (2), TestSchedulerGate (5), TestThird (1), sample_functions (3),
        # each given to the then smallest shard.
        assert shards == [OTHER, SCHEDULER_GATE, THIRD | FUNCTIONS]
        assert _run_shards(tmp_path / "again", 3) == shards, "sharding must be deterministic"

    def test_shard_without_a_group_passes_as_skipped_and_says_why(self, tmp_path):
        shards = _run_shards(tmp_path, 5)  # four groups, five shards
        assert shards == [OTHER, SCHEDULER_GATE, THIRD, FUNCTIONS, {"pytest_main::no test selected"}]
        outcome, message = _single_case(tmp_path / "shard4" / "test.xml")
        assert outcome == "skipped" and message.startswith("shard index 4 of 5 shards got no test class")

    def test_as_many_shards_as_classes_give_each_shard_one_class_and_one_server(self, tmp_path):
        # What the state walk's cells rely on (tools/matrix.bzl SHARD_COUNTS): one pytest class per shard.
        ran = []
        for index in range(len(SHARDED_CLASSES)):
            shard_dir = tmp_path / f"shard{index}"
            status_file = shard_dir / "shard_status"
            code, output, cases = run_main(
                shard_dir,
                SHARDED_SAMPLES,
                TEST_TOTAL_SHARDS="4",
                TEST_SHARD_INDEX=str(index),
                TEST_SHARD_STATUS_FILE=str(status_file),
                SAMPLE_SIGNAL_DIR=str(shard_dir),
            )
            assert code == 0, output
            assert status_file.exists(), "Bazel needs the shard status file touched"
            classes = {test_id.split("::")[0] for test_id in cases}
            assert len(classes) == 1 and set(cases.values()) == {"passed"}, cases
            # The class-scoped "server" fixture started once in this shard, for its one class.
            assert (shard_dir / "servers").read_text().split() == sorted(classes)
            ran.append(set(cases))
        assert {test_id.split("::")[0] for shard in ran for test_id in shard} == SHARDED_CLASSES
        code, output, everything = run_main(tmp_path / "unsharded", SHARDED_SAMPLES, SAMPLE_SIGNAL_DIR=str(tmp_path))
        assert code == 0, output
        assert set().union(*ran) == set(everything) and sum(map(len, ran)) == len(everything) == 9

    def test_sharding_applies_to_the_filtered_tests(self, tmp_path):
        selected = []
        for index in range(2):
            code, output, cases = run_main(
                tmp_path / str(index),
                ["sample_classes.py"],
                TESTBRIDGE_TEST_ONLY="test_x",
                TEST_TOTAL_SHARDS="2",
                TEST_SHARD_INDEX=str(index),
            )
            assert code == 0, output
            selected.append(set(cases))
        assert selected == [{"TestOther::test_x"}, SCHEDULER_GATE - {"TestSchedulerGate::test_y"}]

    def test_shard_index_out_of_range_fails(self, tmp_path):
        code, output, _ = run_main(tmp_path, ["sample_classes.py"], TEST_TOTAL_SHARDS="2", TEST_SHARD_INDEX="2")
        assert code != 0
        assert "TEST_SHARD_INDEX=2 is outside 0..1" in output

    def test_assign_groups_gives_each_group_to_the_smallest_shard(self):
        assert assign_groups([5, 1, 1, 1, 3], 2) == [0, 1, 1, 1, 1]
        assert assign_groups([2, 2, 2], 3) == [0, 1, 2]
        assert assign_groups([1, 1, 1], 5) == [0, 1, 2]
        assert assign_groups([], 2) == []

    def test_a_split_class_is_dealt_in_its_parts_order(self):
        """Shard k of a split class is part k (a mutant's inner shard i walks the walk's shard i): its parts'
        numbers sort as numbers, not as text (TestStateWalkShard10 before TestStateWalkShard2)."""
        ids = [f"t.py::TestStateWalkShard{k}::test_walk[MRV2-eager]" for k in (10, 2, 0, 1, 11)]
        assert sorted(ids, key=natural_key) == [ids[2], ids[3], ids[1], ids[0], ids[4]]


class TestEndOfSession:
    """Only a finished pytest session passes; signals reach it and its fixtures are torn down."""

    def test_failing_test_exits_1_and_removes_the_premature_exit_file(self, tmp_path):
        code, output, cases = run_main(tmp_path, ["sample_failing.py"])
        assert code == 1, output
        assert cases == {"sample_failing::test_passes": "passed", "sample_failing::test_fails": "failed"}
        assert not (tmp_path / "premature_exit").exists()

    def test_a_profile_of_the_test_processs_cpu_is_written_only_when_asked(self, tmp_path):
        outputs = tmp_path / "outputs"
        outputs.mkdir()
        code, output, _ = run_main(tmp_path / "plain", ["sample_busy.py"], TEST_UNDECLARED_OUTPUTS_DIR=str(outputs))
        assert code == 0 and not (outputs / "test_profile.txt").exists(), output
        code, output, _ = run_main(
            tmp_path / "profiled",
            ["sample_busy.py"],
            SLEEPWAKE_PROFILE_TESTS="1",
            TEST_UNDECLARED_OUTPUTS_DIR=str(outputs),
        )
        profile = (outputs / "test_profile.txt").read_text()
        assert code == 0 and "sorted by tottime" in profile and "sorted by cumulative" in profile, output
        busiest = [line for line in profile.splitlines() if "sample_busy.py" in line and "(spend_cpu)" in line]
        assert busiest and float(busiest[0].split()[3]) >= 0.2, profile[:3000]  # its cumulative CPU seconds

    def test_plugins_installed_in_the_runners_python_are_not_loaded(self, tmp_path):
        site = os.path.join(HERE, "testdata", "autoload_site")  # holds a pytest11 entry point
        pythonpath = os.pathsep.join([site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        code, output, _ = run_main(tmp_path, ["sample_functions.py"], extra_args=["-s"], PYTHONPATH=pythonpath)
        assert code == 0 and "sample_autoload_plugin" not in output, output
        assert (
            "sample_autoload_plugin loaded"
            in subprocess.run(  # the same site, autoloading as pytest does
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "-s",
                    os.path.join(SAMPLES, "sample_functions.py"),
                ],
                cwd=WORKSPACE,
                env=_env(tmp_path, PYTHONPATH=pythonpath),
                capture_output=True,
                text=True,
                timeout=120,
            ).stdout
        )

    def test_run_sets_up_the_protocol_files_and_cleans_up(self, tmp_path):
        code, output, _ = run_main(tmp_path, ["sample_protocol.py"])
        assert code == 0, output  # the sample checks the premature exit file, basetemp and cache provider
        assert not (tmp_path / "premature_exit").exists()

    @pytest.mark.parametrize(
        "sample,where",
        [
            ("sample_exits.py", f"in {SAMPLES}/sample_exits.py::test_exits_the_process"),
            ("sample_exits_in_fixture.py", f"in {SAMPLES}/sample_exits_in_fixture.py::test_never_runs"),
        ],
    )
    def test_an_exit_before_pytest_finished_fails_whatever_the_exit_code(self, tmp_path, sample, where):
        code, output, _ = run_main(tmp_path, [sample])  # the process exits 0
        assert code == 1, output
        assert "the test process exited with code 0 " + where in output
        assert "before pytest finished its session" in output
        assert _single_case(tmp_path / "test.xml")[0] == "error"
        assert (tmp_path / "premature_exit").exists(), "Bazel reads the premature exit file left behind"

    @pytest.mark.parametrize("to_the_group", [False, True])
    def test_sigterm_tears_fixtures_down_once_and_writes_the_report(self, tmp_path, to_the_group):
        # Bazel's timeout signals the whole process group (both processes); `kill PID` only pytest_main,
        # which forwards it.
        proc, pytest_pid = _start_blocking_sample(tmp_path, new_session=to_the_group)
        assert pytest_pid != proc.pid, "pytest runs in a child of pytest_main"
        if to_the_group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        output = _finish(proc)
        assert proc.returncode == 2, output  # pytest's "interrupted"
        assert (tmp_path / "torn_down").read_text() == "torn down\n", output
        assert (tmp_path / "test.xml").exists(), output
        assert not (tmp_path / "premature_exit").exists(), "pytest finished: a clean, if interrupted, exit"

    def test_sigkill_of_the_pytest_process_fails_and_leaves_the_premature_exit_file(self, tmp_path):
        proc, pytest_pid = _start_blocking_sample(tmp_path)
        os.kill(pytest_pid, signal.SIGKILL)
        output = _finish(proc)
        assert proc.returncode == 1, output
        assert (
            f"the test process was killed by SIGKILL in {SAMPLES}/sample_sigterm.py::"
            "TestBlocks::test_blocks_until_terminated"
        ) in output
        assert _single_case(tmp_path / "test.xml")[0] == "error"
        assert (tmp_path / "premature_exit").exists()
