import json

import pytest

from tools.bench import run_record
from tools.results import walk_gate
from tools.results.unit.testlogs_testing import write_bep, write_xml


def _unit(cell, start_s, launches=1):
    timing = {
        "start_mode": "zygote",
        "launches": launches,
        "start_s": start_s,
        "lease_wait_s": 0.0,
        "memory_phase_wait_s": 1.0,
        "stop_s": 0.5,
    }
    return {"unit": cell, "cell": cell, "seconds": 20.0, "timings": [timing]}


def test_the_record_counts_starts_from_the_cells_timings_and_says_fresh_or_warm():
    units = [_unit("flags_mrv1_eager", 6.0), _unit("flags_mrv2_eager", 8.0)]
    r = run_record.record(units, gpus=1, cores=16, rc=0, machine_state="fresh", waves_s=[30.0, 12.5])
    m = r["matrix"]
    assert (m["status"], m["elapsed_s"], m["server_starts"], m["machine_state"]) == ("green", 42.5, 2, "fresh")
    assert m["launch_to_health_s"]["median_s"] == 7.0 and r["machine"] == {
        "gpus": 1,
        "cores": 16,
        "cpu": None,
        "identity": None,
    }
    assert m["walk_shards"] is None  # no walk shard ran: none counted, not zero
    # A cell that took over a server another cell gave back (tools/launcher/parking.py) started none.
    taken = run_record.record(
        units + [_unit("weight_sync_mrv1_eager", 0.0, 0)], gpus=1, cores=16, rc=0, machine_state="warm", waves_s=[30.0]
    )["matrix"]
    assert (taken["server_starts"], taken["servers_taken_over"], taken["launch_to_health_s"]["median_s"]) == (2, 1, 7.0)
    assert (
        run_record.record(units, gpus=1, cores=16, rc=3, machine_state="warm", waves_s=[])["matrix"]["status"] == "red"
    )
    # Every test passed, but a walk cell did not walk its whole door (run_matrix.sh's exit 5): never green.
    partial = run_record.record(units, gpus=1, cores=16, rc=walk_gate.PARTIAL_EXIT, machine_state="warm", waves_s=[])
    assert partial["matrix"]["status"] == "partial"


def test_the_record_counts_the_walk_shards_that_ran_against_the_bound():
    shards = [dict(_unit("state_walk_mrv1_eager", 6.0), unit=f"state_walk_mrv1_eager/shard_{i}_of_2") for i in (0, 1)]
    shards[1]["seconds"] = 75.0
    m = run_record.record(shards, gpus=1, cores=16, rc=0, machine_state="fresh", waves_s=[80.0])["matrix"]
    walk = m["walk_shards"]
    assert (walk["shards"], walk["longest_s"], walk["over_bound"]) == (2, 75.0, 1)
    assert m["walk_cpu_per_step"] is None  # the shards recorded no steps nor their CPU: not measured, not zero
    for shard in shards:
        shard.update(test_cpu={"cpu_s": 1.0, "children_cpu_s": 0.5}, walk_steps=[(1.0, "wake:-")] * 10)
        shard["timings"][0]["serve_cpu_s"] = 2.0
    per_step = run_record.record(shards, gpus=1, cores=16, rc=0, machine_state="fresh", waves_s=[80.0])["matrix"][
        "walk_cpu_per_step"
    ]
    assert (per_step["servers_ms"], per_step["tests_ms"], per_step["children_ms"]) == (200.0, 100.0, 50.0)


def test_the_record_judges_walk_shards_on_bazels_clock_from_the_build_events(tmp_path):
    """A shard within the bound by pytest's suite time but over it by Bazel's attempt time is over; the
    record says which clock, and without build events says pytest's."""
    logs = tmp_path / "logs"
    timing = {"key": "server_timings", "start_mode": "zygote", "start_s": 12.0, "lease_wait_s": 0.0}
    timing.update(memory_phase_wait_s=0.0, memory_phases=0, stop_s=0.0)
    results, attempt_s = [], {}
    for shard, bazel_s in ((1, 60.534), (2, 41.2)):
        unit = logs / "state_walk_mrv1_graph" / f"shard_{shard}_of_2"
        (unit / "test.outputs").mkdir(parents=True)
        (unit / "test.xml").write_text(
            '<testsuites><testsuite name="x" time="59.7"><testcase name="t" time="1"/></testsuite></testsuites>'
        )
        (unit / "test.outputs" / "measurements.jsonl").write_text(json.dumps(timing) + "\n")
        results.append(("//tests/sleep_wake:state_walk_mrv1_graph", str(unit / "test.xml"), "PASSED", shard))
        attempt_s[str(unit / "test.xml")] = bazel_s
    write_bep(tmp_path / "bep.json", results, attempt_s=attempt_s)
    out = tmp_path / "run.json"
    args = [str(logs), "--out", str(out), "--gpus", "1", "--cores", "16", "--rc", "0", "--machine_state", "fresh"]
    assert run_record.main(args + ["--bep", str(tmp_path / "bep.json")]) == 0
    walk = json.loads(out.read_text())["matrix"]["walk_shards"]
    assert (walk["clock"], walk["longest_s"], walk["over_bound"]) == ("bazel", 60.5, 1)
    assert run_record.main(args) == 0
    walk = json.loads(out.read_text())["matrix"]["walk_shards"]
    assert (walk["clock"], walk["longest_s"], walk["over_bound"]) == ("pytest", 59.7, 0)


