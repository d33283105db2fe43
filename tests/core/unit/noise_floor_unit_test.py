"""noise_floor on a fake bazel-testlogs: the extremes come from the GPU cells' oracle readings only
(plain and zipped outputs), never from the fake tier or the mutants, per per_cell key."""

import json
import os
import zipfile

from tests.core import noise_floor, thresholds


def _reading(cell, value, key="sleep_s_max"):
    return {"key": key, "value": value, "cell": cell, "oracle": "latency.sleep", "ok": value <= 0.4}


def _result(root, target, entries, zipped=False):
    d = root / target
    (d / "test.outputs").mkdir(parents=True)
    (d / "test.xml").write_text("<testsuites/>")
    text = "".join(json.dumps(e) + "\n" for e in entries)
    if zipped:
        with zipfile.ZipFile(d / "test.outputs" / "outputs.zip", "w") as z:
            z.writestr("measurements.jsonl", text)
    else:
        (d / "test.outputs" / "measurements.jsonl").write_text(text)


def test_extremes_come_from_the_gpu_cells_only(tmp_path, capsys):
    logs = tmp_path / "bazel-testlogs"
    _result(
        logs, "tests/sleep_wake/latency_mrv1_eager", [_reading("MRV1-eager", 0.03), {"key": "sleep_s", "value": 9.0}]
    )  # no oracle
    _result(logs, "tests/sleep_wake/latency_mrv2_graph/shard_1_of_2", [_reading("MRV2-graph", 0.07)], zipped=True)
    _result(logs, "tests/sleep_wake/latency_fake_mrv1_eager", [_reading("MRV1-eager", 5.0)])
    _result(logs, "tests/mutants/mutant_slow_sleep", [_reading("MRV2-eager", 0.6)])
    found = noise_floor.extremes(noise_floor.readings([str(logs)]))
    assert found == {("sleep_s_max", None): (0.07, 2, {"MRV1-eager", "MRV2-graph"})}
    assert noise_floor.main(["noise_floor", str(logs)]) == 0
    assert "sleep_s_max: bound <= 0.4, healthy extreme 0.07 (5.71x), 2 readings in 2 cells" in capsys.readouterr().out


def test_a_lower_bound_takes_the_smallest_and_per_cell_keys_apart(tmp_path):
    logs = tmp_path / "bazel-testlogs"
    low, residue = "sleep_freed_kv_fraction_min", "level1_residue_bytes_max"  # residue: per_cell "graph"
    _result(
        logs,
        "tests/sleep_wake/physical_memory_mrv1_eager",
        [_reading("MRV1-eager", 0.99, low), _reading("MRV1-eager", 0.97, low), _reading("MRV1-eager", 300, residue)],
    )
    _result(logs, "tests/sleep_wake/physical_memory_mrv1_graph", [_reading("MRV1-graph", 900, residue)])
    found = noise_floor.extremes(noise_floor.readings([str(logs)]))
    assert found[(low, None)][:2] == (0.97, 2)
    assert found[(residue, None)][:2] == (300, 1) and found[(residue, "graph")][:2] == (900, 1)


def test_no_readings_is_an_error(tmp_path, capsys):
    assert noise_floor.main(["noise_floor", str(tmp_path)]) == 1
    assert "no oracle readings" in capsys.readouterr().err


IDENTITY = (
    "python: 3.12.3 /usr/bin/python3\nvllm: 0.26.0 record-sha256=ab\ntorch: 2.9.0 record-sha256=cd\n"
    "gpus: 0, NVIDIA H200, 570.133.20, 143771 MiB; 1, NVIDIA H200, 570.133.20, 143771 MiB"
)
START = {
    "key": "server_start_s",
    "value": 6.0,
    "cell": "MRV1-eager",
    "vllm_identity": IDENTITY,
    "time": 1796000300.0,
}  # 2026-11-30 UTC


def _data(tmp_path):
    """A noise file with the record of sleep_s_max (an upper bound), of sleep_freed_kv_fraction_min (a lower
    one) and of abort_s_max (a contract bound's) as the checkout's look."""
    run = {"date": "2026-11-29", "gpus": "1 x H200", "release": "0.26.0", "what": "before"}
    record = {"cells": "every cell", "history": [], "n": 12, "per_cell": {}, "run": "old-1", "runs": ["old-1"]}
    data = {
        "records": {
            "sleep_s_max": {**record, "value": 0.254},
            "sleep_freed_kv_fraction_min": {**record, "n": None, "value": 1.048},
            "abort_s_max": {**record, "history": [{"runs": ["old-1"], "text": "kept"}], "n": 240, "value": 0.043},
        },
        "runs": {"old-1": run},
    }
    path = tmp_path / "noise.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _merge(tmp_path, logs, *extra, run="new-1"):
    return noise_floor.main(
        [
            "noise_floor",
            "--merge",
            "--run",
            run,
            "--what",
            "main job",
            "--data",
            str(tmp_path / "noise.json"),
            *extra,
            str(logs),
        ]
    )


