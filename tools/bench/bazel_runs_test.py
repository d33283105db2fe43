"""Bazel's elapsed time and test summary from its output; the starts the cells recorded."""

import json
import zipfile

from tools.bench import bazel_runs

OUTPUT = """INFO: Analyzed 44 targets (0 packages loaded, 0 targets configured).
INFO: Found 44 test targets...
INFO: Elapsed time: 2.114s, Critical Path: 0.01s
//tests/sleep_wake:flags_mrv1_eager                                      PASSED in 23.1s
//tests/sleep_wake:flags_mrv2_graph                             (cached) PASSED in 31.0s
//tests/sleep_wake:latency_mrv1_eager                                    FAILED in 2 out of 2 in 12.0s
//tests/sleep_wake:latency_mrv2_eager                                   TIMEOUT in 900.1s
//tests/sleep_wake:error_paths_mrv1_eager                              NO STATUS
INFO: Elapsed time: 149.314s, Critical Path: 140.20s
"""


def test_the_host_cpu_share_is_read_from_run_matrix_sh():
    line = "run_matrix.sh: host CPUs busy 63% of 16 during bazel test\n"
    assert bazel_runs.host_cpu_busy(OUTPUT + line) == {"share": 0.63, "cpus": 16}
    assert bazel_runs.host_cpu_busy(OUTPUT) is None


def test_elapsed_is_the_last_commands():
    assert bazel_runs.elapsed_s(OUTPUT) == 149.314
    assert bazel_runs.elapsed_s("no bazel here") is None


def test_run_matrix_waves_count_together():
    """Two waves, one after the other: their times and their critical paths add up."""
    waves = OUTPUT + ("INFO: Elapsed time: 120.500s, Critical Path: 110.00s\n"
                      "run_matrix.sh: bazel test took 271.3 s in 2 waves (150.1 121.2 s)\n")
    assert bazel_runs.elapsed_s(waves) == 271.3
    assert bazel_runs.critical_path_s(waves) == 250.2
    assert bazel_runs.critical_path_s(OUTPUT) == 140.2


def test_target_results():
    results = bazel_runs.target_results(OUTPUT)
    assert results["//tests/sleep_wake:flags_mrv1_eager"] == {"status": "PASSED", "cached": False, "seconds": 23.1}
    assert results["//tests/sleep_wake:flags_mrv2_graph"]["cached"] is True
    assert results["//tests/sleep_wake:latency_mrv1_eager"] == {"status": "FAILED", "cached": False, "seconds": 12.0}
    assert results["//tests/sleep_wake:latency_mrv2_eager"]["status"] == "TIMEOUT"
    assert results["//tests/sleep_wake:error_paths_mrv1_eager"] == {"status": "NO STATUS", "cached": False,
                                                                    "seconds": None}


def _measurements(*entries):
    return "".join(json.dumps(e) + "\n" for e in entries)


def _timing(mode, **phases):
    return dict({"key": "server_timings", "start_mode": mode, "lease_wait_s": 0.0, "start_s": 0.0,
                 "memory_phase_wait_s": 0.0, "memory_phases": 0, "stop_s": 0.0}, **phases)


def test_recorded_timings_from_plain_and_zipped_outputs(tmp_path):
    plain = tmp_path / "flags_mrv1_eager" / "test.outputs"
    plain.mkdir(parents=True)
    (plain / "measurements.jsonl").write_text(_measurements(
        _timing("zygote", start_s=6.5, lease_wait_s=2.0), {"key": "server_start_s", "value": 8.5}))
    zipped = tmp_path / "latency_mrv2_graph" / "test.outputs"
    zipped.mkdir(parents=True)
    with zipfile.ZipFile(zipped / "outputs.zip", "w") as z:
        z.writestr("measurements.jsonl", _measurements(_timing("plain", start_s=9.0)))
    timings = bazel_runs.recorded_timings(str(tmp_path))
    assert [(t["cell"], t["start_mode"], t["start_s"], t["lease_wait_s"]) for t in timings] == [
        ("flags_mrv1_eager", "zygote", 6.5, 2.0), ("latency_mrv2_graph", "plain", 9.0, 0.0)]
    assert bazel_runs.summarise(t["start_s"] for t in timings) == {"count": 2, "median_s": 7.75, "min_s": 6.5,
                                                                   "max_s": 9.0}
    assert bazel_runs.summarise([]) == {"count": 0}
    assert bazel_runs.recorded_timings(str(tmp_path / "missing")) == []