def test_a_machine_state_other_than_fresh_or_warm_is_refused():
    with pytest.raises(ValueError, match="say one of fresh, warm"):
        run_record.record([], gpus=1, cores=16, rc=0, machine_state="cold", waves_s=[])


def test_a_run_without_matrix_cells_counts_no_starts_rather_than_zero():
    # The mutants' targets start servers in their inner runs, which no cell timing records.
    m = run_record.record([], gpus=1, cores=16, rc=0, machine_state="warm", waves_s=[113.1])["matrix"]
    assert m["server_starts"] is None and "no GPU cell" in m["not_counted"]


def test_cells_by_door_counts_the_cells_this_run_ran_never_the_spec(tmp_path):
    """Each door's cells as their results say (shards of one cell are one cell), only those the build
    events name: an earlier run's door cell, the fake tier's door target and the cells the spec makes
    but this run did not run are no part of it."""
    ran = {
        "flags_mrv1_eager": {"t": "passed"},
        "flags_mrv2_graph": {"t": "passed", "u": "failed"},
        "scheduler_gate_mrv1_graph": {"t": "skipped"},  # ran no case: neither passed nor failed
        "state_walk_mrv1_eager/shard_1_of_2": {"t": "passed"},
        "state_walk_mrv1_eager/shard_2_of_2": {"t": "failed"},
        "flags_async_llm_mrv2_graph": {"t": "passed"},
        "weight_sync_llm_mrv2_graph": {"t": "failed"},
        "flags_fake_mrv2_graph_llm": {"t": "passed"},
    }
    results = [
        (
            f"//tests/sleep_wake:{unit.split('/')[0]}",
            write_xml(tmp_path / "logs" / unit / "test.xml", cases),
            "PASSED",
            i,
        )
        for i, (unit, cases) in enumerate(ran.items())  # a shard number each: Bazel's events tell shards apart
    ]
    write_xml(tmp_path / "logs" / "latency_async_llm_mrv2_graph" / "test.xml", {"t": "passed"})  # an earlier run's
    unit_test = write_xml(tmp_path / "logs" / "unit" / "oracle_unit_test" / "test.xml", {"a": "passed", "b": "passed"})
    results.append(("//tests/sleep_wake/unit:oracle_unit_test", unit_test, "PASSED", 0))
    write_bep(tmp_path / "bep.json", results)
    out = tmp_path / "run.json"
    argv = [str(tmp_path / "logs"), "--out", str(out), "--gpus", "1", "--cores", "16", "--rc", "3"]
    assert run_record.main(argv + ["--machine_state", "warm", "--bep", str(tmp_path / "bep.json")]) == 0
    assert json.loads(out.read_text())["matrix"]["cells_by_door"] == {
        "http": {"cells": 4, "passed": 1, "failed": 2},
        "async_llm": {"cells": 1, "passed": 1, "failed": 0},
        "llm": {"cells": 1, "passed": 0, "failed": 1},
    }
    # The cases of every result the build events name, the unit test's too (what ran_tests counts); not the
    # earlier run's cell.
    assert json.loads(out.read_text())["matrix"]["cases"] == {"passed": 7, "failed": 3, "skipped": 1}
    nothing = run_record.record([], gpus=1, cores=16, rc=0, machine_state="warm", waves_s=[])
    assert nothing["matrix"]["cells_by_door"] == {} and nothing["matrix"]["cases"] is None


IDENTITY = """python: 3.12.3 /tmp/gpu-py
vllm: 0.25.0 record-sha256=5f1c
torch: 2.11.0+cu130 record-sha256=9a0b
transformers: not installed
gpus: 0, NVIDIA H200, 580.159.04, 143771 MiB
fingerprint: vllm-0.25.0+5f1c
"""


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R)  Platinum 8480+
flags\t\t: fpu vme

