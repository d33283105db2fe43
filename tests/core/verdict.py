"""Decides from a JUnit XML report and the server logs whether the suite killed a mutant.

Verdicts come from oracle ids, never from failure text (which echoes the test's own source): each
failing oracle leaves `<property name="oracle" value="ID"/>` on its test case (tests/core/
oracle.py). A kill is an expected oracle firing on a live, answering server: a case marked `errored`
(tests/core/liveness.py: no answer, a dead engine, a broken connection, or an oracle that
fired on a server not live by then) counts no oracle id, and the liveness oracles (LIVENESS: what a
hang, an error answer, an overloaded host and a crash all fail) count only for a catalogue entry whose
defect is one (its `fails_as`), and then only if the class's control, run under the same concurrency,
did not fire them: tools/results/mutation_table.py checks that across targets (needs_control).
Per class, against the catalogue's expected ids:
  * killed: a case failed with one of the expected oracle ids, as above;
  * other oracle: cases failed with oracle ids on a live server, none of them expected;
  * errored: cases failed without any such id (a refused connection, no answer, a dead engine, a wait's
    timeout, a crash, a fixture's precondition, a bug in the test): proof of nothing, never a kill;
  * survived: no case failed, and the run was not cut short (cut_short(): then errored);
  * not applied: the server logs do not show the mutant applied and its patched code reached (the
    plugin's ACTIVATION and REACHED lines): a pass would be a survival of a bug that was never there
    and a failure a kill by something else.
A mutant of an in-process door's own code (the catalogue's `door`) is also run through another door, vLLM's
server (its HTTP twin, decide_off_door): there it must be applied, never reached, and every class pass, as a
control's, which shows that the defect is the door's own and that loading it leaves the other door intact.
"""

from __future__ import annotations

import dataclasses
import os
import re

from sleepwake_mutants import ERROR_ANSWER, HANG

from tools.results.testlogs import Case, parse_junit  # noqa: F401  (mutant_test.py and the engine judge take them from here)

KILLED, SURVIVED, OTHER, ERRORED, NOT_APPLIED = "killed", "survived", "other oracle", "errored", "not applied"
PASSED = "passed"  # the control's verdict for a class whose tests all passed
OUTCOMES = (KILLED, OTHER, ERRORED, SURVIVED, NOT_APPLIED)
# The liveness oracles, and the kind of defect each one may show: all of them also fire for an
# overloaded host or a crash of anything, so they kill only a mutant marked so (Mutant.fails_as).
LIVENESS = {"api.answers": HANG, "api.status": ERROR_ANSWER, "server.healthy": ERROR_ANSWER}
MESSAGE_CHARS = 300  # of each failure message in reports and mutation_row.json
INTERRUPTED = "the run was interrupted before this class finished"
PYTEST_LOG = "pytest.log"  # the inner pytest's own output, beside the server logs; not a server log
_PID = "SLEEPWAKEPID"  # placeholder for {pid}: letters only, so re.escape leaves it alone


@dataclasses.dataclass
class ClassResult:
    verdict: str
    failed_tests: list[str] = dataclasses.field(default_factory=list)
    messages: list[str] = dataclasses.field(default_factory=list)
    passed: int = 0  # testcases of the class that passed
    oracles: list[list[str]] = dataclasses.field(default_factory=list)  # per failed test, its oracle ids
    expected: list[str] = dataclasses.field(default_factory=list)  # the catalogue's ids for the class
    liveness: list[list[str]] = dataclasses.field(default_factory=list)  # per failed test, liveness ids seen
    errored: list[list[str]] = dataclasses.field(default_factory=list)  # per failed test, why it proves nothing
    # A kill that rests on these liveness ids alone: it stands only if the class's control, under the
    # same concurrency, did not fire them (tools/results/mutation_table.py).
    needs_control: list[str] = dataclasses.field(default_factory=list)
    # Errored because the inner run was cut short before the class finished (cut_short()).
    interrupted: bool = False

    @property
    def fired(self) -> list[str]:
        """The expected oracle ids that failed in some case."""
        seen = {o for ids in self.oracles + self.liveness for o in ids}
        return [o for o in self.expected if o in seen]

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "failed_tests": self.failed_tests,
            "messages": self.messages,
            "oracles": self.oracles,
            "expected": self.expected,
            "fired": self.fired,
            "liveness": self.liveness,
            "errored": self.errored,
            "needs_control": self.needs_control,
            "interrupted": self.interrupted,
        }


