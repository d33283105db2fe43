"""The verdict on hand-written JUnit reports and server logs: killed by an expected oracle id, another
oracle, errored (no oracle: a refused connection, a wait's timeout, a precondition; an oracle on a server
not live; a liveness oracle of a defect that is no hang or error answer), survived, not applied, the
control, and runs that prove nothing (plugin never loaded)."""

import json
from xml.sax.saxutils import escape, quoteattr

import pytest
import sleepwake_mutants

from tests.core import verdict

FILES = {
    "scheduler_gate": "tests/sleep_wake/test_scheduler_gate.py",
    "flags": "tests/sleep_wake/test_sleep_wake_flags.py",
}
KILLS = {"scheduler_gate": ("requests.held_until_resident",), "flags": ("flags.gauge",)}
GATE = "tests.sleep_wake.test_scheduler_gate.TestSchedulerGate"
FLAGS = "tests.sleep_wake.test_sleep_wake_flags.TestSleepWakeFlags"


def passed(classname, name):
    return classname, name, None, "", "", (), ()


def failed(classname, name, message, text="", tag="failure", oracles=(), marks=()):
    """marks: (name, value) JUnit properties of tests/core/liveness.py (errored, liveness)."""
    return classname, name, tag, message, text, tuple(oracles), tuple(marks)


def junit(tmp_path, *cases):
    body = []
    for classname, name, tag, message, text, oracles, marks in cases:
        inner = f"<{tag} message={quoteattr(message)}>{escape(text)}</{tag}>" if tag else ""
        props = "".join(
            f"<property name='oracle' value={quoteattr(o)}/><property name='oracle_bound' value='== x'/>"
            for o in oracles
        )
        props += "".join(f"<property name={quoteattr(n)} value={quoteattr(v)}/>" for n, v in marks)
        body.append(
            f"<testcase classname={quoteattr(classname)} name={quoteattr(name)} time='1'>"
            + (f"<properties>{props}</properties>" if props else "")
            + f"{inner}</testcase>"
        )
    path = tmp_path / "junit.xml"
    path.write_text(
        "<?xml version='1.0' encoding='utf-8'?><testsuites><testsuite name='pytest'>"
        + "".join(body)
        + "</testsuite></testsuites>"
    )
    return verdict.parse_junit(str(path))


def logs(tmp_path, *lines):
    """A server log under <outputs>/<test class>/, as the suite's fixtures write it."""
    root = tmp_path / "inner"
    (root / "TestSchedulerGate").mkdir(parents=True, exist_ok=True)
    (root / "TestSchedulerGate" / "vllm-mrv2-eager-1.log").write_text(
        "# sleepwake launcher\nINFO 01-01 api_server.py:1] vLLM API server version 0.26.0\n"
        + "".join(line + "\n" for line in lines)
    )
    return str(root)


def active(name, pid=4242):
    return "(EngineCore pid=4242) " + sleepwake_mutants.ACTIVATION.format(name=name, pid=pid)


def reached(name, pid=4242):
    return "(EngineCore pid=4242) " + sleepwake_mutants.REACHED.format(name=name, pid=pid)


IDLE = sleepwake_mutants.NO_MUTANT.format(pid=77)


def decide(
    tmp_path,
    cases,
    mutant="resume_on_partial_wake",
    classes=("scheduler_gate",),
    log_lines=None,
    kills=None,
    fails_as=(),
):
    if log_lines is None:
        log_lines = [active(mutant), reached(mutant)] if mutant != "none" else [IDLE]
    if kills is None and mutant != "none":
        kills = {c: KILLS[c] for c in classes}
    return verdict.decide(
        mutant,
        cases,
        list(classes),
        FILES,
        kills,
        logs(tmp_path, *log_lines),
        sleepwake_mutants.ACTIVATION,
        sleepwake_mutants.NO_MUTANT,
        sleepwake_mutants.REACHED,
        fails_as,
    )


HELD = "requests.held_until_resident"


def test_killed_by_an_expected_oracle(tmp_path):
    cases = junit(
        tmp_path,
        passed(GATE, "test_a[MRV2-eager]"),
        failed(GATE, "test_b[MRV2-eager]", "OracleFailure: request ran", oracles=[HELD]),
    )
    d = decide(tmp_path, cases)
    assert d.passed and d.activated, d.report()
    r = d.classes["scheduler_gate"]
    assert (r.verdict, r.failed_tests, r.passed, r.fired) == ("killed", [f"{GATE}::test_b[MRV2-eager]"], 1, [HELD])
    assert f"killed by {HELD}" in d.report()


