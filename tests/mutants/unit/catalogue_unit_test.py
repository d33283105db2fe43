"""tests/mutants/BUILD.bazel repeats what Starlark cannot read: the catalogue's killing classes and the
matrix's class files (from tools/matrix.bzl). This checks, on the CPU, that they agree, that
every catalogue entry names a patch of the plugin package and oracle ids the suite has, and that each
mechanism bound, and each contract bound far from its noise, has a mutant 1.5 times past it (not 2x, not 10x),
so that a kill says the bound is sensitive."""

import dataclasses
import importlib
import os
import re

import pytest
import sleepwake_mutants

from tests.core import oracle, thresholds, verdict
from tools import matrix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


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


MUTANTS_BUILD = _read("tests/mutants/BUILD.bazel")
MATRIX_BUILD = _read("tests/sleep_wake/BUILD.bazel")


def test_build_lists_exactly_the_catalogue():
    build = {k: sorted(v) for k, v in _dict_of_lists(_argument(MUTANTS_BUILD, "MUTANT_KILLS")).items()}
    catalogue = {name: sorted(m.kills) for name, m in sleepwake_mutants.MUTANTS.items()}
    only_build, only_catalogue = sorted(set(build) - set(catalogue)), sorted(set(catalogue) - set(build))
    assert not only_build and not only_catalogue, (
        f"mutants only in tests/mutants/BUILD.bazel: {only_build}; only in the catalogue "
        f"(plugin/sleepwake_mutants MUTANTS): {only_catalogue}. Add or rename so both list the same."
    )
    differ = {n: (build[n], catalogue[n]) for n in build if build[n] != catalogue[n]}
    assert not differ, f"killing classes differ, mutant: (BUILD, catalogue): {differ}"


def test_build_gives_each_door_mutant_the_catalogues_door():
    build = dict(re.findall(r'"(\w+)": "(\w+)"', _argument(MUTANTS_BUILD, "MUTANT_DOORS")))
    catalogue = {name: m.door for name, m in sleepwake_mutants.MUTANTS.items() if m.door != sleepwake_mutants.HTTP}
    assert build == catalogue, (
        f"tests/mutants/BUILD.bazel MUTANT_DOORS is {build}; the catalogue's mutants of a door other than http "
        f"are {catalogue}: make them agree"
    )
    assert catalogue, "no door mutant: the in-process doors' own code has none"


@pytest.mark.parametrize("name", sorted(sleepwake_mutants.MUTANTS))
def test_a_mutant_is_killed_through_its_door_by_classes_of_that_door(name):
    """A door mutant patches that door's own code (doors.py) and its killers run through the door
    (tools/matrix.bzl DOOR_EXCLUDED leaves them in); every other one is HTTP's."""
    m = sleepwake_mutants.MUTANTS[name]
    assert m.door in matrix.FRONT_DOORS, f"{name}: door {m.door!r} is none of {matrix.FRONT_DOORS}"
    assert sleepwake_mutants.HTTP == matrix.HTTP
    if m.door == matrix.HTTP:
        assert not m.patch.startswith("doors:"), f"{name}: a patch of doors.py on the http door"
        return
    assert m.patch.startswith("doors:"), f"{name}: a {m.door} door mutant's patch belongs in doors.py"
    outside = sorted(set(m.kills) - set(matrix.door_classes(m.door)))
    assert not outside, f"{name}: {outside} do not run through the {m.door} door ({matrix.DOOR_EXCLUDED[m.door]})"


def test_the_classes_are_the_suites_test_files():
    classes = matrix.SLEEP_WAKE_CLASSES
    assert len(classes) == 17, f"{len(classes)} classes in tools/matrix.bzl: {classes}"
    for short, test_file in classes.items():
        assert os.path.exists(os.path.join(ROOT, "tests/sleep_wake", test_file)), (short, test_file)
    for build in (MUTANTS_BUILD, MATRIX_BUILD):
        assert 'load("//tools:matrix.bzl"' in build and "SLEEP_WAKE_CLASSES" in build, (
            "the matrix and the mutants must both take their classes from tools/matrix.bzl"
        )


@pytest.mark.parametrize("name", sorted(sleepwake_mutants.MUTANTS))
def test_every_mutant_is_documented_and_killed_by_oracle_ids(name):
    m = sleepwake_mutants.MUTANTS[name]
    assert m.name == name and m.issue.strip() and m.doc.strip()
    assert m.kills, f"{name}: no class is expected to kill it"
    for test_class, ids in m.kills.items():
        assert isinstance(ids, tuple) and ids, f"{name}: {test_class} must name a tuple of oracle ids, got {ids!r}"
        unknown = [i for i in ids if i not in oracle.ORACLES]
        assert not unknown, f"{name}: {test_class} names oracle ids {unknown} that oracle.ORACLES lacks"
    # A mutant sized against a bound must be killed by that bound's oracle.
    sized = {o.id for o in oracle.ORACLES.values() if {o.threshold, o.beside_start} & set(m.expected)}
    expected = {i for ids in m.kills.values() for i in ids}
    assert not m.expected or sized & expected, (
        f"{name}: sized against {sorted(m.expected)}, but no oracle of those bounds ({sorted(sized)}) is "
        f"among its killers {sorted(expected)}"
    )