@dataclasses.dataclass
class Decision:
    mutant: str  # "none" for the control
    classes: dict[str, ClassResult]
    problems: list[str]  # reasons the run proves nothing, whatever the class verdicts say
    activated: bool
    reached: bool = False  # a patched function of the mutant was called
    # The mutant's own door (the catalogue's), when this run went through another (decide_off_door): then
    # every class must pass, as a control's.
    off_door: str = ""

    @property
    def passed(self) -> bool:
        wanted = PASSED if self.mutant == "none" or self.off_door else KILLED
        return not self.problems and bool(self.classes) and all(r.verdict == wanted for r in self.classes.values())

    def report(self) -> str:
        if self.mutant == "none":
            head = "control (no mutant): " + ("every class passed" if self.passed else "FAILED")
        elif self.off_door:
            head = f"mutant {self.mutant} of the {self.off_door} door, through another door: " + (
                "applied, never reached, every class passed" if self.passed else "FAILED"
            )
        else:
            head = f"mutant {self.mutant}: " + (
                "killed by every listed class" if self.passed else "NOT killed as the catalogue expects"
            )
        lines = [head]
        for name, r in self.classes.items():
            what = {
                KILLED: f"killed by {', '.join(r.fired)}",
                SURVIVED: "survived (no test failed)",
                OTHER: f"failed by other oracles than {', '.join(r.expected) or 'none (control)'}",
                ERRORED: "errored: tests failed without an oracle on a live server (proves nothing)",
                NOT_APPLIED: "not applied (see the problems below)",
                PASSED: "passed",
            }[r.verdict]
            if r.interrupted:
                what = f"errored: {INTERRUPTED} (a survival or a pass needs the whole class run)"
            if r.needs_control:
                what = (
                    f"killed by the liveness oracles {', '.join(r.needs_control)} alone: a kill only if "
                    "the class's control ran under the same concurrency without firing them "
                    "(tools/results/mutation_table.py checks)"
                )
            lines.append(f"  {name}: {what}; {r.passed} passed, {len(r.failed_tests)} failed")
            for i, (test, ids, message) in enumerate(zip(r.failed_tests, r.oracles, r.messages)):
                marks = [f"errored: {', '.join(r.errored[i])}"] if i < len(r.errored) and r.errored[i] else []
                marks += [f"liveness: {', '.join(r.liveness[i])}"] if i < len(r.liveness) and r.liveness[i] else []
                lines.append(f"    FAILED {test} [{', '.join(list(ids) + marks) or 'no oracle'}]: {message}")
        lines += ["  PROBLEM: " + p for p in self.problems]
        return "\n".join(lines)


def class_of(case: Case, class_files: dict[str, str]) -> str | None:
    """The class short name whose file the testcase comes from, by the module in its classname.

    A collection error has an empty classname and the module path as its name; it counts too.
    """
    parts = case.classname.split(".") if case.classname else case.name.split(".")
    for short, path in class_files.items():
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem in parts:
            return short
    return None


def sound_ids(case: Case) -> list[str]:
    """The oracle ids of a case that fired on a live, answering server: none for a case marked errored
    (the server was not live when it failed), and never a liveness oracle's."""
    return [] if case.errored else [o for o in case.oracles if o not in LIVENESS]


def liveness_ids(case: Case) -> list[str]:
    """The liveness oracles a case fired or ran into (as an oracle, or as what an errored case met)."""
    return [o for o in dict.fromkeys(case.oracles + case.liveness) if o in LIVENESS]


def class_verdict(failed: list[Case], expected, fails_as=()) -> tuple[str, list[str]]:
    """(killed / other oracle / errored / survived, the liveness ids a kill rests on alone) for a class
    whose failed cases are `failed`, against the expected oracle ids (None: the control, whose every
    failure is one of the last three) and what the defect is (Mutant.fails_as)."""
    if not failed:
        return (PASSED if expected is None else SURVIVED), []
    if expected is not None:
        if any(o in expected for c in failed for o in sound_ids(c)):
            return KILLED, []
        counted = sorted({o for c in failed for o in liveness_ids(c) if o in expected and LIVENESS[o] in fails_as})
        if counted:
            return KILLED, counted
    return (OTHER if any(sound_ids(c) for c in failed) else ERRORED), []


