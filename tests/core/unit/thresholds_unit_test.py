import dataclasses
import glob
import json
import os
import re

import pytest

from tests.core import bounds_doc, metrics, releases, thresholds
from tests.core.walk import operations as walk_operations
from tools import matrix

WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SUITE_DIR = os.path.join(WORKSPACE, "tests", "sleep_wake")
CORE_DIR = os.path.join(WORKSPACE, "tests", "core")


@pytest.mark.parametrize("t", list(thresholds.TABLE.values()), ids=lambda t: t.name)
def test_every_entry_is_complete(t):
    assert t.name and isinstance(t.value, (int, float)) and t.value > 0
    assert t.unit.strip(), f"{t.name}: unit missing"
    assert t.layer in thresholds.LAYERS, f"{t.name}: layer {t.layer!r}"
    assert len(t.source.strip()) > 10, f"{t.name}: source must say where the number came from"
    bad = set(t.per_cell) - thresholds.valid_cell_keys()
    assert not bad, f"{t.name}: per_cell keys {bad} not in {sorted(thresholds.valid_cell_keys())}"
    assert all(isinstance(v, (int, float)) and v > 0 for v in t.per_cell.values())


def test_policy_covers_every_layer():
    assert set(thresholds.POLICY) == set(thresholds.LAYERS)
    assert "baseline" in thresholds.POLICY[thresholds.MECHANISM]
    assert "bug" in thresholds.POLICY[thresholds.CONTRACT]


def test_entries_the_suites_need_exist():
    needed = {
        "level1_bytes_fraction_max",
        "level2_bytes_fraction_max",
        "weights_wake_bytes_fraction_max",
        "leak_bytes_per_cycle_max",
        "logprob_drift_max",
        "request_completion_s_max",
        "race_timeout_s",
        "abort_s_max",
        "held_request_window_s",
        "sleep_s_max",
        "wake_s_max",
        "staged_wake_s_max",
        "cycle_s_max",
    }
    assert needed <= set(thresholds.TABLE)
    assert thresholds.get("logprob_drift_max") == 1e-2


_REFERENCE = re.compile(r'thresholds\.get\(\s*"([a-z0-9_]+)"')


def test_every_threshold_the_test_classes_name_exists():
    files = glob.glob(os.path.join(SUITE_DIR, "test_*.py"))
    assert files, "no test_*.py in tests/sleep_wake (Bazel: they are this test's data)"
    named = {(os.path.basename(f), name) for f in files for name in _REFERENCE.findall(open(f).read())}
    assert named, "no threshold references found: has the calling convention changed?"
    missing = sorted((f, n) for f, n in named if n not in thresholds.TABLE)
    assert not missing, f"thresholds named by test files but absent from thresholds.TABLE: {missing}"


def test_per_cell_precedence(monkeypatch):
    t = thresholds.Threshold(
        "x", 1.0, "s", thresholds.MECHANISM, "unit test", per_cell={"graph": 2.0, "mrv2": 3.0, "mrv2-graph": 4.0}
    )
    monkeypatch.setitem(thresholds.TABLE, "x", t)
    assert thresholds.get("x") == 1.0
    assert thresholds.get("x", "MRV1-eager") == 1.0
    assert thresholds.get("x", "MRV1-graph") == 2.0
    assert thresholds.get("x", "MRV2-eager") == 3.0
    assert thresholds.get("x", "MRV2-graph") == 4.0


def test_unknown_name_lists_known():
    with pytest.raises(KeyError, match="wake_s_max"):
        thresholds.get("no_such_threshold")


def test_known_divergence_pins_source_line():
    pin = thresholds.divergence("gauge_awake_while_partially_asleep", "0.26.0")
    assert pin.applies and pin.expected == {1: metrics.GAUGE_AWAKE, 2: metrics.GAUGE_AWAKE}
    assert "async_llm.py:943" in pin.entry.reason and "0.26.0" in pin.describe()
    with pytest.raises(KeyError, match="gauge_awake_while_partially_asleep"):
        thresholds.divergence("nope", "0.26.0")


@pytest.mark.parametrize("d", list(thresholds.KNOWN_DIVERGENCES.values()), ids=lambda d: d.name)
def test_every_divergence_is_complete(d):
    assert d.versions and set(d.versions) <= set(releases.SUPPORTED), (
        f"{d.name}: versions {d.versions} must be supported releases {releases.SUPPORTED}"
    )
    # A pin that expects the same either way could never show a fix.
    assert d.observed != d.documented, f"{d.name}: observed and documented must differ"
    assert all(v in d.reason for v in d.versions), f"{d.name}: the reason must cite each listed release"


