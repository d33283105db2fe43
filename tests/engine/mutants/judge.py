"""Judges one engine-tier run against the catalogue: did the mutant's tests fail for its reason?

A run is the engine tests under one mutant (or none, the control), as a JUnit report plus the run's
output. A mutant is killed only if the run shows it was applied and its patched code reached, and every
test the catalogue names failed, each failed case with one of that test's oracle ids (the JUnit
property; never the failure's text), by the GPU mutants' rules (tests/core/verdict.py: a liveness
oracle counts only for a defect marked so, a case without an oracle is errored). A control passes only
if every test passed and the run shows no mutant was applied. The JUnit parsing and the log-line
matching are the GPU mutants'.
"""

from __future__ import annotations

import dataclasses

import sleepwake_mutants
from tests.core import verdict

CONTROL = "none"


@dataclasses.dataclass
class Run:
    mutant: str
    issue: str
    verdicts: dict[str, str]  # catalogued test -> a verdict.OUTCOMES (control: {})
    other_failures: list[str]  # failed tests the catalogue does not name for this mutant
    passed: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        if self.problems:
            return False
        if self.mutant == CONTROL:
            return not self.other_failures and self.passed > 0
        return bool(self.verdicts) and all(v == verdict.KILLED for v in self.verdicts.values())


def _matches(case: verdict.Case, test: str) -> bool:
    """test is "tests/engine/test_x.py::test_y"; its JUnit cases are tests.engine.test_x / test_y[...]."""
    path, name = test.split("::")
    module = path[: -len(".py")].replace("/", ".")
    return case.classname == module and (case.name == name or case.name.startswith(name + "["))


def _kills(case: verdict.Case, expected: tuple, fails_as) -> bool:
    return any(o in expected for o in verdict.sound_ids(case)) or any(
        o in expected and verdict.LIVENESS[o] in fails_as for o in verdict.liveness_ids(case)
    )


def _verdict(mine: list[verdict.Case], expected: tuple, fails_as) -> str:
    failed = [c for c in mine if c.outcome == "failed"]
    if len(failed) < len(mine):
        return verdict.SURVIVED
    if all(_kills(c, expected, fails_as) for c in failed):
        return verdict.KILLED
    return verdict.OTHER if all(verdict.sound_ids(c) for c in failed) else verdict.ERRORED


def judge(mutant: str, issue: str, kills: dict[str, tuple], cases: list[verdict.Case], output: str, fails_as=()) -> Run:
    """kills: test -> oracle ids (empty for the control); output: everything the run printed;
    fails_as: the entry's (a hang, an error answer)."""
    problems = []
    if not cases:
        problems.append("the run wrote no test case to its JUnit report: it did not run")
    if mutant == CONTROL:
        if not verdict.marker_regex(sleepwake_mutants.NO_MUTANT).search(output):
            problems.append(
                "the run did not print the no-mutant line: tests/engine/conftest.py "
                "was not loaded, so the run is not the engine tier's"
            )
        if verdict.marker_regex(sleepwake_mutants.ACTIVATION, name=None).search(output):
            problems.append("the control run applied a mutant")
    elif not verdict.marker_regex(sleepwake_mutants.ACTIVATION, name=mutant).search(output):
        problems.append(
            f"the run did not print the activation line of {mutant}: it was never "
            "applied, so a pass or a failure proves nothing"
        )
    elif not verdict.marker_regex(sleepwake_mutants.REACHED, name=mutant).search(output):
        problems.append(
            f"the run did not print the reached line of {mutant}: no test called a function "
            "it patches, so it is not applied"
        )
    applied = mutant == CONTROL or not problems
    verdicts = {}
    for test, expected in kills.items():
        mine = [c for c in cases if _matches(c, test)]
        if not mine:
            verdicts[test] = verdict.OTHER
            problems.append(f"{test} is not in the run: renamed or deleted? Update tests/engine/mutants/catalogue.py")
        else:
            verdicts[test] = _verdict(mine, tuple(expected), fails_as) if applied else verdict.NOT_APPLIED
    named = [c for c in cases if any(_matches(c, t) for t in kills)]
    others = [c.test_id for c in cases if c.outcome == "failed" and c not in named]
    return Run(mutant, issue, verdicts, others, sum(c.outcome == "passed" for c in cases), problems)


def table(runs: list[Run]) -> str:
    """Markdown: one row per mutant (the control last) with each catalogued test's verdict."""
    lines = [
        "| mutant | vLLM issue imitated | tests that must kill it: verdict | other tests that failed | verdict |",
        "|---|---|---|---|---|",
    ]
    for run in sorted(runs, key=lambda r: (r.mutant == CONTROL, r.mutant)):
        tests = "; ".join(f"`{t.split('::')[1]}`: {v}" for t, v in run.verdicts.items()) or "-"
        others = ", ".join(f"`{t.rsplit('.', 1)[-1]}`" for t in run.other_failures) or "-"
        if run.mutant == CONTROL:
            name, result = "(control: no mutant)", f"all {run.passed} passed" if run.ok else "FAILED"
        else:
            name, result = f"`{run.mutant}`", "killed" if run.ok else "NOT KILLED"
        if run.problems:
            result += " (" + "; ".join(run.problems) + ")"
        lines.append(f"| {name} | {run.issue or '-'} | {tests} | {others} | {result} |")
    return "\n".join(lines) + "\n"
