"""Every check of the engine tier is an oracle, as in the GPU tier (tests/core/unit/oracle_unit_test):
no bare assert or AssertionError in its test files and library, and every oracle id they name exists.
Read, not imported: no vLLM needed."""

import ast
import glob
import os
import re

from tests.core import oracle

ENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The walk's own file checks the plan and the driver's source (its steps' oracles are lib/engine_walk.py's).
NOT_CHECKS = {"test_state_walk.py"}


def _files() -> list[str]:
    tests = [f for f in glob.glob(os.path.join(ENGINE, "test_*.py")) if os.path.basename(f) not in NOT_CHECKS]
    return sorted(tests + glob.glob(os.path.join(ENGINE, "lib", "*.py")))


def bare_checks(path: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Assert):
            found.append(f"{os.path.relpath(path, ENGINE)}:{node.lineno}: assert")
        if isinstance(node, ast.Raise) and node.exc is not None:
            call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(call, ast.Name) and call.id == "AssertionError":
                found.append(f"{os.path.relpath(path, ENGINE)}:{node.lineno}: raise AssertionError")
    return found


def test_every_check_of_the_engine_tier_is_an_oracle():
    files = _files()
    assert len(files) >= 10, f"found only {files} (Bazel: the engine's test files and lib/ are this test's data)"
    bare = [hit for f in files for hit in bare_checks(f)]
    assert not bare, (
        "checks that bypass the oracles (use oracle.equal/holds/fail with an id of oracle.ORACLES, "
        f"lib/checks.py, or oracle.Precondition for set-up): {bare}"
    )


def test_the_lint_sees_a_bare_assert(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("def test_x():\n    assert 1 == 2\n    raise AssertionError('no')\n")
    assert [h.split(": ")[1] for h in bare_checks(str(bad))] == ["assert", "raise AssertionError"]


def test_every_oracle_id_the_engine_tier_names_exists():
    heads = "|".join(sorted({o.split(".")[0] for o in oracle.ORACLES}))
    named = {m for f in _files() for m in re.findall(rf'"((?:{heads})\.[a-z0-9_]+)"', open(f, encoding="utf-8").read())}
    unknown = sorted(named - set(oracle.ORACLES))
    assert named and not unknown, f"oracle ids the engine tier names but oracle.ORACLES lacks: {unknown}"
