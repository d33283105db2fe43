import contextlib
import json
import threading
import time

import pytest

from tests.core import liveness, measure, oracle, thresholds


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
    threads = [threading.Thread(target=lambda: [rec.record("t", "k", i, "n") for i in range(50)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(rec.entries()) == 400


def test_wait_until_returns_elapsed():
    start = time.monotonic()
    elapsed = measure.wait_until(lambda: time.monotonic() - start > 0.1, 5, poll_s=0.01)
    assert 0.1 <= elapsed < 2


def test_wait_until_times_out_with_last_value():
    # A wait that sets a test up is no oracle: its timeout is an error of its own, never an AssertionError.
    with pytest.raises(measure.WaitTimeout, match=r"timed out after 0.2 s waiting for the thing; last value 0"):
        measure.wait_until(lambda: 0, 0.2, poll_s=0.05, what="the thing")
    assert not issubclass(measure.WaitTimeout, AssertionError)


def test_wait_until_with_an_oracle_fails_that_oracle():
    with pytest.raises(oracle.OracleFailure, match="requests.load_drains") as e:
        measure.wait_until(
            lambda: 3 == 0,
            0.2,
            poll_s=0.05,
            what="/load back to 0",
            oracle_id="requests.load_drains",
            confirm_live=lambda what: None,
        )
    assert e.value.oracle_id == "requests.load_drains" and "last value False" in e.value.measured


def test_wait_until_fails_its_oracle_only_on_a_live_server():
    """A wait that ran out on a server that is not live raises what confirm_live raises (errored), and a
    wait with an oracle but no way to tell is refused."""

    def dead(what):
        raise liveness.EngineDead(f"{what}; GET /health answered 503", "server.healthy")

    with pytest.raises(liveness.EngineDead, match="the request to end: not after 0.1 s; GET /health answered 503"):
        measure.wait_until(
            lambda: False,
            0.1,
            poll_s=0.05,
            what="the request to end",
            oracle_id="requests.completes",
            confirm_live=dead,
        )
    with pytest.raises(ValueError, match="without confirm_live"):
        measure.wait_until(lambda: True, 0.1, what="x", oracle_id="requests.completes")


def test_assert_holds():
    measure.assert_holds("requests.held_while_asleep", lambda: True, 0.2, poll_s=0.05)
    start = time.monotonic()
    with pytest.raises(oracle.OracleFailure, match="stopped holding") as e:
        measure.assert_holds(
            "requests.held_while_asleep", lambda: time.monotonic() - start < 0.1, 5, poll_s=0.02, what="x"
        )
    assert e.value.oracle_id == "requests.held_while_asleep"
    assert time.monotonic() - start < 2


def test_timed_and_median():
    result, seconds = measure.timed(lambda x: x * 2, 21)
    assert result == 42 and seconds >= 0
    assert measure.median([3, 1, 2]) == 2
    with pytest.raises(ValueError):
        measure.median([])


def test_assert_holds_lets_a_failure_to_observe_through():
    # A server that stops answering is no observation of the invariant: it must not read as its failure.
    def dies():
        raise ConnectionError("server gone")

    with pytest.raises(ConnectionError, match="server gone"):
        measure.assert_holds("requests.held_until_resident", dies, 1.0, what="held")


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


@pytest.mark.parametrize(
    "name,call",
    [
        ("poll_s", lambda pred: measure.wait_until(lambda: pred() and False, 0.45)),
        ("hold_sample_s", lambda pred: measure.assert_holds("requests.held_while_asleep", pred, 0.45)),
    ],
)
def test_default_polls_come_from_the_thresholds_table(monkeypatch, name, call):
    looks = []

    def count():
        looks.append(time.monotonic())
        return True

    monkeypatch.setitem(thresholds.TABLE, name, thresholds.Threshold(name, 0.15, "s", thresholds.WAIT, "test"))
    with pytest.raises(measure.WaitTimeout) if name == "poll_s" else contextlib.nullcontext():
        call(count)
    assert 3 <= len(looks) <= 5, f"{len(looks)} looks in 0.45 s at a {name} of 0.15 s"
