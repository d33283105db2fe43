"""tools/results/ran_tests.py and the readers in tools/results/testlogs.py, on fake build events and JUnit files."""

import pytest

from tools.results import ran_tests, testlogs
from tools.results.unit.testlogs_testing import write_bep, write_xml

NOTHING_MATCHED = "--test_filter 'no_such_test' matched no test in this target."


def test_an_invocation_where_every_target_skipped_fails_and_says_why(tmp_path, capsys):
    a = write_xml(tmp_path / "a" / "test.xml", {"no test selected": "skipped"}, NOTHING_MATCHED)
    b = write_xml(tmp_path / "b" / "test.xml", {"no test selected": "skipped"}, NOTHING_MATCHED)
    write_bep(tmp_path / "bep.json", [("//t:a", a, "PASSED"), ("//t:b", b, "PASSED")], patterns=["//t/..."])
    assert ran_tests.main(["ran_tests", str(tmp_path / "bep.json")]) == 1
    err = capsys.readouterr().err
    assert "FAILED: no test case ran in `bazel test //t/...`: all 2 test result(s) are skipped" in err
    assert NOTHING_MATCHED in err and err.count(NOTHING_MATCHED) == 1  # each reason once


def test_one_case_that_ran_anywhere_passes(tmp_path, capsys):
    a = write_xml(tmp_path / "a" / "test.xml", {"no test selected": "skipped"}, NOTHING_MATCHED)
    b = write_xml(tmp_path / "b" / "test.xml", {"test_x": "passed", "test_y": "skipped"})
    write_bep(tmp_path / "bep.json", [("//t:a", a, "PASSED"), ("//t:b", b, "PASSED", 1, 1, 1, True)])
    assert ran_tests.main(["ran_tests", str(tmp_path / "bep.json")]) == 0
    assert "1 test case(s) ran in `bazel test //...` (1 passed, 0 failed, 2 skipped)" in capsys.readouterr().out


def test_results_of_earlier_invocations_do_not_count(tmp_path):
    # bazel-testlogs still holds a passing XML from an earlier run; this invocation's events don't name it.
    write_xml(tmp_path / "stale" / "test.xml", {"test_x": "passed"})
    a = write_xml(tmp_path / "a" / "test.xml", {"no test selected": "skipped"}, NOTHING_MATCHED)
    write_bep(tmp_path / "bep.json", [("//t:a", a, "PASSED")])
    assert ran_tests.main(["ran_tests", str(tmp_path / "bep.json")]) == 1


def test_failed_cases_ran(tmp_path):
    a = write_xml(tmp_path / "a" / "test.xml", {"test_x": "error"})
    write_bep(tmp_path / "bep.json", [("//t:a", a, "FAILED")])
    assert ran_tests.main(["ran_tests", str(tmp_path / "bep.json")]) == 0


@pytest.mark.parametrize(
    "setup,message",
    [
        ("missing", "no build event file"),
        ("no_results", "has no test result"),
    ],
)
def test_no_usable_build_events_is_an_error(tmp_path, capsys, setup, message):
    if setup == "no_results":
        write_bep(tmp_path / "bep.json", [])
    assert ran_tests.main(["ran_tests", str(tmp_path / "bep.json")]) == 2
    assert message in capsys.readouterr().err


def test_read_bep_keeps_the_last_attempt_per_shard_and_run(tmp_path):
    xml = write_xml(tmp_path / "x.xml", {"t": "passed"})
    write_bep(
        tmp_path / "bep.json",
        [
            ("//t:a", xml, "FAILED", 1, 1, 1),
            ("//t:a", xml, "PASSED", 1, 1, 2),
            ("//t:a", xml, "PASSED", 2, 1, 1),
            ("//t:b", None, "NO_STATUS"),
        ],
    )
    invocation = testlogs.read_bep(tmp_path / "bep.json")
    assert invocation.command == "test" and invocation.patterns == ["//..."]
    assert sorted((r.label, r.shard, r.attempt, r.status, r.xml) for r in invocation.results) == [
        ("//t:a", 1, 2, "PASSED", xml),
        ("//t:a", 2, 1, "PASSED", xml),
        ("//t:b", 1, 1, "NO_STATUS", None),
    ]


def test_read_bep_gives_bazels_seconds_of_each_attempt_where_the_event_has_them(tmp_path):
    a = write_xml(tmp_path / "a.xml", {"t": "passed"})
    b = write_xml(tmp_path / "b.xml", {"t": "passed"})
    write_bep(tmp_path / "bep.json", [("//t:a", a, "PASSED"), ("//t:b", b, "PASSED")], attempt_s={a: 60.534})
    results = {r.label: r.attempt_s for r in testlogs.read_bep(tmp_path / "bep.json").results}
    assert results == {"//t:a": 60.534, "//t:b": None}


def test_junit_outcomes_count_errors_as_failed_and_skips_apart(tmp_path):
    xml = write_xml(tmp_path / "x.xml", {"a": "passed", "b": "failed", "c": "error", "d": "skipped"})
    assert testlogs.junit_outcomes(xml) == {"passed": 1, "failed": 2, "skipped": 1}


def test_several_invocations_are_judged_as_one_run(tmp_path, capsys):
    """run_matrix.sh's waves: a filter that matches only in the second wave ran a test case."""
    a = write_xml(tmp_path / "a" / "test.xml", {"no test selected": "skipped"}, NOTHING_MATCHED)
    b = write_xml(tmp_path / "b" / "test.xml", {"test_x": "passed"})
    write_bep(tmp_path / "one.json", [("//t:a", a, "PASSED")], patterns=["//t/..."])
    write_bep(tmp_path / "two.json", [("//t:b", b, "PASSED")], patterns=["//t/..."])
    assert ran_tests.main(["ran_tests", str(tmp_path / "one.json"), str(tmp_path / "two.json")]) == 0
    assert "1 test case(s) ran in `bazel test //t/...` (2 invocations)" in capsys.readouterr().out
    write_bep(tmp_path / "two.json", [("//t:a", a, "PASSED")], patterns=["//t/..."])
    assert ran_tests.main(["ran_tests", str(tmp_path / "one.json"), str(tmp_path / "two.json")]) == 1