def judge_classes(
    cases: list[Case], classes: list[str], class_files: dict[str, str], kills: dict[str, tuple] | None, fails_as=()
) -> dict[str, ClassResult]:
    """Per class, its verdict against kills (class -> the oracle ids that must fire) and what the defect
    is (fails_as), or for the control (kills=None) passed / other oracle / errored. A class with no
    testcase at all ran nothing: that is a broken run (errored), never a survival or a pass."""
    by_class: dict[str, list[Case]] = {c: [] for c in classes}
    for case in cases:
        short = class_of(case, class_files)
        if short in by_class:
            by_class[short].append(case)
    out = {}
    for short, mine in by_class.items():
        expected = None if kills is None else tuple(kills[short])
        if not mine:
            out[short] = ClassResult(
                ERRORED,
                [class_files.get(short, short)],
                ["no testcase of this class in the JUnit report: it did not run"],
                0,
                [[]],
                list(expected or ()),
            )
            continue
        failed = [c for c in mine if c.outcome == "failed"]
        verdict, needs_control = class_verdict(failed, expected, fails_as)
        out[short] = ClassResult(
            verdict,
            [c.test_id for c in failed],
            [c.message[:MESSAGE_CHARS] for c in failed],
            sum(c.outcome == "passed" for c in mine),
            [list(c.oracles) for c in failed],
            list(expected or ()),
            [liveness_ids(c) for c in failed],
            [list(c.errored) for c in failed],
            needs_control,
        )
    return out


def cut_short(decision: Decision, why: str) -> None:
    """Marks a run cut short (the inner pytest's timeout) with the problem `why`. A class that would have
    survived or passed is errored: no test failed in the part that ran, which says nothing of the rest. A
    kill or another oracle seen before the cut was seen all the same, and keeps its verdict."""
    decision.problems.append(why)
    for result in decision.classes.values():
        if result.verdict in (SURVIVED, PASSED):
            result.verdict, result.interrupted = ERRORED, True


def marker_regex(template: str, **fields) -> re.Pattern:
    """A regex for a line printed from template ("... {name} (pid {pid})"); pid matches any number.

    A field passed as None matches any text."""
    placeholders = {k: f"SLEEPWAKEFIELD{k.upper()}" for k, v in fields.items() if v is None}
    text = re.escape(template.format(pid=_PID, **{k: placeholders.get(k, v) for k, v in fields.items()}))
    text = text.replace(_PID, r"\d+")
    for placeholder in placeholders.values():
        text = text.replace(placeholder, r"\S+")
    return re.compile(text)


def log_lines(root: str, *patterns: re.Pattern) -> list[list[str]]:
    """For each pattern, the server log lines under root (recursively) it matches, as FILE: LINE."""
    found: list[list[str]] = [[] for _ in patterns]
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(directory, name)
            if name == PYTEST_LOG or name.endswith((".zip", ".xml", ".json", ".jsonl")):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    for i, pattern in enumerate(patterns):
                        if pattern.search(line):
                            found[i].append(f"{os.path.relpath(path, root)}: {line.strip()}")
    return found


def check_classes_agree(mutant: str, build_classes: list[str], kills: dict[str, tuple]) -> None:
    """BUILD.bazel and the plugin's catalogue must name the same killing classes for a mutant."""
    if set(build_classes) != set(kills):
        raise ValueError(
            f"mutant {mutant}: tests/mutants/BUILD.bazel lists classes {sorted(build_classes)} but the "
            f"catalogue (sleepwake_mutants.MUTANTS[{mutant!r}].kills) expects {sorted(kills)}. Make the "
            "mutants dict in BUILD.bazel and the catalogue agree."
        )