def test_a_foreign_exception_is_errored_whatever_its_text_says(tmp_path):
    # The failure text echoes the test's own source and name, which hold the expected id: text proves
    # nothing, only the oracle property does.
    name = f"test_{HELD.replace('.', '_')}[MRV2-eager]"
    message = f"requests.exceptions.ConnectionError: Connection refused ({HELD}, #44483) " + "x" * 500
    cases = junit(tmp_path, failed(GATE, name, message, f"expect.held({HELD!r}, ...)\nConnectionError"))
    d = decide(tmp_path, cases)
    r = d.classes["scheduler_gate"]
    assert not d.passed and r.verdict == "errored" and r.oracles == [[]]
    assert r.messages == [message[:300]]
    assert "errored: tests failed without an oracle" in d.report() and "[no oracle]" in d.report()


def test_another_oracle_is_not_a_kill(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", f"[oracle flags.gauge] {HELD}", oracles=["flags.gauge"]))
    d = decide(tmp_path, cases)
    r = d.classes["scheduler_gate"]
    assert not d.passed and r.verdict == "other oracle" and r.oracles == [["flags.gauge"]] and r.fired == []
    assert "failed by other oracles than requests.held_until_resident" in d.report()


def test_any_case_with_an_expected_oracle_kills_the_class(tmp_path):
    # One case errored, another fired another oracle, a third the expected one: the kill stands. And
    # several oracles of one case (oracle.together) all count.
    cases = junit(
        tmp_path,
        failed(GATE, "test_a[MRV2-eager]", "refused"),
        failed(GATE, "test_b[MRV2-eager]", "gauge", oracles=["flags.gauge"]),
        failed(GATE, "test_c[MRV2-eager]", "two", oracles=["api.status", HELD]),
    )
    r = decide(tmp_path, cases).classes["scheduler_gate"]
    assert r.verdict == "killed" and r.fired == [HELD]


def test_an_oracle_failing_in_setup_counts_like_any(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "failed on setup", tag="error", oracles=[HELD]))
    assert decide(tmp_path, cases).classes["scheduler_gate"].verdict == "killed"


def test_survived_when_every_test_passes(tmp_path):
    cases = junit(tmp_path, passed(GATE, "test_a[MRV2-eager]"), passed(GATE, "test_b[MRV2-eager]"))
    d = decide(tmp_path, cases)
    assert not d.passed
    assert d.classes["scheduler_gate"].verdict == "survived"
    assert "scheduler_gate: survived" in d.report()


def test_every_listed_class_must_kill(tmp_path):
    cases = junit(
        tmp_path, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD]), passed(FLAGS, "test_level1[MRV2-eager]")
    )
    d = decide(tmp_path, cases, classes=("scheduler_gate", "flags"))
    assert not d.passed
    assert {c: r.verdict for c, r in d.classes.items()} == {"scheduler_gate": "killed", "flags": "survived"}


def test_a_class_that_ran_nothing_is_a_broken_run(tmp_path):
    d = decide(
        tmp_path,
        junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD])),
        classes=("scheduler_gate", "flags"),
    )
    assert d.classes["flags"].verdict == "errored" and not d.passed
    assert "did not run" in d.classes["flags"].messages[0]


def test_a_collection_error_counts_for_its_class(tmp_path):
    cases = junit(
        tmp_path,
        failed(
            "",
            "tests.sleep_wake.test_scheduler_gate",
            "collection failure",
            "ImportError: cannot import name",
            tag="error",
        ),
    )
    r = decide(tmp_path, cases).classes["scheduler_gate"]
    assert r.verdict == "errored" and r.failed_tests == ["tests.sleep_wake.test_scheduler_gate"]


def test_no_activation_line_means_not_applied(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD]))
    for lines in ([], [active("leak_per_wake")], [IDLE]):
        d = decide(tmp_path, cases, log_lines=lines)
        assert d.classes["scheduler_gate"].verdict == "not applied"
        assert not d.passed and not d.activated, lines
        assert "never applied" in d.report()


