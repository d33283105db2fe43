"""tests/mutants/BUILD.bazel repeats what Starlark cannot read: the catalogue's killing classes and the
matrix's class files. This checks, on the CPU, that the copies agree with their sources."""

import os
import re

import pytest

import sleepwake_mutants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _argument(build_text, name):
    """The text of `name = {...}` or `name = [...]` in a BUILD file (a macro argument)."""
    m = re.search(r"\n(\s*)" + name + r" = [\[{](.*?)\n\1[\]}],", build_text, re.DOTALL)
    assert m, f"no `{name} = ...` argument found; was the BUILD file reformatted?"
    return m.group(2)


def _dict_of_lists(text):
    return {k: re.findall(r'"(\w+)"', v) for k, v in re.findall(r'"(\w+)": \[([^\]]*)\]', text)}


def _dict_of_files(text):
    return dict(re.findall(r'"(\w+)": "(test_\w+\.py)"', text))


MUTANTS_BUILD = _read("tests/mutants/BUILD.bazel")
MATRIX_BUILD = _read("tests/sleep_wake/BUILD.bazel")


def test_build_lists_exactly_the_catalogue():
    build = {k: sorted(v) for k, v in _dict_of_lists(_argument(MUTANTS_BUILD, "mutants")).items()}
    catalogue = {name: sorted(m.kills) for name, m in sleepwake_mutants.MUTANTS.items()}
    only_build, only_catalogue = sorted(set(build) - set(catalogue)), sorted(set(catalogue) - set(build))
    assert not only_build and not only_catalogue, (
        f"mutants only in tests/mutants/BUILD.bazel: {only_build}; only in the catalogue "
        f"(plugin/sleepwake_mutants MUTANTS): {only_catalogue}. Add or rename so both list the same.")
    differ = {n: (build[n], catalogue[n]) for n in build if build[n] != catalogue[n]}
    assert not differ, f"killing classes differ, mutant: (BUILD, catalogue): {differ}"


def test_class_files_are_the_matrix_classes():
    mine = _dict_of_files(_argument(MUTANTS_BUILD, "class_files"))
    matrix = _dict_of_files(_argument(MATRIX_BUILD, "classes"))
    assert len(matrix) == 11, f"parsed {len(matrix)} classes from tests/sleep_wake/BUILD.bazel: {matrix}"
    assert mine == matrix, "tests/mutants/BUILD.bazel class_files must equal sleep_wake_matrix's classes"


def test_the_control_runs_every_class():
    control = re.findall(r'"(\w+)"', _argument(MUTANTS_BUILD, "control_classes"))
    assert sorted(control) == sorted(_dict_of_files(_argument(MATRIX_BUILD, "classes")))


@pytest.mark.parametrize("name", sorted(sleepwake_mutants.MUTANTS))
def test_every_mutant_is_documented_and_its_regexes_compile(name):
    m = sleepwake_mutants.MUTANTS[name]
    assert m.name == name and m.issue.strip() and m.doc.strip()
    assert m.kills, f"{name}: no class is expected to kill it"
    for test_class, pattern in m.kills.items():
        re.compile(pattern)
        assert pattern, f"{name}: empty regex for {test_class} would accept any failure"


def test_log_line_templates_are_what_the_verdict_expects():
    # verdict.marker_regex fills {name} and {pid}; a template without them cannot prove which
    # mutant, in which process, was applied.
    assert "{name}" in sleepwake_mutants.ACTIVATION and "{pid}" in sleepwake_mutants.ACTIVATION
    assert "{pid}" in sleepwake_mutants.NO_MUTANT and "{name}" not in sleepwake_mutants.NO_MUTANT
