import glob
import os
import re

import pytest

from tests.sleep_wake.lib import metrics, thresholds


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
    needed = {"level1_bytes_fraction_max", "level2_bytes_fraction_max", "weights_wake_bytes_fraction_max",
              "leak_bytes_per_cycle_max", "logprob_drift_max", "request_completion_s_max", "race_timeout_s",
              "abort_s_max", "held_request_window_s", "sleep_s_max", "wake_s_max", "staged_wake_s_max",
              "cycle_s_max"}
    assert needed <= set(thresholds.TABLE)
    assert thresholds.get("logprob_drift_max") == 1e-2


_REFERENCE = re.compile(r'(?:thresholds\.get|check_at_(?:most|least))\(\s*(?:recorder,\s*)?"([a-z0-9_]+)"')


def test_every_threshold_the_test_classes_name_exists():
    files = glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test_*.py"))
    assert files, "no test_*.py next to this test (Bazel: they are its data)"
    named = {(os.path.basename(f), name) for f in files for name in _REFERENCE.findall(open(f).read())}
    assert named, "no threshold references found: has the calling convention changed?"
    missing = sorted((f, n) for f, n in named if n not in thresholds.TABLE)
    assert not missing, f"thresholds named by test files but absent from thresholds.TABLE: {missing}"


def test_per_cell_precedence(monkeypatch):
    t = thresholds.Threshold("x", 1.0, "s", thresholds.MECHANISM, "unit test",
                             per_cell={"graph": 2.0, "mrv2": 3.0, "mrv2-graph": 4.0})
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
    d = thresholds.divergence("gauge_awake_while_partially_asleep")
    assert d.observed == metrics.GAUGE_AWAKE
    assert "async_llm.py" in d.reason and d.vllm_version == "0.26.0"
    with pytest.raises(KeyError):
        thresholds.divergence("nope")


def test_every_known_divergence_the_test_classes_name_exists():
    files = glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test_*.py"))
    named = {n for f in files for n in re.findall(r'divergence\("([a-z0-9_]+)"\)', open(f).read())}
    assert {"host_copy_cached_after_wake", "reload_without_path_loads_last_pushed"} <= named
    assert named <= set(thresholds.KNOWN_DIVERGENCES), sorted(named - set(thresholds.KNOWN_DIVERGENCES))
