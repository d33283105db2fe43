"""The oracle mechanism: failures carry id, measured value and bound into the JUnit XML; bounds come from
the thresholds table with its relation; every check of the suite goes through an oracle."""

import ast
import glob
import os

import pytest

from tests.core import measure, oracle, thresholds
from tests.core.unit import inner_pytest

WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SUITE = os.path.join(WORKSPACE, "tests", "sleep_wake")
CORE = os.path.join(WORKSPACE, "tests", "core")


def test_a_failure_carries_id_measured_and_bound():
    with pytest.raises(oracle.OracleFailure) as e:
        oracle.equal("flags.is_sleeping", False, True, "after sleep level 1: /is_sleeping")
    f = e.value
    assert (f.oracle_id, f.measured, f.bound, f.relation) == ("flags.is_sleeping", False, True, "==")
    assert "[oracle flags.is_sleeping]" in str(f) and isinstance(f, AssertionError)
    assert oracle.properties(f) == [
        ("oracle", "flags.is_sleeping"),
        ("oracle_measured", "False"),
        ("oracle_bound", "== True"),
    ]


def test_an_unknown_id_is_refused():
    with pytest.raises(KeyError, match="no oracle 'flags.nope'"):
        oracle.fail("flags.nope", "x", 1, 2)


def test_only_oracle_failures_have_oracle_properties_and_anything_else_is_errored():
    assert oracle.properties(ConnectionError("refused")) == [("errored", "test code: ConnectionError")]
    assert oracle.properties(oracle.Precondition("no cache hit")) == [("errored", "precondition")]
    assert oracle.properties(pytest.skip.Exception("no GPU")) == []
    assert not issubclass(oracle.Precondition, AssertionError)


@pytest.mark.parametrize("o", list(oracle.ORACLES.values()), ids=lambda o: o.id)
def test_every_oracle_names_a_threshold_of_the_table(o):
    assert o.invariant.strip() and "." in o.id
    if o.threshold is not None:
        assert o.threshold in thresholds.TABLE, f"{o.id}: threshold {o.threshold!r} not in thresholds.TABLE"


def test_bounded_applies_the_thresholds_relation(tmp_path):
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    granule = thresholds.get("leak_bytes_per_cycle_max")
    assert thresholds.threshold("leak_bytes_per_cycle_max").relation == "<"
    oracle.bounded(rec, "device_bytes.leak_per_cycle", 0, "MRV1-eager", "median step")
    with pytest.raises(oracle.OracleFailure) as e:  # one granule is a leak NVML can see
        oracle.bounded(rec, "device_bytes.leak_per_cycle", granule, "MRV1-eager", "median step")
    assert e.value.relation == "<" and e.value.bound == granule and "leak_bytes_per_cycle_max" in str(e.value)
    with pytest.raises(oracle.OracleFailure, match=">="):
        oracle.bounded(rec, "device_bytes.level1_freed_kv", 0.5, "MRV1-eager", "freed")
    entries = rec.entries()
    assert [x["ok"] for x in entries] == [True, False, False]
    assert entries[1]["oracle"] == "device_bytes.leak_per_cycle" and entries[1]["bound"] == granule


def test_bounded_needs_an_oracle_with_a_threshold(tmp_path):
    with pytest.raises(KeyError, match="has no threshold"):
        oracle.bounded(measure.Recorder(path=str(tmp_path / "m")), "flags.gauge", 1, None, "x")


# A healthy MRV2-eager cell on the H200 in one `bazel test`
# of the whole suite, every full wake beside a neighbour's start step; and a run-C cell with most quiet.
LOADED = [0.374, 0.352, 0.285, 0.416, 0.263], [True] * 5
MOSTLY_QUIET = [0.093, 0.179, 0.139, 0.105, 0.08], [False, True, False, False, True]


def test_bounded_median_judges_a_loaded_healthy_cell_by_the_bound_of_its_condition(tmp_path):
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    oracle.bounded_median(rec, "latency.wake", *LOADED, "MRV2-eager", "full wakes")  # 0.352 <= 0.60
    oracle.bounded_median(rec, "latency.wake", *MOSTLY_QUIET, "MRV2-eager", "full wakes")  # 0.093 <= 0.30
    (loaded, quiet) = rec.entries()
    assert (loaded["key"], loaded["value"]) == ("wake_beside_start_s_max", 0.352)
    assert (quiet["key"], quiet["value"]) == ("wake_s_max", 0.105)  # the median of the three quiet ones


def test_bounded_median_fails_a_slow_wake_under_either_condition(tmp_path):
    """A wake 0.42 s slower (slow_wake's size) fails the quiet bound; beside start steps, the loaded one
    fails from 0.70 s (slower_wake's)."""
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    with pytest.raises(oracle.OracleFailure, match="no neighbour in a start step.*'wake_s_max'"):
        oracle.bounded_median(
            rec, "latency.wake", [x + 0.42 for x in MOSTLY_QUIET[0]], MOSTLY_QUIET[1], "MRV2-eager", "full wakes"
        )
    with pytest.raises(oracle.OracleFailure, match="wake_beside_start_s_max"):
        oracle.bounded_median(rec, "latency.wake", [x + 0.70 for x in LOADED[0]], LOADED[1], "MRV2-eager", "full wakes")


