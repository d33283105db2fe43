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


def test_elapsed_is_the_last_commands():
    assert bazel_runs.elapsed_s(OUTPUT) == 149.314
    assert bazel_runs.elapsed_s("no bazel here") is None


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


def test_recorded_starts_from_plain_and_zipped_outputs(tmp_path):
    plain = tmp_path / "flags_mrv1_eager" / "test.outputs"
    plain.mkdir(parents=True)
    (plain / "measurements.jsonl").write_text(_measurements(
        {"key": "server_start_s", "value": 6.5, "start_mode": "zygote"}, {"key": "sleep_s", "value": 0.1}))
    zipped = tmp_path / "latency_mrv2_graph" / "test.outputs"
    zipped.mkdir(parents=True)
    with zipfile.ZipFile(zipped / "outputs.zip", "w") as z:
        z.writestr("measurements.jsonl", _measurements({"key": "server_start_s", "value": 9.0}))
    starts = bazel_runs.recorded_starts(str(tmp_path))
    assert starts == [{"cell": "flags_mrv1_eager", "seconds": 6.5, "start_mode": "zygote"},
                      {"cell": "latency_mrv2_graph", "seconds": 9.0, "start_mode": None}]
    assert bazel_runs.summarise(s["seconds"] for s in starts) == {"count": 2, "median_s": 7.75, "min_s": 6.5,
                                                                  "max_s": 9.0}
    assert bazel_runs.summarise([]) == {"count": 0}
    assert bazel_runs.recorded_starts(str(tmp_path / "missing")) == []