def test_lookup_is_by_release():
    pin = thresholds.divergence("reset_prefix_cache_result_unreported", "0.25.0", "http")
    assert pin.applies and pin.expected is None
    pin = thresholds.divergence("reset_prefix_cache_result_unreported", "0.26.0+cu129", "http")
    assert not pin.applies and pin.expected is True and pin.version == "0.26.0"
    assert "as documented" in pin.describe()


def test_lookup_is_by_front_door():
    """A divergence in the API server's router is not one of the in-process doors, which skip the router."""
    for door in ("async_llm", "llm"):
        pin = thresholds.divergence("reset_prefix_cache_result_unreported", "0.24.0", door)
        assert not pin.applies and pin.expected is True
        assert f"through the {door} door" in pin.describe()
    with pytest.raises(ValueError, match="pass the door"):
        thresholds.divergence("reset_prefix_cache_result_unreported", "0.24.0")
    with pytest.raises(ValueError, match="none of the front doors"):
        thresholds.divergence("gauge_awake_while_partially_asleep", "0.26.0", "grpc")
    assert thresholds.divergence("gauge_awake_while_partially_asleep", "0.26.0").applies  # on every door


def test_each_entry_names_front_doors():
    for d in thresholds.KNOWN_DIVERGENCES.values():
        assert d.doors and set(d.doors) <= set(matrix.FRONT_DOORS), f"{d.name}: doors {d.doors}"


@pytest.mark.parametrize("version", ["0.23.0", "0.27.0", "dev", "0.26.0rc1"])
def test_an_unsupported_release_is_refused(version):
    with pytest.raises(thresholds.UnsupportedVersionError, match="not checked against"):
        thresholds.divergence("gauge_awake_while_partially_asleep", version)


_PINNED = re.compile(r'thresholds\.divergence\(\s*"([a-z0-9_]+)"')


def test_every_divergence_is_pinned_by_a_test():
    files = (
        glob.glob(os.path.join(SUITE_DIR, "test_*.py"))
        + glob.glob(os.path.join(CORE_DIR, "*.py"))
        + glob.glob(os.path.join(CORE_DIR, "walk", "*.py"))
        + glob.glob(os.path.join(SUITE_DIR, "walk", "*.py"))
        + glob.glob(os.path.join(WORKSPACE, "tests", "engine", "test_*.py"))  # the llm door's pins
    )
    pinned = {name for f in files for name in _PINNED.findall(open(f).read())}
    # The walk's terminal probes look each of theirs up by name (walk/driver.py Walker.probe).
    pinned |= set(walk_operations.TERMINAL_ORACLES)
    unpinned = sorted(set(thresholds.KNOWN_DIVERGENCES) - pinned)
    assert not unpinned, f"known divergences no test class or oracle looks up: {unpinned}"
    unknown = sorted(pinned - set(thresholds.KNOWN_DIVERGENCES))
    assert not unknown, f"tests look up divergences that thresholds.KNOWN_DIVERGENCES lacks: {unknown}"


def test_identity_release_must_match_the_served_one():
    identity = "python: 3.11.2 /usr/bin/python3\nvllm: 0.26.0 record-sha256=ab12\ntorch: 2.9.0 record-sha256=cd"
    assert releases.from_identity(identity) == "0.26.0"
    releases.check_served("0.26.0+cu129", identity)
    releases.check_served("0.25.0", "vllm: not installed\n")  # names no release: nothing to compare
    releases.check_served("0.25.0", None)
    with pytest.raises(releases.ReleaseMismatchError, match="reports vLLM 0.25.0 but .* names vLLM 0.26.0"):
        releases.check_served("0.25.0", identity)


MECHANISM_BOUNDS = [t for t in thresholds.TABLE.values() if t.layer == thresholds.MECHANISM]


