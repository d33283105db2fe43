"""The engine mutants' judge (tests/engine/mutants/judge.py) on hand-made runs; no vLLM needed: a kill
is an expected oracle id on every instance of the test, never the failure's text."""

import sleepwake_mutants
from tests.engine.mutants import judge
from tests.core.verdict import ERRORED, KILLED, NOT_APPLIED, OTHER, SURVIVED, Case

TEST = "tests/engine/test_x.py::test_gate"
HELD = "requests.held_until_resident"
ACTIVE = sleepwake_mutants.ACTIVATION.format(name="m", pid=12)
REACHED = ACTIVE + "\n" + sleepwake_mutants.REACHED.format(name="m", pid=12)
IDLE = sleepwake_mutants.NO_MUTANT.format(pid=12)


def _case(name, outcome, oracles=(), text=""):
    return Case("tests.engine.test_x", name, outcome, text[:20], text, tuple(oracles))


def test_killed_only_when_every_instance_fails_with_an_expected_oracle():
    cases = [
        _case("test_gate[1]", "failed", [HELD]),
        _case("test_gate[2]", "failed", [HELD]),
        _case("test_other", "passed"),
    ]
    assert judge.judge("m", "#1", {TEST: (HELD,)}, cases, REACHED).verdicts == {TEST: KILLED}
    cases[1] = _case("test_gate[2]", "passed")
    assert judge.judge("m", "#1", {TEST: (HELD,)}, cases, REACHED).verdicts == {TEST: SURVIVED}
    cases[1] = _case("test_gate[2]", "failed", ["flags.gauge"])
    run = judge.judge("m", "#1", {TEST: (HELD,)}, cases, REACHED)
    assert run.verdicts == {TEST: OTHER} and not run.ok


def test_failure_text_naming_the_issue_is_no_kill():
    """What the regex judge used to accept: an exception whose text names #44483 (the fake worker's
    ReleasedMemoryAccess, an AssertionError of the test itself) carries no oracle: errored."""
    cases = [_case("test_gate", "failed", text="ReleasedMemoryAccess: forward pass ... (vLLM #44395/#44483)")]
    run = judge.judge("m", "#1", {TEST: (HELD,)}, cases, REACHED)
    assert run.verdicts == {TEST: ERRORED} and not run.ok


def test_api_status_kills_only_a_mutant_whose_defect_is_an_error_answer():
    cases = [_case("test_gate", "failed", ["api.status"])]
    assert judge.judge("m", "#1", {TEST: ("api.status",)}, cases, REACHED).verdicts == {TEST: ERRORED}
    run = judge.judge("m", "#1", {TEST: ("api.status",)}, cases, REACHED, (sleepwake_mutants.ERROR_ANSWER,))
    assert run.verdicts == {TEST: KILLED} and run.ok


def test_a_mutant_that_was_never_applied_or_reached_is_not_applied():
    cases = [_case("test_gate", "failed", [HELD])]
    run = judge.judge("m", "#1", {TEST: (HELD,)}, cases, IDLE)
    assert run.verdicts == {TEST: NOT_APPLIED} and not run.ok and "activation" in run.problems[0]
    run = judge.judge("m", "#1", {TEST: (HELD,)}, cases, ACTIVE)
    assert run.verdicts == {TEST: NOT_APPLIED} and not run.ok and "reached line" in run.problems[0]


def test_a_renamed_test_is_reported_not_survived():
    run = judge.judge("m", "#1", {TEST: (HELD,)}, [_case("test_renamed", "failed", [HELD])], REACHED)
    assert run.verdicts == {TEST: OTHER} and "renamed or deleted" in run.problems[0]
    assert run.other_failures == ["tests.engine.test_x::test_renamed"]


def test_control_passes_only_when_all_pass_without_a_mutant():
    passing = [_case("test_gate", "passed"), _case("test_other", "passed")]
    assert judge.judge(judge.CONTROL, "", {}, passing, IDLE).ok
    assert not judge.judge(judge.CONTROL, "", {}, passing, ACTIVE + "\n" + IDLE).ok
    assert not judge.judge(judge.CONTROL, "", {}, passing, "").ok
    failing = passing + [_case("test_third", "failed", text="boom")]
    assert not judge.judge(judge.CONTROL, "", {}, failing, IDLE).ok
    assert not judge.judge(judge.CONTROL, "", {}, [], IDLE).ok


def test_table_has_a_row_per_run_with_the_control_last():
    runs = [
        judge.judge(judge.CONTROL, "", {}, [_case("test_gate", "passed")], IDLE),
        judge.judge("m", "#44483", {TEST: (HELD,)}, [_case("test_gate", "failed", [HELD])], REACHED),
    ]
    rows = judge.table(runs).splitlines()
    assert len(rows) == 4 and "`m`" in rows[2] and "killed" in rows[2] and "control" in rows[3]