def test_merge_records_the_run_and_keeps_the_extreme_over_runs(tmp_path, capsys):
    path = _data(tmp_path)
    logs = tmp_path / "bazel-testlogs"
    _result(
        logs, "tests/sleep_wake/latency_mrv1_eager", [START, _reading("MRV1-eager", 0.03), _reading("MRV1-eager", 0.07)]
    )
    _result(
        logs,
        "tests/sleep_wake/physical_memory_mrv2_graph",
        [
            _reading("MRV2-graph", 0.99, "sleep_freed_kv_fraction_min"),  # under the record's 1.048: a new extreme
            _reading("MRV2-graph", 2e-3, "abort_s_max"),  # a contract bound with a record: under its extreme
            _reading("MRV2-graph", 0.5, "request_completion_s_max"),  # a contract bound without one
        ],
    )
    assert _merge(tmp_path, logs) == 0
    data = json.loads(path.read_text())
    assert path.read_text() == json.dumps(data, indent=2, sort_keys=True) + "\n"
    sleep = data["records"]["sleep_s_max"]
    assert (sleep["value"], sleep["run"], sleep["runs"], sleep["n"]) == (0.254, "old-1", ["old-1", "new-1"], 14)
    assert sleep["history"] == [{"runs": ["new-1"], "text": "this run's extreme 0.07 over 2 readings in 1 cell"}]
    freed = data["records"]["sleep_freed_kv_fraction_min"]
    assert (freed["value"], freed["run"], freed["runs"], freed["n"]) == (0.99, "new-1", ["old-1", "new-1"], None)
    abort = data["records"]["abort_s_max"]
    assert (abort["value"], abort["run"], abort["runs"], abort["n"]) == (0.043, "old-1", ["old-1", "new-1"], 241)
    assert abort["history"] == [
        {"runs": ["old-1"], "text": "kept"},
        {"runs": ["new-1"], "text": "this run's extreme 0.002 over 1 reading in 1 cell"},
    ]
    assert "request_completion_s_max" not in data["records"]
    assert data["runs"]["new-1"] == {
        "date": "2026-11-30",
        "gpus": "2 x H200",
        "release": "0.26.0",
        "what": "main job",
    }
    out = capsys.readouterr().out
    assert "sleep_freed_kv_fraction_min: healthy extreme 0.99 (was 1.048)" in out
    assert "the bound >= 0.95" not in out  # 0.99 still passes it
    assert "abort_s_max" not in out  # recorded, its extreme unmoved
    assert "request_completion_s_max: not recorded (contract bound without a noise record)" in out
    assert "bounds_doc > docs/thresholds.md" in out


def test_merge_moves_a_contract_bounds_extreme_and_fills_a_record_of_history_only(tmp_path, capsys):
    """A contract bound's record is merged as a mechanism bound's: a later run that measures more than its
    extreme moves it (so its factor, which decides whether the bound needs a mutant, stays honest), and a
    record of history only gains its first extreme."""
    path = _data(tmp_path)
    data = json.loads(path.read_text())
    data["records"]["logprob_drift_max"] = {"history": [{"runs": ["old-1"], "text": "drift 0 after level 1"}]}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    logs = tmp_path / "bazel-testlogs"
    _result(
        logs,
        "tests/sleep_wake/abort_parallel_sampling_mrv1_eager",
        [START, _reading("MRV1-eager", 0.05, "abort_s_max"), _reading("MRV1-eager", 2e-4, "logprob_drift_max")],
    )
    assert _merge(tmp_path, logs) == 0
    records = json.loads(path.read_text())["records"]
    abort, drift = records["abort_s_max"], records["logprob_drift_max"]
    assert (abort["value"], abort["run"], abort["runs"]) == (0.05, "new-1", ["old-1", "new-1"])
    assert (drift["value"], drift["run"], drift["runs"], drift["n"]) == (2e-4, "new-1", ["new-1"], 1)
    assert drift["history"][0] == {"runs": ["old-1"], "text": "drift 0 after level 1"}
    out = capsys.readouterr().out
    assert "abort_s_max: healthy extreme 0.05 (was 0.043)" in out
    assert "logprob_drift_max: healthy extreme 0.0002 (was none)" in out


