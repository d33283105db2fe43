"""tests/mutants/BUILD.bazel repeats what Starlark cannot read: the catalogue's killing classes and the
matrix's class files (from tests/sleep_wake/classes.bzl). This checks, on the CPU, that they agree."""

import os
import re

import pytest

import sleepwake_mutants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _argument(build_text, name):
    """The text of `name = {...}` or `name = [...]` in a BUILD file (a top-level assignment)."""
    m = re.search(r"\n" + name + r" = [\[{](.*?)\n[\]}]\n", build_text, re.DOTALL)
    assert m, f"no top-level `{name} = ...` found; was the BUILD file reformatted?"
    return m.group(1)


def _dict_of_lists(text):
    return {k: re.findall(r'"(\w+)"', v) for k, v in re.findall(r'"(\w+)": \[([^\]]*)\]', text)}


def _dict_of_files(text):
    return dict(re.findall(r'"(\w+)": "(test_\w+\.py)"', text))


MUTANTS_BUILD = _read("tests/mutants/BUILD.bazel")
MATRIX_BUILD = _read("tests/sleep_wake/BUILD.bazel")


def test_build_lists_exactly_the_catalogue():
    build = {k: sorted(v) for k, v in _dict_of_lists(_argument(MUTANTS_BUILD, "MUTANT_KILLS")).items()}
    catalogue = {name: sorted(m.kills) for name, m in sleepwake_mutants.MUTANTS.items()}
    only_build, only_catalogue = sorted(set(build) - set(catalogue)), sorted(set(catalogue) - set(build))
    assert not only_build and not only_catalogue, (
        f"mutants only in tests/mutants/BUILD.bazel: {only_build}; only in the catalogue "
        f"(plugin/sleepwake_mutants MUTANTS): {only_catalogue}. Add or rename so both list the same.")
    differ = {n: (build[n], catalogue[n]) for n in build if build[n] != catalogue[n]}
    assert not differ, f"killing classes differ, mutant: (BUILD, catalogue): {differ}"


def test_the_classes_are_the_suites_test_files():
    classes = _dict_of_files(_read("tests/sleep_wake/classes.bzl"))
    assert len(classes) == 11, f"parsed {len(classes)} classes from tests/sleep_wake/classes.bzl: {classes}"
    for short, test_file in classes.items():
        assert os.path.exists(os.path.join(ROOT, "tests/sleep_wake", test_file)), (short, test_file)
    assert "SLEEP_WAKE_CLASSES" in MUTANTS_BUILD and "SLEEP_WAKE_CLASSES" in MATRIX_BUILD, (
        "the matrix and the mutants must both take their classes from classes.bzl")


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