@pytest.mark.parametrize("t", MECHANISM_BOUNDS, ids=lambda t: t.name)
def test_every_mechanism_bound_sits_near_its_noise(t):
    """The bound policy: at most NOISE_FACTOR_MAX times the healthy extreme measured on the H200 over
    every cell of >= 3 runs, or one granule with a strict < where the healthy value is 0. The extreme is
    the bound's record in noise.json."""
    assert t.record or t.noise, f"{t.name}: a mechanism bound names its noise record (record=, a key of noise.json)"
    try:
        noise = t.recorded_noise()
    except thresholds.NoiseRecordError as e:
        pytest.fail(f"{t.name}: {e}")
    assert noise is not None, f'{t.name}: its noise record {t.record!r} holds no healthy extreme ("value")'
    assert noise.runs >= 3, f"{t.name}: noise from {noise.runs} runs; the policy needs >= 3"
    assert set(noise.per_cell) <= set(t.per_cell), f"{t.name}: noise for per_cell keys it does not have"
    for key in [None, *t.per_cell]:
        value = t.per_cell.get(key, t.value) if key else t.value
        noise_value = t.noise_at(key)
        where = f"{t.name}{f' ({key})' if key else ''}"
        if noise_value == 0:
            assert t.granule and value == t.granule and t.strict, (
                f"{where}: healthy servers showed 0, so the bound is one granule with a strict <, not {value:g}"
            )
            continue
        assert t.factor(key) >= 1, f"{where}: the bound {value:g} fails the healthy {noise_value:g}"
        assert t.factor(key) <= thresholds.NOISE_FACTOR_MAX, (
            f"{where}: {value:g} is {t.factor(key):.2f}x its healthy extreme {noise_value:g}; at most "
            f"{thresholds.NOISE_FACTOR_MAX:g}x (or write why it is a contract, not a mechanism bound)"
        )


def test_the_policy_test_sees_a_loose_bound(monkeypatch):
    loose = dataclasses.replace(thresholds.TABLE["leak_bytes_per_cycle_max"], value=4 * thresholds.MiB, strict=False)
    with pytest.raises(AssertionError, match="one granule with a strict <"):
        test_every_mechanism_bound_sits_near_its_noise(loose)
    far = dataclasses.replace(thresholds.TABLE["host_leak_bytes_per_cycle_max"], value=16 * thresholds.MiB)
    with pytest.raises(AssertionError, match="2048.00x its healthy extreme"):
        test_every_mechanism_bound_sits_near_its_noise(far)


CONTRACT_BOUNDS = [t for t in thresholds.TABLE.values() if t.layer == thresholds.CONTRACT]


@pytest.mark.parametrize("t", CONTRACT_BOUNDS, ids=lambda t: t.name)
def test_a_contract_bound_far_from_its_noise_says_why(t):
    """A contract bound may sit more than NOISE_FACTOR_MAX times away from its healthy extreme only with its
    reason, a source that says it is a contract (and, tests/mutants/unit/catalogue_unit_test.py checks, a
    mutant 1.5 times past it); and like any bound it passes what healthy servers showed."""
    try:
        noise = t.recorded_noise()
    except thresholds.NoiseRecordError as e:
        pytest.fail(f"{t.name}: {e}")
    if noise is None:
        return  # a hang detector or an observation window: no measurement to be far from
    for key in [None, *t.per_cell]:
        where = f"{t.name}{f' ({key})' if key else ''}"
        factor = t.factor(key)
        if factor is None:
            continue  # a healthy 0: no factor
        assert factor >= 1, f"{where}: the bound {t.bound_at(key):g} fails the healthy {t.noise_at(key):g}"
        if factor > thresholds.NOISE_FACTOR_MAX:
            assert t.source.strip() and "contract" in t.source, (
                f"{where}: {t.bound_at(key):g} is {factor:.2f}x its healthy extreme {t.noise_at(key):g}, more "
                f"than {thresholds.NOISE_FACTOR_MAX:g}x: its source must say why it is a contract bound"
            )


def test_the_contract_test_sees_a_bound_without_its_reason():
    far = dataclasses.replace(thresholds.TABLE["abort_s_max"], source="")
    healthy = far.noise_at(None)  # the record's extreme, which each run that measures more moves
    assert healthy, "abort_s_max has a noise record (tests/core/noise.json) with a healthy extreme above 0"
    with pytest.raises(
        AssertionError, match=re.escape(f"abort_s_max: 10 is {10 / healthy:.2f}x its healthy extreme {healthy:g}")
    ):
        test_a_contract_bound_far_from_its_noise_says_why(far)
    near = dataclasses.replace(far, value=2 * healthy)  # within 4x: no reason owed (but a mutant is, as a mechanism's)
    test_a_contract_bound_far_from_its_noise_says_why(near)
    tight = dataclasses.replace(far, value=healthy / 4)
    with pytest.raises(AssertionError, match=re.escape(f"the bound {healthy / 4:g} fails the healthy {healthy:g}")):
        test_a_contract_bound_far_from_its_noise_says_why(tight)


def _data_changed(monkeypatch, change):
    """noise.json as thresholds reads it, changed by `change(data)` for one test."""
    with open(thresholds.NOISE_FILE, encoding="utf-8") as f:
        data = json.load(f)
    change(data)
    monkeypatch.setattr(thresholds, "noise_data", lambda path=thresholds.NOISE_FILE: data)


