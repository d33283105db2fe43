"""Detection power of the engine tier: each engine mutant must be killed, and the control must pass.

One run of the engine tests (tests/engine/test_*.py; the walk and the async door only for the mutants whose
kills name them, and only their named tests for a mutant nothing else kills) per catalogued mutant
(mutants/catalogue.py) plus the control, each judged by mutants/judge.py.
Importing vLLM's engine is most of a run's cost (docs/design.md), so this process imports it
once and forks a child per run; the child applies its mutant (through
SLEEPWAKE_ENGINE_MUTANT and tests/engine/conftest.py), runs pytest and exits, leaving the parent's
vLLM classes unpatched for the next child. The table lands in the test log and in
engine_mutation_table.md among the target's undeclared outputs.
"""

import gc
import glob
import os
import sys

import pytest

from tests.engine.lib import engines  # noqa: F401  (vLLM's engine, imported once before the forks)
from tests.engine.mutants import catalogue, judge
from tests.core import verdict

ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(ENGINE_DIR))
WALK_FILE = os.path.join(ENGINE_DIR, "test_state_walk.py")
ASYNC_FILE = os.path.join(ENGINE_DIR, "test_async_llm_door.py")
# Test files that run only under the mutants whose kills name them: the walk (its own target,
# engine_walk_test) and the async door (each of its tests forks an engine process and waits out held
# windows, which every run would pay: docs/design.md). The control runs the async door too.
APART = (WALK_FILE, ASYNC_FILE)
TEST_FILES = sorted(f for f in glob.glob(os.path.join(ENGINE_DIR, "test_*.py")) if f not in APART)
CONTROL_FILES = TEST_FILES + [ASYNC_FILE]
RUNS = [judge.CONTROL] + sorted(catalogue.MUTANTS)

# The children inherit a frozen heap, so the freeze_gc_heap of each engine they start scans only
# what the child itself made, not all of vLLM and torch again (docs/design.md).
gc.collect()
gc.freeze()

_runs: dict[str, judge.Run] = {}


def files_for(mutant: str) -> list[str]:
    """The engine tests a mutant's run takes: all of them but the files apart, and those files where its
    kills name them. A mutant only files apart kill runs just the tests its kills name (the walk's named
    shards: a shard that does not reach the defect walks all its pairs, so the whole walk under each of
    them would outgrow the target's time)."""
    entry = catalogue.MUTANTS.get(mutant)
    if entry is None:
        return CONTROL_FILES
    apart = {os.path.relpath(f, ROOT) for f in APART}
    named = [k for k in entry.kills if k.split("::")[0] in apart]
    if named and len(named) == len(entry.kills):
        return [os.path.join(ROOT, k) for k in named]
    return TEST_FILES + sorted({os.path.join(ROOT, k.split("::")[0]) for k in named})


def _child(mutant: str, junit: str, log: str, basetemp: str) -> None:
    """In the forked child: the engine tests under one mutant, output to `log`. Never returns."""
    code = 70  # EX_SOFTWARE, if anything below raises before pytest's own exit code
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        # The parent's pytest replaced sys.stdout/err with its capture; the child writes to `log`.
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ[catalogue.ENV] = mutant
        os.environ.pop("PYTEST_ADDOPTS", None)
        code = int(
            pytest.main(
                files_for(mutant)
                + [
                    "-p",
                    "no:cacheprovider",
                    "-q",
                    "-rfE",
                    "--color=no",
                    f"--rootdir={ROOT}",
                    f"--basetemp={basetemp}",
                    f"--junitxml={junit}",
                    "-o",
                    "junit_family=xunit2",
                ]
            )
        )
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run(mutant: str, work: str) -> tuple[int, list[verdict.Case], str]:
    junit, log = os.path.join(work, "junit.xml"), os.path.join(work, "run.log")
    pid = os.fork()
    if pid == 0:
        _child(mutant, junit, log, os.path.join(work, "tmp"))
    _, status = os.waitpid(pid, 0)
    with open(log, encoding="utf-8", errors="replace") as f:
        output = f.read()
    cases = verdict.parse_junit(junit) if os.path.exists(junit) else []
    return os.waitstatus_to_exitcode(status), cases, output


def _outputs_dir(tmp_path_factory) -> str:
    return os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or str(tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("mutant", RUNS)
def test_engine_mutant(mutant, tmp_path, tmp_path_factory):
    assert TEST_FILES, f"no test_*.py next to {ENGINE_DIR}: the target's data must carry them"
    code, cases, output = _run(mutant, str(tmp_path))
    entry = catalogue.MUTANTS.get(mutant)
    run = judge.judge(
        mutant,
        entry.issue if entry else "",
        entry.kills if entry else {},
        cases,
        output,
        entry.fails_as if entry else (),
    )
    _runs[mutant] = run
    with open(os.path.join(_outputs_dir(tmp_path_factory), f"engine_run_{mutant}.log"), "w", encoding="utf-8") as f:
        f.write(output)
    report = judge.table([run]) + f"pytest exit {code}; run log: engine_run_{mutant}.log\n"
    print(report)
    assert run.ok, report + "\n" + output[-4000:]


def test_mutation_table(tmp_path_factory, capsys):
    """Written last (pytest keeps file order): the table of every run above, into the test log."""
    missing = [m for m in RUNS if m not in _runs]
    text = judge.table(list(_runs.values()))
    with open(os.path.join(_outputs_dir(tmp_path_factory), "engine_mutation_table.md"), "w", encoding="utf-8") as f:
        f.write(text)
    with capsys.disabled():
        print("\n" + text)
    assert not missing, f"no run for {missing} (deselected or crashed); the table above is partial"