def test_merge_names_the_run_of_a_new_extreme_per_cell_key(tmp_path, capsys):
    path = _data(tmp_path)
    logs = tmp_path / "bazel-testlogs"
    residue = "level1_residue_bytes_max"  # per_cell "graph"
    _result(
        logs,
        "tests/sleep_wake/physical_memory_mrv1_graph",
        [START, _reading("MRV1-graph", 900, residue), _reading("MRV1-eager", 300, residue)],
    )
    assert _merge(tmp_path, logs) == 0
    record = json.loads(path.read_text())["records"][residue]
    assert (record["value"], record["run"], record["per_cell"]) == (
        300,
        "new-1",
        {"graph": {"run": "new-1", "value": 900}},
    )
    assert (record["runs"], record["n"], record["cells"]) == (["new-1"], 2, "2 cells")
    assert record["history"][-1]["text"] == (
        "this run's extreme 300 over 1 reading in 1 cell; graph: 900 over 1 reading in 1 cell"
    )


def test_merge_warns_when_a_bound_fails_a_healthy_extreme(tmp_path, capsys):
    _data(tmp_path)
    logs = tmp_path / "bazel-testlogs"
    _result(logs, "tests/sleep_wake/latency_mrv1_eager", [START, _reading("MRV1-eager", 0.5)])
    assert _merge(tmp_path, logs) == 0
    assert "sleep_s_max: the bound <= 0.4 fails this healthy extreme" in capsys.readouterr().out


def test_merge_refuses_what_it_cannot_record(tmp_path, capsys):
    path = _data(tmp_path)
    before = path.read_text()
    logs = tmp_path / "bazel-testlogs"
    _result(logs, "tests/sleep_wake/latency_mrv1_eager", [_reading("MRV1-eager", 0.03)])  # no identity, no time
    assert _merge(tmp_path, logs) == 2
    assert "do not say the run's release, gpus, date" in capsys.readouterr().err
    assert (
        _merge(
            tmp_path,
            logs,
            "--release",
            "0.26.0",
            "--gpus",
            "1 x H200",
            "--date",
            "2026-12-03",
            run="old-1",
        )
        == 2
    )
    assert "run 'old-1' is already in the noise records (before)" in capsys.readouterr().err
    assert noise_floor.main(["noise_floor", "--merge", "--run", "x", "--data", str(path), str(logs)]) == 2
    assert "--merge needs --what: the run's id and what ran" in capsys.readouterr().err
    other = IDENTITY.replace("0.26.0", "0.25.0")
    _result(logs, "tests/sleep_wake/latency_mrv2_graph", [{**START, "vllm_identity": other}])
    _result(logs, "tests/sleep_wake/latency_mrv1_graph", [START])
    assert _merge(tmp_path, logs) == 2
    assert "servers of vLLM 0.25.0, 0.26.0" in capsys.readouterr().err
    assert path.read_text() == before


FIXTURE_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "noise_run")


def test_merge_of_a_run_changes_only_its_records(tmp_path, capsys):
    """The committed fixture run (three GPU cells, every extreme inside the checkout's records) merged into
    a copy of the checkout's noise.json: the records it read gain the run, nothing else moves."""
    checkout = json.loads(open(thresholds.NOISE_FILE, encoding="utf-8").read())
    path = tmp_path / "noise.json"
    path.write_text(json.dumps(checkout, indent=2, sort_keys=True) + "\n")
    assert (
        noise_floor.main(
            [
                "noise_floor",
                "--merge",
                "--run",
                "fixture",
                "--what",
                "w",
                "--data",
                str(path),
                FIXTURE_RUN,
            ]
        )
        == 0
    )
    merged = json.loads(path.read_text())
    read = {"sleep_s_max", "wake_s_max", "cycle_s_max", "level1_residue_bytes_max", "sleep_freed_kv_fraction_min"}
    assert merged["runs"]["fixture"] == {
        "date": "2026-12-03",
        "gpus": "1 x H200",
        "release": "0.26.0",
        "what": "w",
    }
    for name, record in merged["records"].items():
        before = checkout["records"][name]
        if name not in read:
            assert record == before, name
            continue
        assert record["runs"] == before["runs"] + ["fixture"], name
        assert (record["value"], record["run"], record["per_cell"]) == (
            before["value"],
            before["run"],
            before["per_cell"],
        ), name
        assert record["history"][:-1] == before["history"] and record["history"][-1]["runs"] == ["fixture"]
    assert "healthy extreme" not in capsys.readouterr().out  # no extreme moved
