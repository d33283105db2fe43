"""Decides from a JUnit XML report and the server logs whether the suite killed a mutant.

Verdicts come from oracle ids, never from failure text (which echoes the test's own source): each
failing oracle leaves `<property name="oracle" value="ID"/>` on its test case (tests/sleep_wake/lib/
oracle.py). Per class, against the catalogue's expected ids:
  * killed: a case failed with one of the expected oracle ids;
  * other oracle: cases failed with oracle ids, none of them expected (reported with the ids);
  * errored: cases failed without any oracle id (a refused connection, a timeout of a wait, a crash, a
    fixture's precondition): proof of nothing, never a kill;
  * survived: no case failed.
The server logs must also show that vLLM applied the mutant, else a pass would be a survival of a bug
that was never there and a failure a kill by something else.
"""

from __future__ import annotations

import dataclasses
import os
import re

from tools.results.testlogs import Case, parse_junit  # noqa: F401  (the harness's readers take them from here)

KILLED, SURVIVED, OTHER, ERRORED = "killed", "survived", "other oracle", "errored"
PASSED = "passed"  # the control's verdict for a class whose tests all passed
OUTCOMES = (KILLED, OTHER, ERRORED, SURVIVED)
MESSAGE_CHARS = 300  # of each failure message in reports and mutation_row.json
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

    @property
    def fired(self) -> list[str]:
        """The expected oracle ids that failed in some case."""
        seen = {o for ids in self.oracles for o in ids}
        return [o for o in self.expected if o in seen]

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "failed_tests": self.failed_tests, "messages": self.messages,
                "oracles": self.oracles, "expected": self.expected, "fired": self.fired}


@dataclasses.dataclass
class Decision:
    mutant: str  # "none" for the control
    classes: dict[str, ClassResult]
    problems: list[str]  # reasons the run proves nothing, whatever the class verdicts say
    activated: bool

    @property
    def passed(self) -> bool:
        wanted = PASSED if self.mutant == "none" else KILLED
        return not self.problems and bool(self.classes) and all(
            r.verdict == wanted for r in self.classes.values())

    def report(self) -> str:
        if self.mutant == "none":
            head = "control (no mutant): " + ("every class passed" if self.passed else "FAILED")
        else:
            head = f"mutant {self.mutant}: " + ("killed by every listed class" if self.passed
                                                else "NOT killed as the catalogue expects")
        lines = [head]
        for name, r in self.classes.items():
            what = {KILLED: f"killed by {', '.join(r.fired)}", SURVIVED: "survived (no test failed)",
                    OTHER: f"failed by other oracles than {', '.join(r.expected) or 'none (control)'}",
                    ERRORED: "errored: tests failed without an oracle (proves nothing)",
                    PASSED: "passed"}[r.verdict]
            lines.append(f"  {name}: {what}; {r.passed} passed, {len(r.failed_tests)} failed")
            for test, ids, message in zip(r.failed_tests, r.oracles, r.messages):
                lines.append(f"    FAILED {test} [{', '.join(ids) or 'no oracle'}]: {message}")
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


def class_verdict(failed: list[Case], expected) -> str:
    """killed / other oracle / errored / survived for a class whose failed cases are `failed`, against the
    expected oracle ids (None: the control, whose every failure is one of the last three)."""
    if not failed:
        return PASSED if expected is None else SURVIVED
    if expected is not None and any(o in expected for c in failed for o in c.oracles):
        return KILLED
    return OTHER if any(c.oracles for c in failed) else ERRORED