def test_bounded_median_needs_a_condition_per_sample_and_a_bound_of_the_oracles_own(tmp_path):
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    with pytest.raises(ValueError, match="5 samples and 4 conditions"):
        oracle.bounded_median(rec, "latency.wake", LOADED[0], LOADED[1][:4], None, "x")
    with pytest.raises(KeyError, match="no beside_start threshold"):
        oracle.bounded_median(rec, "latency.sleep", *LOADED, None, "x")
    with pytest.raises(KeyError, match="not bounded by 'sleep_s_max'"):
        oracle.bounded(rec, "latency.wake", 0.1, None, "x", threshold="sleep_s_max")


def test_together_reports_every_failing_oracle(tmp_path):
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    with pytest.raises(oracle.OracleFailure) as e:
        with oracle.together():
            oracle.bounded(rec, "device_bytes.level1_asleep", 0.9, "MRV2-eager", "fraction")
            oracle.bounded(rec, "device_bytes.level1_freed_kv", 0.2, "MRV2-eager", "freed")
            oracle.bounded(rec, "device_bytes.wake_growth", 0, "MRV2-eager", "growth")  # holds
    ids = [p[1] for p in oracle.properties(e.value) if p[0] == oracle.PROPERTY]
    assert ids == ["device_bytes.level1_asleep", "device_bytes.level1_freed_kv"]
    with oracle.together():  # nothing failed: nothing raised
        oracle.equal("flags.gauge", "(1,0,0)", "(1,0,0)", "gauge")
    with pytest.raises(oracle.OracleFailure):  # outside a group a failure raises at once again
        oracle.equal("flags.gauge", "(0,1,0)", "(1,0,0)", "gauge")


_INNER = """
import pytest
from tests.core import oracle

def test_oracle():
    oracle.equal("flags.gauge", "(1,0,0)", "(0,1,0)", "after sleep level 1: gauge")

def test_foreign_exception_named_like_an_oracle_flags_gauge():
    raise ConnectionError("refused")  # flags.gauge appears in the name, never in the properties

@pytest.fixture
def broken():
    oracle.fail("api.status", "GET /is_sleeping", "HTTP 500: EngineDeadError", "2xx", "")

def test_setup_oracle(broken):
    pass

@pytest.fixture
def fires_at_teardown():
    yield
    oracle.fail("requests.held_while_asleep", "a held request", "ended", "pending", "")

def test_bug_then_teardown_oracle(fires_at_teardown):
    raise TypeError("complete() got an unexpected keyword argument 'prmopt'")

def test_passes():
    pass
"""


def test_the_junit_xml_records_the_oracle_of_each_failed_case(tmp_path):
    cases = {name: dict(props) for name, props in inner_pytest.junit_properties(tmp_path, _INNER).items()}
    assert cases["test_oracle"] == {"oracle": "flags.gauge", "oracle_measured": "(1,0,0)", "oracle_bound": "== (0,1,0)"}
    assert cases["test_foreign_exception_named_like_an_oracle_flags_gauge"] == {"errored": "test code: ConnectionError"}
    assert cases["test_setup_oracle"]["oracle"] == "api.status"
    assert cases["test_passes"] == {}


def test_a_bug_in_the_test_keeps_a_later_phase_s_oracle_from_counting(tmp_path):
    """The call's TypeError marks the case errored, so the oracle its fixture fires at teardown is no kill
    (it used to be: the case carried the oracle id and no errored mark)."""
    props = inner_pytest.junit_properties(tmp_path, _INNER)["test_bug_then_teardown_oracle"]
    assert ("errored", "test code: TypeError") in props and ("oracle", "requests.held_while_asleep") in props


def _checks_outside_oracles(path: str) -> list[str]:
    """`assert` statements and `raise AssertionError(...)` in a file: checks that bypass the oracles."""
    found = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Assert):
            found.append(f"{os.path.relpath(path, SUITE)}:{node.lineno}: assert")
        if isinstance(node, ast.Raise) and node.exc is not None:
            call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(call, ast.Name) and call.id == "AssertionError":
                found.append(f"{os.path.relpath(path, SUITE)}:{node.lineno}: raise AssertionError")
    return found


def test_every_check_of_the_suite_is_an_oracle():
    files = sorted(
        glob.glob(os.path.join(SUITE, "test_*.py"))
        + glob.glob(os.path.join(CORE, "*.py"))
        + [os.path.join(SUITE, "conftest.py")]
    )
    assert len(files) > 20, f"found only {files} (Bazel: the test files and tests/core are this test's data)"
    bare = [hit for f in files for hit in _checks_outside_oracles(f)]
    assert not bare, (
        "checks that bypass the oracles (use oracle.equal/holds/bounded with an id of "
        f"oracle.ORACLES, or oracle.Precondition for set-up): {bare}"
    )


def test_the_lint_sees_a_bare_assert(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("def test_x():\n    assert 1 == 2\n    raise AssertionError('no')\n")
    assert [h.split(": ")[1] for h in _checks_outside_oracles(str(bad))] == ["assert", "raise AssertionError"]


def test_every_oracle_id_a_test_names_exists():
    named = set()
    for f in glob.glob(os.path.join(SUITE, "test_*.py")) + glob.glob(os.path.join(CORE, "*.py")):
        tree = ast.parse(open(f, encoding="utf-8").read())
        formatted = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            if (
                id(node) not in formatted
                and isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.count(".") == 1
            ):
                head = node.value.split(".")[0]
                if head in {o.split(".")[0] for o in oracle.ORACLES}:
                    named.add(node.value)
    unknown = sorted(n for n in named if n not in oracle.ORACLES and " " not in n)
    assert named and not unknown, f"oracle ids named by the suite but not in oracle.ORACLES: {unknown}"