def test_the_policy_test_reads_the_data_file(monkeypatch):
    """The 4x rule holds the bound against noise.json, not against a number in code: a missing record
    fails it, and so does a record whose extreme is more than 4x under the bound."""
    t = thresholds.TABLE["sleep_s_max"]
    _data_changed(monkeypatch, lambda data: data["records"].pop("sleep_s_max"))
    with pytest.raises(pytest.fail.Exception, match="no noise record 'sleep_s_max' in .*noise_floor --merge"):
        test_every_mechanism_bound_sits_near_its_noise(t)
    _data_changed(monkeypatch, lambda data: data["records"]["sleep_s_max"].update(value=0.05))
    with pytest.raises(AssertionError, match="8.00x its healthy extreme 0.05"):
        test_every_mechanism_bound_sits_near_its_noise(t)


def test_no_measurement_is_written_in_the_table():
    """The table's noise comes from noise.json (record=); a Noise written into the table is a
    measurement in code, which a new run would have to edit."""
    inline = [t.name for t in thresholds.TABLE.values() if t.noise is not None]
    assert not inline, f"entries with a Noise in code: {inline}; move it to noise.json and name it with record="


def test_the_noise_records_are_whole():
    data = thresholds.noise_data()
    records, runs = data["records"], data["runs"]
    named = {t.record for t in thresholds.TABLE.values() if t.record}
    assert sorted(set(records) - named) == [], "noise records no threshold names (record=): remove them"
    for name, record in records.items():
        cited = [r for h in record["history"] for r in h["runs"]] + record.get("runs", [])
        cited += [record["run"]] if record.get("run") else []
        cited += [v["run"] for v in record.get("per_cell", {}).values() if v["run"]]
        unknown = sorted(set(cited) - set(runs))
        assert not unknown, f"{name}: cites runs noise.json's runs lack: {unknown}"
        assert all(h["text"].strip() and h["runs"] for h in record["history"]), f"{name}: empty history entry"
        if "value" in record:
            assert record["n"] is None or record["n"] > 0, f"{name}: n is a count of readings or null"
            assert record.get("run") is None or record["run"] in record["runs"], (
                f"{name}: the run that set the extreme is not among the record's runs"
            )
    for run_id, run in runs.items():
        assert set(run) == {"date", "gpus", "release", "what"}, f"run {run_id}: fields {sorted(run)}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", run["date"]), f"run {run_id}: date {run['date']!r}"
        assert run["what"].strip(), f"run {run_id}: say what ran"
        assert releases.public(run["release"]) in releases.SUPPORTED or run["release"] == "unknown", (
            f"run {run_id}: release {run['release']!r}"
        )


def test_the_noise_file_is_written_sorted():
    """One layout, the one noise_floor --merge writes, so a new run shows as a small diff."""
    with open(thresholds.NOISE_FILE, encoding="utf-8") as f:
        text = f.read()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", (
        f"{thresholds.NOISE_FILE} is not in its canonical layout (indent 2, sorted keys): write it with "
        "noise_floor --merge, or json.dump(data, f, indent=2, sort_keys=True) and a newline"
    )


# A date, a MEASURED_* constant, a session, or a run letter ("run E", "runs B-D").
_DATED = re.compile(r"(?i:\b20\d\d-[01]\d(-[0-3]\d)?\b|MEASURED_|\bsession\b)|\bruns? [A-G](\b|-)")


def test_the_code_names_no_past_run_or_date():
    """Runs and dates belong to noise.json: a line of thresholds.py naming one would have to
    change with the next run."""
    with open(thresholds.__file__, encoding="utf-8") as f:
        hits = [f"{n}: {line.strip()}" for n, line in enumerate(f, 1) if _DATED.search(line)]
    assert not hits, "thresholds.py names past runs or dates (move them to noise.json):\n" + "\n".join(hits)


def test_no_entry_is_an_unmeasured_guess():
    guesses = [t.name for t in thresholds.TABLE.values() if "INITIAL" in t.source or "initial bound" in t.source]
    assert not guesses, f"entries still marked as initial guesses: {guesses}"
    for t in thresholds.TABLE.values():
        if t.layer == thresholds.CONTRACT and t.recorded_noise() is None:
            assert "contract" in t.source or "observation window" in t.source, (
                f"{t.name}: a contract bound without a measurement says why it is a contract"
            )


def test_the_bounds_page_is_generated_from_the_table():
    page = os.path.join(WORKSPACE, "docs", "thresholds.md")
    with open(page, encoding="utf-8") as f:
        committed = f.read()
    assert committed == bounds_doc.render(), (
        "docs/thresholds.md is stale: run `python3 -m tests.core.bounds_doc > docs/thresholds.md`"
    )