def test_critical_path_is_the_last_commands():
    assert bazel_runs.critical_path_s(OUTPUT) == 140.20
    assert bazel_runs.critical_path_s("no bazel here") is None


def test_cell_breakdown_splits_gpu_cells_and_leaves_out_the_fakes():
    timings = [
        dict(_timing("zygote", lease_wait_s=10.0, start_s=6.0, memory_phase_wait_s=4.0, stop_s=1.0), cell="a_mrv1_eager"),
        dict(_timing("zygote", start_s=7.0, stop_s=1.0), cell="a_mrv1_eager"),  # a second server of cell a
        dict(_timing("plain", start_s=15.0, memory_phase_wait_s=20.0, stop_s=2.0), cell="b_mrv2_graph"),
        dict(_timing("fake", start_s=0.1), cell="a_fake_mrv1_eager"),
    ]
    results = {"//tests/sleep_wake:a_mrv1_eager": {"seconds": 40.0}, "//tests/sleep_wake:b_mrv2_graph": {"seconds": 60.0},
               "//tests/sleep_wake:a_fake_mrv1_eager": {"seconds": 3.0}}
    breakdown = bazel_runs.cell_breakdown(timings, results, "//tests/sleep_wake", elapsed_s=50.0)
    assert breakdown["cells"] == 2 and breakdown["cell_seconds"] == 100.0 and breakdown["mean_cells_in_flight"] == 2.0
    phases = {p["key"]: p for p in breakdown["phases"]}
    assert phases["lease_wait_s"]["cell_seconds"] == 10.0
    assert phases["start_s"]["cell_seconds"] == 28.0 and phases["start_s"]["median_cell_s"] == 14.0
    assert phases["memory_phase_wait_s"]["share"] == 0.24
    # cell a: 40 - (10 + 13 + 4 + 2) = 11; cell b: 60 - (15 + 20 + 2) = 23
    assert phases["rest_s"]["cell_seconds"] == 34.0
    assert sum(p["share"] for p in breakdown["phases"]) == 1.0
    assert bazel_runs.cell_breakdown(timings[3:], results, "//tests/sleep_wake", 50.0) == {"cells": 0}


def test_matrix_measures_take_the_longest_gpu_cell_and_the_wait_share():
    results = bazel_runs.target_results("//tests/sleep_wake:flags_mrv1_eager          PASSED in 23.1s\n"
                                        "//tests/sleep_wake:state_walk_mrv2_eager    PASSED in 252.0s\n"
                                        "//tests/sleep_wake:flags_fake_mrv1_eager     PASSED in 400.0s\n"
                                        "//tests/sleep_wake/unit:cells_unit_test      PASSED in 500.0s\n")
    timings = [dict(cell="flags_mrv1_eager", start_mode="zygote", start_s=10.0),
               dict(cell="flags_mrv2_graph", start_mode="zygote", start_s=12.0),
               dict(cell="flags_fake_mrv1_eager", start_mode=bazel_runs.FAKE_START_MODE, start_s=0.1)]
    breakdown = {"phases": [{"key": "start_s", "share": 0.4}, {"key": "memory_phase_wait_s", "share": 0.33}]}
    got = bazel_runs.matrix_measures(results, timings, breakdown, 444.9, "//tests/sleep_wake")
    # The sharded walk cell counts (its shards record their timings below it); fake and unit targets do not.
    assert got == {"matrix_elapsed_s": 444.9, "matrix_start_median_s": 11.0, "longest_cell_s": 252.0,
                   "wait_share": 0.33}