@pytest.mark.parametrize("name", sorted(sleepwake_mutants.MUTANTS))
def test_a_liveness_oracle_kills_only_a_defect_marked_as_what_it_sees(name):
    """api.answers kills only a mutant whose defect is a hang, api.status and server.healthy only one whose
    defect is an error answer (fails_as); a mark with no such oracle among the killers marks nothing."""
    m = sleepwake_mutants.MUTANTS[name]
    listed = {i for ids in m.kills.values() for i in ids if i in verdict.LIVENESS}
    unmarked = sorted(i for i in listed if verdict.LIVENESS[i] not in m.fails_as)
    assert not unmarked, (
        f"{name}: its killers list {unmarked}, which an overloaded host or a crash fires too; "
        f"mark the entry fails_as={sorted({verdict.LIVENESS[i] for i in unmarked})} if its defect "
        "is that, else drop them"
    )
    idle = sorted(set(m.fails_as) - {verdict.LIVENESS[i] for i in listed})
    assert not idle, f"{name}: fails_as {idle}, but no killer of that kind: list its liveness oracle or drop the mark"


def test_the_fake_runs_a_control_of_every_class_a_liveness_oracle_may_kill_in():
    marked = sorted(
        {
            c
            for m in sleepwake_mutants.MUTANTS.values()
            if m.fails_as
            for c, ids in m.kills.items()
            if set(ids) & set(verdict.LIVENESS)
        }
    )
    listed = re.findall(r'"(\w+)"', _argument(MUTANTS_BUILD, "FAKE_CONTROL_CLASSES"))
    assert sorted(listed) == marked, (
        f"tests/mutants/BUILD.bazel FAKE_CONTROL_CLASSES is {listed}; the classes a "
        f"liveness oracle may kill in are {marked}: make it that list"
    )


def test_log_line_templates_are_what_the_verdict_expects():
    # verdict.marker_regex fills {name} and {pid}; a template without them cannot prove which
    # mutant, in which process, was applied.
    for template in (sleepwake_mutants.ACTIVATION, sleepwake_mutants.REACHED):
        assert "{name}" in template and "{pid}" in template
    assert "{pid}" in sleepwake_mutants.NO_MUTANT and "{name}" not in sleepwake_mutants.NO_MUTANT


def test_a_patched_function_says_it_was_reached_once(capsys, monkeypatch):
    """shared.wrap and shared.replace print REACHED at the first call of a patched function, sync or async."""
    import asyncio

    from sleepwake_mutants import shared

    monkeypatch.setitem(shared._state, "fd", None)  # on stderr, whatever an engine conftest set

    class Engine:
        def sleep(self, level=1):
            return level

        async def wake_up(self, tags=None):
            return tags

    engine = Engine()
    shared.applying("slow_sleep")
    shared.wrap(Engine, "sleep", lambda original: lambda self, level=1: original(self, level) + 1)
    assert capsys.readouterr().err == ""  # applied: not yet reached
    assert engine.sleep(1) == 2 and engine.sleep(2) == 3
    reached = sleepwake_mutants.REACHED.format(name="slow_sleep", pid=os.getpid())
    assert capsys.readouterr().err.splitlines() == [reached]
    shared.applying("gauge_not_updated")
    shared.replace(Engine, "wake_up", Engine.wake_up)
    assert asyncio.iscoroutinefunction(Engine.wake_up) and capsys.readouterr().err == ""
    assert asyncio.run(engine.wake_up(["weights"])) == ["weights"]
    assert asyncio.run(engine.wake_up(None)) is None
    assert capsys.readouterr().err.splitlines() == [
        sleepwake_mutants.REACHED.format(name="gauge_not_updated", pid=os.getpid())
    ]


def test_every_patch_goes_through_wrap_or_replace():
    """A patch assigned directly (Owner.attr = ...) would never print REACHED: its mutant would read as
    not applied however often the tests called it."""
    plugin = os.path.join(ROOT, "tests/mutants/plugin/sleepwake_mutants")
    direct = [
        f"{f}:{n}"
        for f in sorted(os.listdir(plugin))
        if f.endswith(".py")
        for n, line in enumerate(_read(os.path.join("tests/mutants/plugin/sleepwake_mutants", f)).splitlines(), 1)
        if re.match(r"\s*[A-Z]\w*\.\w+ = ", line)
    ]
    assert not direct, f"patches assigned directly: {direct}; use shared.replace or shared.wrap"