processor\t: 1
model name\t: Intel(R) Xeon(R)  Platinum 8480+
"""


def test_the_cpus_model_is_cpuinfos_first_model_name():
    assert run_record.cpu_model(CPUINFO) == "Intel(R) Xeon(R) Platinum 8480+"
    assert run_record.cpu_model("processor\t: 0\nmodel name\t:\n") is None  # named empty: not a model
    assert run_record.cpu_model("") is None


def test_the_record_names_what_the_cells_ran_from_the_identity_beside_the_test_logs(tmp_path):
    """bazel-testlogs resolves into <output base>/execroot/<workspace>/bazel-out/<config>/testlogs; the
    identity @sleepwake_gpu wrote is in <output base>/external/sleepwake_gpu (tools/report/reading.py)."""
    identity = tmp_path / "external" / "sleepwake_gpu" / "identity.txt"
    identity.parent.mkdir(parents=True)
    identity.write_text(IDENTITY)
    logs = tmp_path / "execroot" / "sleepwake" / "bazel-out" / "k8-fastbuild" / "testlogs" / "tests" / "sleep_wake"
    cell = logs / "flags_mrv1_eager"
    (cell / "test.outputs").mkdir(parents=True)
    (cell / "test.xml").write_text(
        '<testsuites><testsuite name="x" time="20"><testcase name="t" time="1"/></testsuite></testsuites>'
    )
    timing = {"key": "server_timings", "start_mode": "zygote", "start_s": 6.0, "lease_wait_s": 0.0}
    timing.update(memory_phase_wait_s=0.0, memory_phases=0, stop_s=0.0)
    (cell / "test.outputs" / "measurements.jsonl").write_text(json.dumps(timing) + "\n")
    out = tmp_path / "run.json"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    args = [str(logs), "--out", str(out), "--gpus", "1", "--cores", "16", "--rc", "0", "--machine_state", "warm"]
    assert run_record.main(args + ["--cpuinfo", str(cpuinfo)]) == 0
    machine = json.loads(out.read_text())["machine"]
    assert machine["cpu"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert machine["identity"]["vllm"] == "0.25.0 record-sha256=5f1c"
    assert machine["identity"]["gpus"] == "0, NVIDIA H200, 580.159.04, 143771 MiB"
    assert machine["identity"]["transformers"] == "not installed"
    assert run_record.main(args + ["--cpuinfo", str(tmp_path / "absent")]) == 0
    assert json.loads(out.read_text())["machine"]["cpu"] is None  # not readable: not recorded, never guessed
    # No GPU cell of this run ran: the file may be an earlier run's release, so the record names none.
    (cell / "test.outputs" / "measurements.jsonl").write_text("")
    assert run_record.main(args) == 0
    assert json.loads(out.read_text())["machine"]["identity"] is None


def _cell(logs, unit, seconds, lease_wait_s=0.0, memory_phase_wait_s=0.0):
    d = logs / unit
    (d / "test.outputs").mkdir(parents=True)
    (d / "test.xml").write_text(
        f'<testsuites><testsuite name="x" time="{seconds}"><testcase name="t" time="1"/></testsuite></testsuites>'
    )
    timing = {"key": "server_timings", "start_mode": "zygote", "start_s": 6.0, "lease_wait_s": lease_wait_s}
    timing.update(memory_phase_wait_s=memory_phase_wait_s, stop_s=0.5)
    (d / "test.outputs" / "measurements.jsonl").write_text(json.dumps(timing) + "\n")
    return str(d / "test.xml")


def test_the_record_keeps_each_units_seconds_waits_and_start_for_the_replay(tmp_path):
    """Each wave's units from its build events (Bazel's seconds of the attempt, less a GPU unit's wait for a
    slot; its memory-phase waits; its start after its bazel test's), the CPU-only targets' own bazel test
    apart, the host's CPU and the lock's holds: what tools/bench/replay.py reads back."""
    from tools.bench import replay

    logs = tmp_path / "logs"
    walk = _cell(logs, "state_walk_mrv1_eager/shard_1_of_1", 40.0, memory_phase_wait_s=9.0)
    flags = _cell(logs, "flags_mrv1_eager", 30.0, lease_wait_s=4.0, memory_phase_wait_s=3.0)
    fake = write_xml(tmp_path / "cpu" / "tests" / "sleep_wake" / "flags_fake_mrv1_eager" / "test.xml", {"t": "passed"})
    gpu_tags = ["gpu", "flags"]
    write_bep(
        tmp_path / "walk.json",
        [("//tests/sleep_wake:state_walk_mrv1_eager", walk, "PASSED")],
        attempt_s={walk: 41.0},
        tags={"//tests/sleep_wake:state_walk_mrv1_eager": ["gpu", "gpu_state_walk"]},
        span=(1000.0, 1050.0),
        attempt_began={walk: 1003.0},
    )
    write_bep(
        tmp_path / "rest.json",
        [("//tests/sleep_wake:flags_mrv1_eager", flags, "PASSED")],
        attempt_s={flags: 31.0},
        tags={"//tests/sleep_wake:flags_mrv1_eager": gpu_tags},
        span=(1050.0, 1090.0),
        attempt_began={flags: 1052.0},
    )
    write_bep(
        tmp_path / "cpu.json",
        [("//tests/sleep_wake:flags_fake_mrv1_eager", fake, "PASSED")],
        attempt_s={fake: 12.0},
        tags={"//tests/sleep_wake:flags_fake_mrv1_eager": ["fake", "flags"]},
        span=(999.0, 1020.0),
        attempt_began={fake: 1001.0},
    )
    (tmp_path / "host-cpu.txt").write_text("host CPU-s over 90 s on 16 cores: busy 700 (49%); servers 500\n")
    out = tmp_path / "run.json"
    argv = [str(logs), "--out", str(out), "--gpus", "1", "--cores", "16", "--rc", "0", "--machine_state", "warm"]
    argv += ["--wave_s", "50", "--wave_s", "40", "--bep", str(tmp_path / "walk.json"), "--wave_name", "walk"]
    argv += ["--bep", str(tmp_path / "rest.json"), "--wave_name", "rest", "--cpu_bep", str(tmp_path / "cpu.json")]
    argv += ["--at_once", "16", "--at_once", "24"]
    argv += ["--slots_per_gpu", "24", "--host_cpu", str(tmp_path / "host-cpu.txt")]
    assert run_record.main(argv) == 0
    record = json.loads(out.read_text())
    assert record["matrix"]["cpu_only"] == {
        "targets": 1,
        "beside": 1,
        "inside": 0,
        "late_s": -70.0,
        "off_critical_path": True,
    }
    rows = [dict(zip(record["replay"]["fields"], row)) for row in record["replay"]["units"]]
    assert rows == [
        {"unit": "state_walk_mrv1_eager/shard_1_of_1", "wave": "walk", "gpu": 1, "seconds": 41.0, "memory_wait_s": 9.0,
         "began_s": 3.0, "start_s": 6.0, "stop_s": 0.5, "slot_wait_s": 0.0},
        {"unit": "flags_mrv1_eager", "wave": "rest", "gpu": 1, "seconds": 27.0, "memory_wait_s": 3.0, "began_s": 2.0,
         "start_s": 6.0, "stop_s": 0.5, "slot_wait_s": 4.0},
        {"unit": "flags_fake_mrv1_eager", "wave": "cpu", "gpu": 0, "seconds": 12.0, "memory_wait_s": 0.0,
         "began_s": 2.0, "start_s": 0.0, "stop_s": 0.0, "slot_wait_s": 0.0},
    ]  # fmt: skip
    # Leads: each wave's first GPU unit in its slot (the rest's after its 4 s wait for one).
    assert [(w["name"], w["seconds"], w["lead_s"], w["at_once"]) for w in record["replay"]["waves"]] == [
        ("walk", 50.0, 3.0, 16),
        ("rest", 40.0, 6.0, 24),
        ("cpu", 21.0, 0.0, None),
    ]
    run = replay.load(str(out))
    assert (run.layout, run.host_cpu_s, run.slots_per_gpu, len(run.units)) == (replay.CPU_BESIDE, 700.0, 24, 3)
    p = replay.predict(run, replay.Machine(1, 16, 24))
    assert [round(w.seconds, 1) for w in p.waves] == [44.0, 33.0]
    assert p.cpu_lane is not None and p.cpu_lane.seconds == 12.0
    # The record carries its own replay's predictions, 8 GPUs among them, with what bounds each.
    eight = next(x for x in record["predicted"] if x["gpus"] == 8)
    assert (
        eight["cores"] == 128
        and eight["seconds"] > 0
        and eight["bound"]
        and set(eight["floors"])
        == {
            "CPU",
            "longest units",
        }
    )  # no lock trace given: no lock floor
