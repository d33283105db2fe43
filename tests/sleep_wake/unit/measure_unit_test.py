import contextlib
import json
import threading
import time

import pytest

from tests.sleep_wake.lib import measure, thresholds


def test_recorder_writes_jsonl_to_bazel_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    rec = measure.Recorder(cell_id="MRV1-eager")
    assert rec.path == str(tmp_path / measure.MEASUREMENTS_FILE)
    rec.record("t::a", "sleep_s", 0.1, "s", repeat=0)
    rec.record("", "wake_s", 0.03, "s")
    lines = (tmp_path / "measurements.jsonl").read_text().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first["test"] == "t::a" and first["key"] == "sleep_s" and first["value"] == 0.1
    assert first["unit"] == "s" and first["cell"] == "MRV1-eager" and first["repeat"] == 0
    assert second["test"].endswith("test_recorder_writes_jsonl_to_bazel_outputs")  # from pytest
    assert rec.entries() == [first, second]


def test_recorder_is_thread_safe(tmp_path):
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    threads = [threading.Thread(target=lambda: [rec.record("t", "k", i, "n") for i in range(50)])
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(rec.entries()) == 400


def test_check_at_most_records_then_asserts(tmp_path):
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    measure.check_at_most(rec, "wake_s_max", 0.1, "MRV1-eager", "median wake")
    with pytest.raises(AssertionError) as e:
        measure.check_at_most(rec, "wake_s_max", 99.0, "MRV1-eager", "median wake")
    message = str(e.value)
    assert "wake_s_max" in message and "mechanism" in message and "baseline" in message
    assert "99" in message and "<=" in message
    entries = rec.entries()
    assert [x["ok"] for x in entries] == [True, False]
    assert entries[1]["bound"] == thresholds.get("wake_s_max") and entries[1]["layer"] == "mechanism"


def test_check_at_least_contract_message(tmp_path, monkeypatch):
    rec = measure.Recorder(path=str(tmp_path / "m.jsonl"))
    t = thresholds.Threshold("y", 0.8, "fraction", thresholds.CONTRACT, "unit test")
    monkeypatch.setitem(thresholds.TABLE, "y", t)
    measure.check_at_least(rec, "y", 0.9, None, "freed")
    with pytest.raises(AssertionError, match="a failure is a bug"):
        measure.check_at_least(rec, "y", 0.1, None, "freed")


def test_wait_until_returns_elapsed():
    start = time.monotonic()
    elapsed = measure.wait_until(lambda: time.monotonic() - start > 0.1, 5, poll_s=0.01)
    assert 0.1 <= elapsed < 2


def test_wait_until_times_out_with_last_value():
    with pytest.raises(AssertionError, match=r"timed out after 0.2 s waiting for the thing; last value 0"):
        measure.wait_until(lambda: 0, 0.2, poll_s=0.05, what="the thing")


def test_assert_holds():
    measure.assert_holds(lambda: True, 0.2, poll_s=0.05)
    start = time.monotonic()
    with pytest.raises(AssertionError, match="stopped holding"):
        measure.assert_holds(lambda: time.monotonic() - start < 0.1, 5, poll_s=0.02, what="x")
    assert time.monotonic() - start < 2


def test_timed_and_median():
    result, seconds = measure.timed(lambda x: x * 2, 21)
    assert result == 42 and seconds >= 0
    assert measure.median([3, 1, 2]) == 2
    with pytest.raises(ValueError):
        measure.median([])


def test_assert_holds_names_the_window_when_observing_fails():
    def dies():
        raise ConnectionError("server gone")
    with pytest.raises(AssertionError, match=r"\[#44483\] held could not be observed .*server gone"):
        measure.assert_holds(dies, 1.0, what="[#44483] held")


def test_median_increment_sees_a_steady_leak_not_one_jump():
    mib = 1 << 20
    steady = [100 * mib + 8 * mib * i for i in range(10)]
    jump = [100 * mib] * 4 + [228 * mib] * 6
    assert measure.median_increment(steady) == 8 * mib
    assert measure.median_increment(jump) == 0
    assert measure.spread(jump[1:]) == 128 * mib and measure.spread(steady[1:]) == 64 * mib
    with pytest.raises(ValueError):
        measure.median_increment([1])
    with pytest.raises(ValueError):
        measure.spread([])


@pytest.mark.parametrize("name,call", [
    ("poll_s", lambda pred: measure.wait_until(lambda: pred() and False, 0.45)),
    ("hold_sample_s", lambda pred: measure.assert_holds(pred, 0.45)),
])
def test_default_polls_come_from_the_thresholds_table(monkeypatch, name, call):
    looks = []

    def count():
        looks.append(time.monotonic())
        return True

    monkeypatch.setitem(thresholds.TABLE, name, thresholds.Threshold(name, 0.15, "s", thresholds.WAIT, "test"))
    with pytest.raises(AssertionError) if name == "poll_s" else contextlib.nullcontext():
        call(count)
    assert 3 <= len(looks) <= 5, f"{len(looks)} looks in 0.45 s at a {name} of 0.15 s"
