"""noise_floor on a fake bazel-testlogs: the extremes come from the GPU cells' oracle readings only
(plain and zipped outputs), never from the fake tier or the mutants, per per_cell key."""
import json
import zipfile

from tests.sleep_wake.lib import noise_floor


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
    _result(logs, "tests/sleep_wake/latency_mrv1_eager", [_reading("MRV1-eager", 0.03),
                                                          {"key": "sleep_s", "value": 9.0}])  # no oracle
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
    _result(logs, "tests/sleep_wake/physical_memory_mrv1_eager", [
        _reading("MRV1-eager", 0.99, low), _reading("MRV1-eager", 0.97, low), _reading("MRV1-eager", 300, residue)])
    _result(logs, "tests/sleep_wake/physical_memory_mrv1_graph", [_reading("MRV1-graph", 900, residue)])
    found = noise_floor.extremes(noise_floor.readings([str(logs)]))
    assert found[(low, None)][:2] == (0.97, 2)
    assert found[(residue, None)][:2] == (300, 1) and found[(residue, "graph")][:2] == (900, 1)


def test_no_readings_is_an_error(tmp_path, capsys):
    assert noise_floor.main(["noise_floor", str(tmp_path)]) == 1
    assert "no oracle readings" in capsys.readouterr().err