def decide(
    mutant: str,
    cases: list[Case],
    classes: list[str],
    class_files: dict[str, str],
    kills: dict[str, tuple] | None,
    log_root: str,
    activation: str,
    no_mutant: str,
    reached: str,
    fails_as=(),
) -> Decision:
    """The verdict of one mutant target (mutant "none", kills None: the control).

    activation / no_mutant / reached are the plugin's ACTIVATION, NO_MUTANT and REACHED line templates;
    fails_as the catalogue entry's."""
    control = mutant == "none"
    mine = marker_regex(activation, name=None if control else mutant)
    any_active, idle = log_lines(log_root, marker_regex(activation, name=None), marker_regex(no_mutant))
    problems = []
    if control:
        if not idle:
            problems.append(
                "no vLLM process printed the plugin's no-mutant line: the plugin was not loaded, so the "
                "control does not show that loading it leaves vLLM intact. Check that the servers got the "
                "site dir on PYTHONPATH (server log header) and that VLLM_PLUGINS, if set, names it."
            )
        if any_active:
            problems.append("the control run applied a mutant: " + "; ".join(any_active[:3]))
        return Decision(mutant, judge_classes(cases, classes, class_files, None), problems, False)
    activated, was_reached = (bool(found) for found in log_lines(log_root, mine, marker_regex(reached, name=mutant)))
    if not activated:
        problems.append(
            f"no vLLM process printed the activation line of {mutant} "
            f"({activation.format(name=mutant, pid='<pid>')!r}) in the logs under "
            f"{log_root}: the mutant was never applied, so its survival or kill proves nothing. Check the "
            "server log header for PYTHONPATH (site dir first) and SLEEPWAKE_MUTANT, and that the name is "
            "in the catalogue."
        )
    elif not was_reached:
        problems.append(
            f"no vLLM process printed the reached line of {mutant} ({reached.format(name=mutant, pid='<pid>')!r}):"
            " applied, but no test called a function it patches, so it is not applied for these classes. "
            "Check that the classes send the call the mutant patches, or that the catalogue names the right ones."
        )
    if idle:
        problems.append("some vLLM processes loaded the plugin without applying the mutant: " + "; ".join(idle[:3]))
    others = [line for line in any_active if not mine.search(line)]
    if others:
        problems.append("another mutant was applied: " + "; ".join(others[:3]))
    judged = judge_classes(cases, classes, class_files, kills, fails_as)
    if not (activated and was_reached):
        for result in judged.values():
            result.verdict, result.needs_control = NOT_APPLIED, []
    return Decision(mutant, judged, problems, activated, was_reached)


def decide_off_door(
    mutant: str,
    cases: list[Case],
    classes: list[str],
    class_files: dict[str, str],
    log_root: str,
    activation: str,
    no_mutant: str,
    reached: str,
    door: str,
) -> Decision:
    """The verdict of a door mutant's run through another door than its own (`door`, the catalogue's): its
    HTTP twin. It passes only if the servers applied the mutant, no process ran a function it patches (the
    other door never runs that code) and every class passed, as a control's; a reached patch says the code is
    not the door's own, whatever the classes did."""
    mine = marker_regex(activation, name=mutant)
    any_active, idle, activated, was_reached = log_lines(
        log_root, marker_regex(activation, name=None), marker_regex(no_mutant), mine, marker_regex(reached, name=mutant)
    )
    problems = []
    if not activated:
        problems.append(
            f"no vLLM process printed the activation line of {mutant} "
            f"({activation.format(name=mutant, pid='<pid>')!r}) in the logs under {log_root}: the mutant was "
            "never applied, so a pass does not show that this door is untouched by it. Check the server log "
            "header for PYTHONPATH (site dir first) and SLEEPWAKE_MUTANT."
        )
    if was_reached:
        problems.append(
            f"a process of this door ran code the {door} door's mutant {mutant} patches: "
            + "; ".join(was_reached[:3])
            + f". The code is not the {door} door's own; the catalogue's door for it is wrong."
        )
    if idle:
        problems.append("some vLLM processes loaded the plugin without applying the mutant: " + "; ".join(idle[:3]))
    others = [line for line in any_active if not mine.search(line)]
    if others:
        problems.append("another mutant was applied: " + "; ".join(others[:3]))
    judged = judge_classes(cases, classes, class_files, None)
    return Decision(mutant, judged, problems, bool(activated), bool(was_reached), off_door=door)


def concurrency(environ=None) -> dict:
    """How many cells shared the GPU: a liveness kill stands only against a control run alike."""
    env = os.environ if environ is None else environ
    return {"slots_per_gpu": env.get("SLEEPWAKE_SLOTS_PER_GPU") or "1"}


def row(decision: Decision, issue: str, cell: str, bound=(), size: str = "", ran_under: dict | None = None) -> dict:
    """mutation_row.json: what tools/results/mutation_table.py tabulates. bound and size: the catalogue's (the
    thresholds the mutant is sized against and how big it is); ran_under: concurrency()."""
    out = {
        "mutant": decision.mutant,
        "issue": issue,
        "cell": cell,
        "passed": decision.passed,
        "activated": decision.activated,
        "reached": decision.reached,
        "problems": decision.problems,
        "bound": list(bound),
        "size": size,
        "concurrency": ran_under or {},
        "classes": {c: r.to_json() for c, r in decision.classes.items()},
    }
    if decision.off_door:  # a door mutant's twin: its classes passed through another door (decide_off_door)
        out["off_door"] = decision.off_door
    return out