def judge_classes(cases: list[Case], classes: list[str], class_files: dict[str, str],
                  kills: dict[str, tuple] | None) -> dict[str, ClassResult]:
    """Per class, its verdict against kills (class -> the oracle ids that must fire), or for the
    control (kills=None) passed / other oracle / errored. A class with no testcase at all ran nothing:
    that is a broken run (errored), never a survival or a pass."""
    by_class = {c: [] for c in classes}
    for case in cases:
        short = class_of(case, class_files)
        if short in by_class:
            by_class[short].append(case)
    out = {}
    for short, mine in by_class.items():
        expected = None if kills is None else tuple(kills[short])
        if not mine:
            out[short] = ClassResult(ERRORED, [class_files.get(short, short)],
                                     ["no testcase of this class in the JUnit report: it did not run"], 0,
                                     [[]], list(expected or ()))
            continue
        failed = [c for c in mine if c.outcome == "failed"]
        out[short] = ClassResult(class_verdict(failed, expected), [c.test_id for c in failed],
                                 [c.message[:MESSAGE_CHARS] for c in failed],
                                 sum(c.outcome == "passed" for c in mine), [list(c.oracles) for c in failed],
                                 list(expected or ()))
    return out


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
    found = [[] for _ in patterns]
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


def check_classes_agree(mutant: str, build_classes: list[str], kills: dict[str, str]) -> None:
    """BUILD.bazel and the plugin's catalogue must name the same killing classes for a mutant."""
    if set(build_classes) != set(kills):
        raise ValueError(
            f"mutant {mutant}: tests/mutants/BUILD.bazel lists classes {sorted(build_classes)} but the "
            f"catalogue (sleepwake_mutants.MUTANTS[{mutant!r}].kills) expects {sorted(kills)}. Make the "
            "mutants dict in BUILD.bazel and the catalogue agree.")


def decide(mutant: str, cases: list[Case], classes: list[str], class_files: dict[str, str],
           kills: dict[str, str] | None, log_root: str, activation: str, no_mutant: str) -> Decision:
    """The verdict of one mutant target (mutant "none", kills None: the control).

    activation / no_mutant are the plugin's ACTIVATION and NO_MUTANT line templates."""
    control = mutant == "none"
    mine = marker_regex(activation, name=None if control else mutant)
    any_active, idle = log_lines(log_root, marker_regex(activation, name=None), marker_regex(no_mutant))
    problems = []
    if control:
        if not idle:
            problems.append(
                "no vLLM process printed the plugin's no-mutant line: the plugin was not loaded, so the "
                "control does not show that loading it leaves vLLM intact. Check that the servers got the "
                "site dir on PYTHONPATH (server log header) and that VLLM_PLUGINS, if set, names it.")
        if any_active:
            problems.append("the control run applied a mutant: " + "; ".join(any_active[:3]))
        return Decision(mutant, judge_classes(cases, classes, class_files, None), problems, False)
    activated = bool(log_lines(log_root, mine)[0])
    if not activated:
        problems.append(
            f"no vLLM process printed the activation line of {mutant} "
            f"({activation.format(name=mutant, pid='<pid>')!r}) in the logs under "
            f"{log_root}: the mutant was never applied, so its survival or kill proves nothing. Check the "
            "server log header for PYTHONPATH (site dir first) and SLEEPWAKE_MUTANT, and that the name is "
            "in the catalogue.")
    if idle:
        problems.append("some vLLM processes loaded the plugin without applying the mutant: "
                        + "; ".join(idle[:3]))
    others = [line for line in any_active if not mine.search(line)]
    if others:
        problems.append("another mutant was applied: " + "; ".join(others[:3]))
    return Decision(mutant, judge_classes(cases, classes, class_files, kills), problems, activated)


def row(decision: Decision, issue: str, cell: str, bound=(), size: str = "") -> dict:
    """mutation_row.json: what tools/results/mutation_table.py tabulates. bound and size: the catalogue's (the
    thresholds the mutant is sized against and how big it is)."""
    return {"mutant": decision.mutant, "issue": issue, "cell": cell, "passed": decision.passed,
            "activated": decision.activated, "problems": decision.problems, "bound": list(bound),
            "size": size, "classes": {c: r.to_json() for c, r in decision.classes.items()}}