@pytest.mark.parametrize(
    "cases_of",
    [
        lambda t: junit(t, passed(GATE, "test_a[MRV2-eager]")),
        lambda t: junit(t, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD])),
    ],
    ids=["passed", "failed"],
)
def test_a_mutant_applied_but_never_reached_is_not_applied(tmp_path, cases_of):
    """Neither survived (its defect never ran) nor killed (whatever failed, it was not the defect)."""
    d = decide(tmp_path, cases_of(tmp_path), log_lines=[active("resume_on_partial_wake"), reached("leak_per_wake")])
    assert d.activated and not d.reached and not d.passed
    assert d.classes["scheduler_gate"].verdict == "not applied"
    assert "no test called a function it patches" in d.report()
    assert verdict.row(d, "", "MRV2-eager")["reached"] is False


def test_a_server_without_the_mutant_spoils_the_run(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD]))
    d = decide(tmp_path, cases, log_lines=[active("resume_on_partial_wake"), reached("resume_on_partial_wake"), IDLE])
    assert d.activated and not d.passed
    assert "without applying the mutant" in d.report()


def test_control_passes_when_everything_passes_with_the_plugin_loaded(tmp_path):
    cases = junit(tmp_path, passed(GATE, "test_a[MRV2-eager]"), passed(FLAGS, "test_level1[MRV2-eager]"))
    d = decide(tmp_path, cases, mutant="none", classes=("scheduler_gate", "flags"))
    assert d.passed, d.report()
    assert {r.verdict for r in d.classes.values()} == {"passed"}


def test_control_fails_on_any_failure(tmp_path):
    cases = junit(
        tmp_path,
        passed(GATE, "test_a[MRV2-eager]"),
        failed(FLAGS, "test_level1[MRV2-eager]", "OracleFailure: gauge", oracles=["flags.gauge"]),
        failed(GATE, "test_b[MRV2-eager]", "ConnectionError"),
    )
    d = decide(tmp_path, cases, mutant="none", classes=("scheduler_gate", "flags"))
    assert not d.passed and d.classes["flags"].verdict == "other oracle"
    assert d.classes["scheduler_gate"].verdict == "errored"
    assert "control (no mutant): FAILED" in d.report()


@pytest.mark.parametrize(
    "lines,problem", [([], "plugin was not loaded"), ([IDLE, active("slow_wake")], "control run applied a mutant")]
)
def test_control_needs_the_plugin_loaded_and_idle(tmp_path, lines, problem):
    cases = junit(tmp_path, passed(GATE, "test_a[MRV2-eager]"))
    d = decide(tmp_path, cases, mutant="none", log_lines=lines)
    assert not d.passed and problem in d.report()


def test_build_and_catalogue_must_agree():
    verdict.check_classes_agree("m", ["flags", "latency"], {"latency": ("x.y",), "flags": ("x.z",)})
    with pytest.raises(ValueError, match=r"BUILD.bazel lists classes \['flags'\] .* expects \['latency'\]"):
        verdict.check_classes_agree("m", ["flags"], {"latency": ("x.y",)})


def test_row_is_json(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD]))
    row = verdict.row(
        decide(tmp_path, cases),
        "#44483",
        "MRV2-eager",
        ("wake_s_max",),
        "0.45 s a wake",
        verdict.concurrency({"SLEEPWAKE_SLOTS_PER_GPU": "8"}),
    )
    assert json.loads(json.dumps(row)) == {
        "mutant": "resume_on_partial_wake",
        "issue": "#44483",
        "cell": "MRV2-eager",
        "passed": True,
        "activated": True,
        "reached": True,
        "problems": [],
        "bound": ["wake_s_max"],
        "size": "0.45 s a wake",
        "concurrency": {"slots_per_gpu": "8"},
        "classes": {
            "scheduler_gate": {
                "verdict": "killed",
                "failed_tests": [f"{GATE}::test_b[MRV2-eager]"],
                "messages": ["held"],
                "oracles": [[HELD]],
                "expected": [HELD],
                "fired": [HELD],
                "liveness": [[]],
                "errored": [[]],
                "needs_control": [],
                "interrupted": False,
            }
        },
    }


def test_only_server_logs_count_as_evidence(tmp_path):
    """The inner pytest's own output may quote a line (a failure message with a log tail)."""
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD]))
    root = logs(tmp_path)
    (tmp_path / "inner" / verdict.PYTEST_LOG).write_text(active("resume_on_partial_wake") + "\n")
    d = verdict.decide(
        "resume_on_partial_wake",
        cases,
        ["scheduler_gate"],
        FILES,
        KILLS,
        root,
        sleepwake_mutants.ACTIVATION,
        sleepwake_mutants.NO_MUTANT,
        sleepwake_mutants.REACHED,
    )
    assert not d.activated and not d.passed