@pytest.mark.parametrize("name", sorted(sleepwake_mutants.MUTANTS))
def test_every_patch_is_a_function_of_the_plugin_package(name):
    module, sep, function = sleepwake_mutants.MUTANTS[name].patch.partition(":")
    assert sep, f"{name}: patch must be 'module:function', got {sleepwake_mutants.MUTANTS[name].patch!r}"
    # The package's modules import vLLM inside their functions only, so this works without vLLM.
    assert callable(getattr(importlib.import_module(f"sleepwake_mutants.{module}"), function, None)), (
        f"{name}: sleepwake_mutants.{module} has no function {function}"
    )


def _probed(table) -> list[str]:
    """The bounds that need a mutant whose defect is 1.5 times past them: every mechanism bound, and every
    contract bound more than NOISE_FACTOR_MAX times its healthy extreme (noise.json), since a bound that far
    from what healthy servers show could have drifted out of reach of any real defect unnoticed. A contract
    bound with no noise record (the hang detectors request_completion_s_max and race_timeout_s, the
    observation window held_request_window_s) stays out: it has no noise to be far from, and what a hang
    detector catches, a request that never ends, has no size for a mutant to be 1.5 times of."""
    far = {
        t.name for t in table.values() if t.layer == thresholds.CONTRACT and _factor(t) > thresholds.NOISE_FACTOR_MAX
    }
    return sorted(t.name for t in table.values() if t.layer == thresholds.MECHANISM or t.name in far)


def _factor(t: thresholds.Threshold) -> float:
    """The largest of its factors over its per_cell keys; 0 without a noise record (or a healthy 0)."""
    return max((t.factor(key) or 0.0 for key in [None, *t.per_cell]), default=0.0)


PROBED = _probed(thresholds.TABLE)
MISS_MIN, MISS_MAX = 1.4, 1.6


def _mutants_cell() -> str:
    """The cell the mutants run on ("MRV2-eager"), read from tests/mutants/defs.bzl."""
    text = _read("tests/mutants/defs.bzl")
    found = [re.search(rf'\n_{key} = "(\w+)"', text) for key in ("RUNNER", "MODE")]
    assert all(found), "tests/mutants/defs.bzl has no _RUNNER or _MODE"
    runner, mode = (m.group(1) for m in found if m)
    return f"{runner.upper()}-{mode}"


def _miss(bound: str, value: float) -> float:
    """How many times `value` misses the bound (> 1 fails it): value / bound for an upper bound."""
    limit = thresholds.get(bound, _mutants_cell())
    return value / limit if bound.endswith("_max") else limit / value


@pytest.mark.parametrize("name", sorted(sleepwake_mutants.MUTANTS))
def test_sized_mutants_miss_their_bound_by_half_of_it(name):
    m = sleepwake_mutants.MUTANTS[name]
    assert m.size.strip(), f"{name}: size missing (how big the defect is, for the mutation table)"
    unknown = [b for b in m.bound if b not in thresholds.TABLE]
    assert not unknown, f"{name}: bound names {unknown}, which thresholds.TABLE does not have"
    assert set(m.expected) <= set(m.bound), f"{name}: expected values for {set(m.expected) - set(m.bound)}"
    for bound, value in m.expected.items():
        assert MISS_MIN <= _miss(bound, value) <= MISS_MAX, (
            f"{name}: expected {value:g} against {bound} = {thresholds.get(bound, _mutants_cell()):g} misses "
            f"it {_miss(bound, value):.2f}x; resize the mutant to miss by {MISS_MIN}-{MISS_MAX}x"
        )


def test_every_probed_bound_has_a_sized_mutant():
    sized = {b for m in sleepwake_mutants.MUTANTS.values() for b in m.expected}
    missing = sorted(set(PROBED) - sized)
    assert not missing, f"no mutant is sized against {missing}: add one 1.5 times past each"


def test_a_contract_bound_far_from_its_noise_is_probed():
    """The rule reads each contract bound's factor from noise.json: a contract bound with a record is probed
    while it sits more than NOISE_FACTOR_MAX times its noise (abort_s_max), and not once its noise came within
    that of it (logprob_drift_max since an H100 run's drift); those without a record are not. Moving either
    bound across the line moves it in or out."""
    assert "abort_s_max" in PROBED
    assert not {"request_completion_s_max", "race_timeout_s", "held_request_window_s"} & set(PROBED)
    for name in ("abort_s_max", "logprob_drift_max"):
        t = thresholds.TABLE[name]
        assert (name in PROBED) == (_factor(t) > thresholds.NOISE_FACTOR_MAX), f"{name}: factor {_factor(t):.2f}"
    near = dict(thresholds.TABLE, abort_s_max=dataclasses.replace(thresholds.TABLE["abort_s_max"], value=0.1))
    assert "abort_s_max" not in _probed(near)
    drift = thresholds.TABLE["logprob_drift_max"]
    far = dict(thresholds.TABLE, logprob_drift_max=dataclasses.replace(drift, value=drift.value * 100))
    assert "logprob_drift_max" in _probed(far)
