"""stalls: the clock's readings tell a sample the host stalled from one it did not, and a stalled sample is
recorded and left out, never judged by its oracle."""

import time

import pytest

from tests.core import oracle, stalls, thresholds


class _Recorder:
    def __init__(self):
        self.rows = []

    def record(self, test, key, value, unit, **extra):
        self.rows.append({"key": key, "value": value, **extra})


class _Readings(stalls.Sampler):
    """A sampler whose readings of the clock the test gives."""

    def __init__(self, ticks):
        super().__init__(period_s=0.05)
        self._ticks = list(ticks)


def test_the_longest_gap_is_the_one_around_the_window():
    readings = _Readings([0.0, 0.05, 0.10, 2.10, 2.15, 9.0])
    assert readings.longest_gap(1.0, 1.5) == pytest.approx(2.0)  # the stall spans the whole window
    assert readings.longest_gap(0.0, 0.1) == pytest.approx(0.05)
    assert readings.longest_gap(2.12, 2.14) == pytest.approx(0.05)
    assert readings.longest_gap(2.2, 2.3) == pytest.approx(6.85)  # no reading since: a stall too


def test_a_sampler_on_a_quiet_host_sees_no_stall():
    with stalls.Sampler() as sampler:
        start = time.perf_counter()
        time.sleep(0.3)  # the measured thing's own time, not a wait for a condition
        end = time.perf_counter()
    assert sampler.longest_gap(start, end) < thresholds.get("host_stall_s")


def test_a_sample_taken_across_a_stall_is_recorded_and_left_out():
    """An abort timed past abort_s_max across a stall: recorded under STALLED_KEY with its gap, not judged
    (requests.abort_time failed it: a host that did not schedule the test made a healthy server late)."""
    bound, late = thresholds.get("abort_s_max"), thresholds.get("abort_s_max") + 5
    stalled = _Readings([0.0, 0.05, 0.05 + 2 * thresholds.get("host_stall_s"), late + 1])
    recorder = _Recorder()
    assert not stalls.bounded_unless_stalled(recorder, stalled, "requests.abort_time", 0.0, late, "MRV1-eager", "abort")
    [row] = recorder.rows
    assert row["key"] == stalls.STALLED_KEY and row["value"] == late and row["gap"] > row["bound"] < bound


def test_a_late_sample_without_a_stall_fails_its_oracle():
    bound = thresholds.get("abort_s_max")
    late = bound + 5
    quiet = _Readings([i * 0.05 for i in range(int((late + 1) / 0.05))])
    with pytest.raises(oracle.OracleFailure) as e:
        stalls.bounded_unless_stalled(_Recorder(), quiet, "requests.abort_time", 0.0, late, "MRV1-eager", "abort")
    assert e.value.oracle_id == "requests.abort_time"