# --- a kill is an expected oracle firing on a live, answering server ----------------------------------
NO_ANSWER = [("errored", "no answer"), ("liveness", "api.answers")]
DEAD = [("errored", "engine dead"), ("liveness", "server.healthy")]


def test_a_timeout_is_errored_not_a_kill_even_where_api_answers_is_expected(tmp_path):
    """A read timeout (tests/core/liveness.py NoAnswer) carries no oracle id: on a mutant whose defect is no
    hang it proves nothing, though its catalogue entry lists api.answers."""
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "NoAnswer: POST /sleep: no answer", marks=NO_ANSWER))
    d = decide(tmp_path, cases, kills={"scheduler_gate": (HELD, "api.answers")})
    r = d.classes["scheduler_gate"]
    assert (r.verdict, r.liveness, r.errored) == ("errored", [["api.answers"]], [["no answer"]]) and not d.passed
    assert "[errored: no answer, liveness: api.answers]" in d.report()


def test_an_expected_oracle_on_a_server_no_longer_live_is_errored(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD], marks=DEAD))
    r = decide(tmp_path, cases).classes["scheduler_gate"]
    assert r.verdict == "errored" and r.fired == [HELD]


def test_a_test_code_exception_is_errored(tmp_path):
    cases = junit(
        tmp_path, failed(GATE, "test_b[MRV2-eager]", "TypeError: result() got an unexpected keyword", tag="error")
    )
    assert decide(tmp_path, cases).classes["scheduler_gate"].verdict == "errored"


def test_api_status_on_a_mutant_that_is_no_error_answer_is_not_a_kill(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "HTTP 500", oracles=["api.status"]))
    for fails_as in ((), (sleepwake_mutants.HANG,)):
        r = decide(tmp_path, cases, kills={"scheduler_gate": (HELD, "api.status")}, fails_as=fails_as).classes[
            "scheduler_gate"
        ]
        assert (r.verdict, r.needs_control) == ("errored", []), fails_as


def test_a_liveness_oracle_kills_a_mutant_marked_so_pending_its_control(tmp_path):
    cases = junit(
        tmp_path,
        failed(GATE, "test_b[MRV2-eager]", "NoAnswer", marks=NO_ANSWER),
        failed(
            GATE, "test_c[MRV2-eager]", "EngineDead", marks=[("errored", "engine dead"), ("liveness", "api.status")]
        ),
    )
    d = decide(
        tmp_path,
        cases,
        kills={"scheduler_gate": ("api.answers", "api.status")},
        fails_as=(sleepwake_mutants.HANG, sleepwake_mutants.ERROR_ANSWER),
    )
    r = d.classes["scheduler_gate"]
    assert (r.verdict, r.needs_control, r.fired) == (
        "killed",
        ["api.answers", "api.status"],
        ["api.answers", "api.status"],
    )
    assert "alone: a kill only if the class's control ran under the same concurrency" in d.report()
    # A sound kill needs no control.
    cases = junit(
        tmp_path,
        failed(GATE, "test_b[MRV2-eager]", "NoAnswer", marks=NO_ANSWER),
        failed(GATE, "test_c[MRV2-eager]", "held", oracles=[HELD]),
    )
    r = decide(
        tmp_path, cases, kills={"scheduler_gate": (HELD, "api.answers")}, fails_as=(sleepwake_mutants.HANG,)
    ).classes["scheduler_gate"]
    assert (r.verdict, r.needs_control) == ("killed", [])


def test_a_control_that_timed_out_is_errored(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "NoAnswer", marks=NO_ANSWER))
    d = decide(tmp_path, cases, mutant="none")
    assert d.classes["scheduler_gate"].verdict == "errored" and not d.passed
    assert d.classes["scheduler_gate"].liveness == [["api.answers"]]


# --- a run cut short (the inner pytest's timeout): a survival or a pass needs the whole class run -------
TIMED_OUT = "the inner pytest ran past 3450 s and was interrupted"


