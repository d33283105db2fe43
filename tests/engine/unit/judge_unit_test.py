"""The engine mutants' judge (tests/engine/mutants/judge.py) on hand-made runs; no vLLM needed."""

import sleepwake_mutants
from tests.engine.mutants import judge
from tests.mutants.verdict import KILLED, OTHER, SURVIVED, Case

TEST = "tests/engine/test_x.py::test_gate"
ACTIVE = sleepwake_mutants.ACTIVATION.format(name="m", pid=12)
IDLE = sleepwake_mutants.NO_MUTANT.format(pid=12)


def _case(name, outcome, text=""):
    return Case("tests.engine.test_x", name, outcome, text[:20], text)


def test_killed_only_when_every_instance_fails_for_the_reason():
    cases = [_case("test_gate[1]", "failed", "scheduled (#44483)"),
             _case("test_gate[2]", "failed", "scheduled (#44483)"), _case("test_other", "passed")]
    assert judge.judge("m", "#1", {TEST: "#44483"}, cases, ACTIVE).verdicts == {TEST: KILLED}
    cases[1] = _case("test_gate[2]", "passed")
    assert judge.judge("m", "#1", {TEST: "#44483"}, cases, ACTIVE).verdicts == {TEST: SURVIVED}
    cases[1] = _case("test_gate[2]", "failed", "TimeoutError")
    run = judge.judge("m", "#1", {TEST: "#44483"}, cases, ACTIVE)
    assert run.verdicts == {TEST: OTHER} and not run.ok


def test_a_mutant_that_was_never_applied_proves_nothing():
    cases = [_case("test_gate", "failed", "#44483")]
    run = judge.judge("m", "#1", {TEST: "#44483"}, cases, IDLE)
    assert run.verdicts == {TEST: KILLED} and not run.ok and "activation" in run.problems[0]


def test_a_renamed_test_is_reported_not_survived():
    run = judge.judge("m", "#1", {TEST: "#44483"}, [_case("test_renamed", "failed", "#44483")], ACTIVE)
    assert run.verdicts == {TEST: OTHER} and "renamed or deleted" in run.problems[0]
    assert run.other_failures == ["tests.engine.test_x::test_renamed"]


def test_control_passes_only_when_all_pass_without_a_mutant():
    passing = [_case("test_gate", "passed"), _case("test_other", "passed")]
    assert judge.judge(judge.CONTROL, "", {}, passing, IDLE).ok
    assert not judge.judge(judge.CONTROL, "", {}, passing, ACTIVE + "\n" + IDLE).ok
    assert not judge.judge(judge.CONTROL, "", {}, passing, "").ok
    failing = passing + [_case("test_third", "failed", "boom")]
    assert not judge.judge(judge.CONTROL, "", {}, failing, IDLE).ok
    assert not judge.judge(judge.CONTROL, "", {}, [], IDLE).ok


def test_table_has_a_row_per_run_with_the_control_last():
    runs = [judge.judge(judge.CONTROL, "", {}, [_case("test_gate", "passed")], IDLE),
            judge.judge("m", "#44483", {TEST: "#44483"}, [_case("test_gate", "failed", "#44483")],
                        ACTIVE)]
    rows = judge.table(runs).splitlines()
    assert len(rows) == 4 and "`m`" in rows[2] and "killed" in rows[2] and "control" in rows[3]