def test_a_class_cut_short_without_a_failure_is_errored_not_survived(tmp_path):
    cases = junit(
        tmp_path,
        failed(GATE, "test_b[MRV2-eager]", "held", oracles=[HELD]),
        passed(FLAGS, "test_level1_flags[MRV2-eager]"),
    )
    d = decide(tmp_path, cases, classes=("scheduler_gate", "flags"))
    verdict.cut_short(d, TIMED_OUT)
    gate, flags = d.classes["scheduler_gate"], d.classes["flags"]
    assert (gate.verdict, gate.interrupted) == ("killed", False)  # seen before the cut: still a kill
    assert (flags.verdict, flags.interrupted) == ("errored", True) and not d.passed
    assert d.problems == [TIMED_OUT]
    assert f"flags: errored: {verdict.INTERRUPTED}" in d.report()
    assert verdict.row(d, "#1", "MRV2-eager")["classes"]["flags"]["interrupted"] is True


def test_a_control_cut_short_does_not_pass(tmp_path):
    d = decide(tmp_path, junit(tmp_path, passed(GATE, "test_b[MRV2-eager]")), mutant="none")
    assert d.passed
    verdict.cut_short(d, TIMED_OUT)
    assert d.classes["scheduler_gate"].verdict == "errored" and not d.passed


def test_a_cut_leaves_other_oracle_and_not_applied_as_they_are(tmp_path):
    cases = junit(tmp_path, failed(GATE, "test_b[MRV2-eager]", "flag", oracles=["flags.gauge"]))
    d = decide(tmp_path, cases)
    verdict.cut_short(d, TIMED_OUT)
    assert d.classes["scheduler_gate"].verdict == "other oracle"
    d = decide(tmp_path, junit(tmp_path, passed(GATE, "test_b[MRV2-eager]")), log_lines=[])
    verdict.cut_short(d, TIMED_OUT)
    assert d.classes["scheduler_gate"].verdict == "not applied"


DOOR_MUTANT = "llm_wake_up_drops_tags"


def decide_off_door(tmp_path, cases, log_lines, classes=("flags",)):
    return verdict.decide_off_door(
        DOOR_MUTANT,
        cases,
        list(classes),
        FILES,
        logs(tmp_path, *log_lines),
        sleepwake_mutants.ACTIVATION,
        sleepwake_mutants.NO_MUTANT,
        sleepwake_mutants.REACHED,
        "llm",
    )


def test_a_door_mutants_twin_passes_applied_unreached_and_green(tmp_path):
    cases = junit(tmp_path, passed(FLAGS, "test_level1_flags[MRV2-eager]"))
    d = decide_off_door(tmp_path, cases, [active(DOOR_MUTANT)])
    assert d.passed and d.activated and not d.reached, d.report()
    assert d.classes["flags"].verdict == "passed"
    assert "llm door, through another door: applied, never reached, every class passed" in d.report()
    row = verdict.row(d, "#34528", "MRV2-eager")
    assert row["off_door"] == "llm" and row["passed"] is True
    assert "off_door" not in verdict.row(decide(tmp_path, cases, mutant="none", classes=("flags",)), "", "MRV2-eager")


@pytest.mark.parametrize(
    "lines,cases_of,problem",
    [
        # Reached over HTTP: the code is not the door's own, whatever the classes did.
        (
            [active(DOOR_MUTANT), reached(DOOR_MUTANT)],
            lambda t: junit(t, passed(FLAGS, "test_level1_flags[MRV2-eager]")),
            "not the llm door's own",
        ),
        ([IDLE], lambda t: junit(t, passed(FLAGS, "test_level1_flags[MRV2-eager]")), "never applied"),
        (
            [active(DOOR_MUTANT), active("slow_wake")],
            lambda t: junit(t, passed(FLAGS, "test_level1_flags[MRV2-eager]")),
            "another mutant was applied",
        ),
        (
            [active(DOOR_MUTANT)],
            lambda t: junit(t, failed(FLAGS, "test_partial", "flag", oracles=["flags.is_sleeping"])),
            "",
        ),
    ],
    ids=["reached", "not_applied", "another_mutant", "a_class_failed"],
)
def test_a_door_mutants_twin_fails_unless_all_three_hold(tmp_path, lines, cases_of, problem):
    d = decide_off_door(tmp_path, cases_of(tmp_path), lines)
    assert not d.passed, d.report()
    assert problem in d.report() and "FAILED" in d.report()
