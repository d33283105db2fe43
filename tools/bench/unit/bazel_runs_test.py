"""Bazel's elapsed time and test summary from its output; the starts the cells recorded."""

import json
import os
import zipfile

import pytest

from tools.bench import bazel_runs
from tools.report import reading
from tools.results.unit.testlogs_testing import write_bep

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
    waves = OUTPUT + (
        "INFO: Elapsed time: 120.500s, Critical Path: 110.00s\n"
        "run_matrix.sh: bazel test took 271.3 s in 2 waves (150.1 121.2 s)\n"
    )
    assert bazel_runs.elapsed_s(waves) == 271.3
    assert bazel_runs.critical_path_s(waves) == 250.2
    assert bazel_runs.critical_path_s(OUTPUT) == 140.2
    assert bazel_runs.wave_seconds(waves) == [150.1, 121.2] and bazel_runs.wave_seconds(OUTPUT) == []


def test_target_results():
    results = bazel_runs.target_results(OUTPUT)
    assert results["//tests/sleep_wake:flags_mrv1_eager"] == {"status": "PASSED", "cached": False, "seconds": 23.1}
    assert results["//tests/sleep_wake:flags_mrv2_graph"]["cached"] is True
    assert results["//tests/sleep_wake:latency_mrv1_eager"] == {"status": "FAILED", "cached": False, "seconds": 12.0}
    assert results["//tests/sleep_wake:latency_mrv2_eager"]["status"] == "TIMEOUT"
    assert results["//tests/sleep_wake:error_paths_mrv1_eager"] == {
        "status": "NO STATUS",
        "cached": False,
        "seconds": None,
    }


def _measurements(*entries):
    return "".join(json.dumps(e) + "\n" for e in entries)


def _timing(mode, **phases):
    return dict(
        {
            "key": "server_timings",
            "start_mode": mode,
            "lease_wait_s": 0.0,
            "start_s": 0.0,
            "memory_phase_wait_s": 0.0,
            "memory_phases": 0,
            "stop_s": 0.0,
        },
        **phases,
    )


def _unit(root, unit, seconds, *entries, zipped=False):
    """A unit's test logs as Bazel leaves them: test.xml with the suite's time, measurements.jsonl plain
    or in outputs.zip."""
    d = root / unit
    (d / "test.outputs").mkdir(parents=True)
    (d / "test.xml").write_text(
        f'<testsuites><testsuite name="x" time="{seconds}"><testcase name="t" time="1"/></testsuite></testsuites>'
    )
    if zipped:
        with zipfile.ZipFile(d / "test.outputs" / "outputs.zip", "w") as z:
            z.writestr("measurements.jsonl", _measurements(*entries))
    else:
        (d / "test.outputs" / "measurements.jsonl").write_text(_measurements(*entries))


def test_units_and_their_timings_from_plain_and_zipped_outputs_and_shards(tmp_path):
    _unit(
        tmp_path,
        "flags_mrv1_eager",
        20,
        _timing("zygote", start_s=6.5, lease_wait_s=2.0),
        {"key": "server_start_s", "value": 8.5},
    )
    _unit(tmp_path, "latency_mrv2_graph", 30, _timing("plain", start_s=9.0), zipped=True)
    _unit(tmp_path, "state_walk_mrv1_eager/shard_2_of_6", 130, _timing("zygote", start_s=24.0))
    units = bazel_runs.test_units(str(tmp_path))
    timings = [t for u in units for t in u["timings"]]
    assert [(t["cell"], t["start_mode"], t["start_s"], t["lease_wait_s"]) for t in timings] == [
        ("flags_mrv1_eager", "zygote", 6.5, 2.0),
        ("latency_mrv2_graph", "plain", 9.0, 0.0),
        ("state_walk_mrv1_eager", "zygote", 24.0, 0.0),
    ]
    assert [(u["unit"], u["seconds"]) for u in units] == [
        ("flags_mrv1_eager", 20.0),
        ("latency_mrv2_graph", 30.0),
        ("state_walk_mrv1_eager/shard_2_of_6", 130.0),
    ]
    assert bazel_runs.summarise(t["start_s"] for t in timings[:2]) == {
        "count": 2,
        "median_s": 7.75,
        "min_s": 6.5,
        "max_s": 9.0,
    }
    assert bazel_runs.summarise([]) == {"count": 0}
    assert bazel_runs.test_units(str(tmp_path / "missing")) == []


def test_critical_path_is_the_last_commands():
    assert bazel_runs.critical_path_s(OUTPUT) == 140.20
    assert bazel_runs.critical_path_s("no bazel here") is None


def test_cell_breakdown_splits_gpu_units_by_phase_and_class_and_leaves_out_the_fakes(tmp_path):
    _unit(
        tmp_path,
        "a_mrv1_eager",
        40.0,
        _timing("zygote", lease_wait_s=10.0, start_s=6.0, memory_phase_wait_s=4.0, stop_s=1.0),
        _timing("zygote", start_s=7.0, stop_s=1.0),
    )  # a second server of cell a
    _unit(
        tmp_path, "b_mrv2_graph/shard_1_of_2", 35.0, _timing("plain", start_s=7.0, memory_phase_wait_s=10.0, stop_s=1.0)
    )
    _unit(
        tmp_path, "b_mrv2_graph/shard_2_of_2", 25.0, _timing("plain", start_s=8.0, memory_phase_wait_s=10.0, stop_s=1.0)
    )
    _unit(tmp_path, "a_fake_mrv1_eager", 3.0, _timing("fake", start_s=0.1))
    units = bazel_runs.test_units(str(tmp_path))
    breakdown = bazel_runs.cell_breakdown(units, elapsed_s=50.0)
    assert breakdown["cells"] == 3 and breakdown["cell_seconds"] == 100.0 and breakdown["mean_cells_in_flight"] == 2.0
    phases = {p["key"]: p for p in breakdown["phases"]}
    assert phases["lease_wait_s"]["cell_seconds"] == 10.0
    assert phases["start_s"]["cell_seconds"] == 28.0 and phases["start_s"]["median_cell_s"] == 8.0
    assert phases["memory_phase_wait_s"]["share"] == 0.24
    # Of the 90 s the units held their slots (100 less the 10 s a waited for one), the waits are 24 s: 27 %,
    # the record's wait_share; a wait for a slot is no share of a slot's time.
    assert phases["memory_phase_wait_s"]["slot_share"] == 0.267 and phases["lease_wait_s"]["slot_share"] is None
    # a: 40 - (10 + 13 + 4 + 2) = 11; b's shards: 35 - 18 = 17 and 25 - 19 = 6
    assert phases["rest_s"]["cell_seconds"] == 34.0
    assert sum(p["share"] for p in breakdown["phases"]) == 1.0
    assert breakdown["by_class"]["b"] == {
        "units": 2,
        "servers": 2,
        "cell_seconds": 60.0,
        "median_unit_s": 30.0,
        "longest_unit_s": 35.0,
        "lease_wait_s": 0.0,
        "start_s": 15.0,
        "memory_phase_wait_s": 20.0,
        "stop_s": 2.0,
        "rest_s": 23.0,
    }
    assert breakdown["longest_units"][0] == ["a_mrv1_eager", 40.0]
    text = bazel_runs.text(breakdown)
    assert (
        "cell time: 3 GPU units (cells, or shards of one), 100 cell-seconds, 10 s of them waiting for a slot (10%);"
        " of the 90 s in their slots: starts 28 s (31%), memory-phase waits 24 s (27%), stops 4 s (4%), own work"
        " 34 s (38%)"
    ) in text
    assert (
        "  b: 2 units, 60 s = starts 15 (2 servers) + waits 20 + stops 2 + slot waits 0 + own 23;"
        " median 30 s, longest 35 s"
    ) in text
    assert bazel_runs.cell_breakdown(units[:1], 50.0) == {"cells": 0}  # the fake cell only


def test_a_door_cell_is_read_as_its_class_and_its_door(tmp_path):
    """<class>_<door>_<runner>_<mode>: the class is the same as over HTTP, not <class>_<door>; the fake
    tier's door targets (<class>_fake_<runner>_<mode>_<door>) are no cell."""
    assert [bazel_runs.class_of(c) for c in ("flags_async_llm_mrv2_graph", "weight_sync_llm_mrv2_graph")] == [
        "flags",
        "weight_sync",
    ]
    doors = [
        "flags_mrv1_eager",
        "flags_async_llm_mrv2_graph",
        "weight_sync_llm_mrv2_graph",
        "flags_fake_mrv2_graph_llm",
    ]
    assert [bazel_runs.door_of(c) for c in doors] == ["http", "async_llm", "llm", None]
    _unit(tmp_path, "flags_mrv1_eager", 20.0, _timing("zygote", start_s=6.0))
    _unit(tmp_path, "flags_async_llm_mrv2_graph", 30.0, _timing("zygote", start_s=9.0))
    units = bazel_runs.test_units(str(tmp_path))
    assert [u["outcomes"] for u in units] == [{"passed": 1}, {"passed": 1}]
    breakdown = bazel_runs.cell_breakdown(units, elapsed_s=None)
    assert list(breakdown["by_class"]) == ["flags"] and breakdown["by_class"]["flags"]["units"] == 2
    assert bazel_runs.matrix_measures(units, None)["longest_cell_s"] == 30.0  # a cell of a class of the spec


def test_matrix_measures_take_the_longest_gpu_unit_and_the_wait_share_of_the_time_in_a_slot(tmp_path):
    _unit(tmp_path, "flags_mrv1_eager", 23.1, _timing("zygote", start_s=10.0, memory_phase_wait_s=5.0, sleep_asserts=1))
    # 90 s waiting for a slot before it ran: its time is the 41 s it held one.
    _unit(tmp_path, "flags_mrv2_graph", 131.0, _timing("zygote", start_s=12.0, lease_wait_s=90.0, sleep_asserts=0))
    _unit(
        tmp_path, "state_walk_mrv2_eager/shard_2_of_6", 134.0, _timing("zygote", start_s=24.0, memory_phase_wait_s=34.7)
    )
    _unit(tmp_path, "flags_fake_mrv1_eager", 400.0, _timing(bazel_runs.FAKE_START_MODE, start_s=0.1))
    _unit(tmp_path, "cells_unit_test", 500.0)
    got = bazel_runs.matrix_measures(bazel_runs.test_units(str(tmp_path)), 283.1)
    # A walk shard counts as a cell; fake and unit targets do not.
    assert got == {
        "matrix_elapsed_s": 283.1,
        "matrix_start_median_s": 12.0,
        "longest_cell_s": 134.0,
        "wait_share": round(39.7 / (23.1 + 41.0 + 134.0), 3),
        "sleep_asserts": 1,  # counted where recorded (the walk shard's record predates the count)
    }
    _unit(tmp_path, "latency_mrv1_eager", 190.0, _timing("zygote", lease_wait_s=50.0))
    assert bazel_runs.matrix_measures(bazel_runs.test_units(str(tmp_path)), None)["longest_cell_s"] == 140.0


def test_the_command_line_prints_the_breakdown_or_says_what_is_missing(tmp_path, capsys):
    _unit(tmp_path, "flags_mrv1_eager", 23.1, _timing("zygote", start_s=10.0))
    assert bazel_runs.main([str(tmp_path)]) == 0
    assert "flags: 1 units, 23 s = starts 10" in capsys.readouterr().out
    assert bazel_runs.main([str(tmp_path / "missing")]) == 1
    assert "no test logs at" in capsys.readouterr().err


def test_the_command_line_counts_only_the_invocations_it_is_given(tmp_path, capsys):
    """bazel-testlogs keeps earlier runs' results: a one-cell run must not report the whole matrix."""
    _unit(tmp_path, "flags_mrv1_eager", 23.1, _timing("zygote", start_s=10.0))
    _unit(tmp_path, "latency_mrv1_eager", 30.0, _timing("zygote", start_s=11.0))  # an earlier run's
    write_bep(
        tmp_path / "bep.json", [("//t:flags_mrv1_eager", str(tmp_path / "flags_mrv1_eager" / "test.xml"), "PASSED")]
    )
    assert bazel_runs.main([str(tmp_path), "--bep", str(tmp_path / "bep.json")]) == 0
    out = capsys.readouterr().out
    assert "cell time: 1 GPU units" in out and "latency" not in out
    assert bazel_runs.main([str(tmp_path), "--bep", str(tmp_path / "none.json")]) == 1
    assert "no build event file" in capsys.readouterr().err


def test_the_floor_is_the_slots_held_time_then_without_waits_then_with_starts_as_alone(tmp_path, capsys):
    # 2 slots. a: 40 s in its slot after a 10 s wait for it, of which 10 s waiting on memory phases and
    # 12 s starting (two servers); b: 30 s, 5 s waits, 8 s start.
    _unit(
        tmp_path,
        "a_mrv1_eager",
        50.0,
        _timing("zygote", lease_wait_s=10.0, start_s=6.0, memory_phase_wait_s=10.0),
        _timing("zygote", start_s=6.0),
    )
    _unit(tmp_path, "b_mrv2_graph", 30.0, _timing("zygote", start_s=8.0, memory_phase_wait_s=5.0))
    _unit(tmp_path, "a_fake_mrv1_eager", 99.0, _timing("fake", start_s=0.1))
    units = bazel_runs.test_units(str(tmp_path))
    assert bazel_runs.floor(units, 2) == {"slots": 2, "at_once": [2], "busy_s": 35.0, "no_waits_s": 27.5}
    # Own work 70 - 15 - 20 = 35, plus three starts of 2 s: 41 cell-seconds.
    assert bazel_runs.floor(units, 2, start_alone_s=2.0)["starts_alone_s"] == 20.5
    assert bazel_runs.main([str(tmp_path), "--slots", "2", "--start_alone_s", "2"]) == 0
    assert (
        "floor at 2 slots: the slots busy 35 s with this work, 28 s without memory-phase waits, 20 s with every"
        " start in 2 s as alone"
    ) in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bazel_runs.main([str(tmp_path), "--start_alone_s", "2"])
    assert "--start_alone_s needs --slots" in capsys.readouterr().err


def test_each_wave_is_floored_at_the_units_it_ran_at_once_and_the_waves_add_up(tmp_path, capsys):
    """run_matrix.sh's walk wave runs fewer units at once than the slots (its test jobs, capped by the
    cores): its held time over the slots would be a floor it can never reach."""
    _unit(tmp_path, "state_walk_mrv1_eager/shard_1_of_2", 40.0, _timing("zygote", start_s=5.0, memory_phase_wait_s=8.0))
    _unit(tmp_path, "state_walk_mrv1_eager/shard_2_of_2", 40.0, _timing("zygote", start_s=5.0, memory_phase_wait_s=8.0))
    _unit(tmp_path, "flags_mrv1_eager", 30.0, _timing("zygote", start_s=5.0, memory_phase_wait_s=6.0))
    walk = tmp_path / "walk.json"
    rest = tmp_path / "rest.json"
    shards = [str(tmp_path / f"state_walk_mrv1_eager/shard_{i}_of_2/test.xml") for i in (1, 2)]
    write_bep(walk, [("//tests/sleep_wake:state_walk_mrv1_eager", x, "PASSED", i + 1) for i, x in enumerate(shards)])
    write_bep(rest, [("//tests/sleep_wake:flags_mrv1_eager", str(tmp_path / "flags_mrv1_eager/test.xml"), "PASSED")])
    units = bazel_runs.test_units(str(tmp_path))
    xmls = [{os.path.realpath(x) for x in shards}, {os.path.realpath(tmp_path / "flags_mrv1_eager/test.xml")}]
    # The walk's 80 s one at a time, the rest's 30 s on 4 slots: 80 + 7.5, never 110 / 4.
    f = bazel_runs.floor(units, 4, waves=[(xmls[0], 1), (xmls[1], 4)])
    assert (f["at_once"], f["busy_s"], f["no_waits_s"]) == ([1, 4], 87.5, 70.0)  # 64 + 6 without waits
    args = [str(tmp_path), "--slots", "4", "--bep", str(walk), "--at_once", "1", "--bep", str(rest), "--at_once", "4"]
    assert bazel_runs.main(args) == 0
    assert (
        "floor at 4 slots (1, 4 at once in its 2 waves, in turn): the slots busy 88 s with this work, 70 s without"
        " memory-phase waits"
    ) in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bazel_runs.main(args[:-2])
    assert "--at_once: 1 given for 2 --bep" in capsys.readouterr().err


def test_the_cpu_floor_is_the_whole_hosts_cpu_over_the_cores_not_the_servers(tmp_path, capsys):
    _unit(
        tmp_path,
        "a_mrv1_eager",
        50.0,
        _timing("zygote", start_cpu_s=30.0, serve_cpu_s=10.0),
        _timing("zygote", start_cpu_s=20.0, serve_cpu_s=4.0),
    )
    _unit(tmp_path, "b_mrv2_graph", 30.0, _timing("zygote", start_cpu_s=40.0, serve_cpu_s=24.0))
    _unit(tmp_path, "a_fake_mrv1_eager", 99.0, _timing("fake", start_cpu_s=500.0, serve_cpu_s=500.0))
    units = bazel_runs.test_units(str(tmp_path))
    assert bazel_runs.servers_cpu(units, 4) == {
        "cores": 4,
        "servers": 3,
        "start_cpu_s": 90.0,
        "serve_cpu_s": 38.0,
        "start_cpu_median_s": 30.0,
        "over_cores_s": 32.0,
    }
    # The host spent 400 CPU-s while Bazel ran: its tests, Bazel and the rest beside the servers' 128.
    host = tmp_path / "host-cpu.txt"
    host.write_text("host CPU-s over 120 s on 4 cores: busy 400 (83%); servers 128, bazel 20, tests 200, other 2\n")
    assert bazel_runs.main([str(tmp_path), "--cores", "4", "--host_cpu", str(host)]) == 0
    out = capsys.readouterr().out
    assert "CPU floor on 4 cores: 100 s, the whole host's busy 400 CPU-s over them" in out
    assert (
        "the GPU servers' CPU: 90 CPU-s starting (3 servers, median 30) and 38 CPU-s serving, 32 s over 4 cores"
        " (a part of the host's CPU: no floor)"
    ) in out
    assert bazel_runs.main([str(tmp_path), "--cores", "4"]) == 0
    assert "CPU floor: unknown (no host_cpu.py line: pass --host_cpu)" in capsys.readouterr().out


def test_logs_without_cpu_times_give_no_servers_cpu(tmp_path):
    _unit(tmp_path, "a_mrv1_eager", 50.0, _timing("zygote", start_s=3.0))
    assert bazel_runs.servers_cpu(bazel_runs.test_units(str(tmp_path)), 4) is None


def test_the_servers_cpu_is_summed_by_thread_name_most_first(tmp_path, capsys):
    loop, pool = "VLLM::EngineCor/VLLM::EngineCor", "VLLM::EngineCor/pt_main_thread"
    _unit(
        tmp_path,
        "a_mrv1_eager",
        50.0,
        _timing(
            "zygote",
            start_cpu_s=3.0,
            serve_cpu_s=3.0,
            cpu_by_thread={loop: {"cpu_s": 4.0, "threads": 1}, pool: {"cpu_s": 2.0, "threads": 15}},
        ),
        _timing("zygote", start_cpu_s=1.0, serve_cpu_s=1.0, cpu_by_thread={pool: {"cpu_s": 6.0, "threads": 15}}),
    )
    _unit(
        tmp_path,
        "a_fake_mrv1_eager",
        9.0,
        _timing("fake", start_cpu_s=1.0, serve_cpu_s=1.0, cpu_by_thread={"fake/x": {"cpu_s": 90.0, "threads": 1}}),
    )
    _unit(tmp_path, "b_mrv1_eager", 5.0, _timing("zygote", start_cpu_s=1.0, serve_cpu_s=1.0))  # an older log
    groups = bazel_runs.cpu_by_thread(bazel_runs.test_units(str(tmp_path)))
    assert groups == [
        {"name": pool, "cpu_s": 8.0, "threads": 30, "servers": 2, "share": 0.667},
        {"name": loop, "cpu_s": 4.0, "threads": 1, "servers": 1, "share": 0.333},
    ]
    assert bazel_runs.main([str(tmp_path), "--cores", "4"]) == 0
    assert (
        f"CPU by thread: {pool} 8 CPU-s (67%, 30 threads in 2 servers); {loop} 4 CPU-s (33%, 1 threads in 1 servers)"
    ) in capsys.readouterr().out


def _test_cpu(cpu_s, children_cpu_s=0.0, launcher_cpu_s=0.0):
    return {
        "key": "test_process_cpu",
        "value": cpu_s,
        "children_cpu_s": children_cpu_s,
        "launcher_cpu_s": launcher_cpu_s,
    }


def _walk_shard(root, k, serve_cpu_s, *entries):
    """Shard k of 2 of an HTTP walk cell: a 50 s unit whose server started in 6 CPU-s."""
    _unit(
        root,
        f"state_walk_mrv1_eager/shard_{k}_of_2",
        50.0,
        _timing("zygote", start_cpu_s=6.0, serve_cpu_s=serve_cpu_s),
        *entries,
    )


def test_the_tests_cpu_is_summed_by_class(tmp_path, capsys):
    _walk_shard(tmp_path, 1, 10.0, _test_cpu(5.0, launcher_cpu_s=1.0))
    _walk_shard(tmp_path, 2, 10.0, _test_cpu(4.0, children_cpu_s=1.0, launcher_cpu_s=1.5))
    _unit(tmp_path, "flags_mrv2_graph", 30.0, _timing("zygote", start_cpu_s=8.0, serve_cpu_s=2.0), _test_cpu(3.0))
    _unit(tmp_path, "flags_fake_mrv1_eager", 9.0, _timing("fake", start_cpu_s=1.0, serve_cpu_s=1.0), _test_cpu(90.0))
    _unit(tmp_path, "b_mrv1_eager", 5.0, _timing("zygote", start_cpu_s=1.0, serve_cpu_s=1.0))  # an older log
    f = bazel_runs.tests_cpu(bazel_runs.test_units(str(tmp_path)))
    assert f == {
        "units": 3,
        "cpu_s": 13.0,
        "launcher_cpu_s": 2.5,
        "by_class": [("state_walk", 10.0), ("flags", 3.0)],
    }
    assert bazel_runs.main([str(tmp_path), "--cores", "4"]) == 0
    assert (
        "tests' CPU: 13 CPU-s in 3 GPU units (2 of them while their servers started); by class: state_walk 10,"
        " flags 3\n"
    ) in capsys.readouterr().out
    assert bazel_runs.tests_cpu(bazel_runs.test_units(str(tmp_path / "none"))) is None


def _step(time, op):
    return {"key": "walk_step", "time": time, "op": op}


def test_the_walks_cpu_per_step_is_its_servers_and_tests_cpu_over_the_steps_it_recorded(tmp_path, capsys):
    """Host speed from work a plan fixes: the walk shards' servers' serving CPU and their test processes'
    own and children's CPU, each over the steps they recorded; the fake tier's walk and other classes
    are left out."""
    _walk_shard(tmp_path, 1, 3.0, _test_cpu(1.0, children_cpu_s=2.0), *[_step(10.0 + i, "wake:-") for i in range(30)])
    _walk_shard(tmp_path, 2, 5.0, _test_cpu(0.6), *[_step(20.0 + i, "reload:B") for i in range(10)])
    _unit(tmp_path, "flags_mrv2_graph", 30.0, _timing("zygote", start_cpu_s=8.0, serve_cpu_s=90.0), _test_cpu(9.0))
    _unit(
        tmp_path,
        "state_walk_fake_mrv1_eager",
        9.0,
        _timing("fake", start_cpu_s=1.0, serve_cpu_s=70.0),
        _test_cpu(90.0),
        _step(1.0, "wake:-"),
    )
    units = bazel_runs.test_units(str(tmp_path))
    assert bazel_runs.walk_cpu_per_step(units) == {
        "units": 2,
        "steps": 40,
        "servers_ms": 200.0,  # 8 CPU-s over 40 steps
        "tests_ms": 40.0,
        "children_ms": 50.0,
    }
    assert bazel_runs.main([str(tmp_path), "--cores", "4"]) == 0
    assert "servers 200 ms serving, test processes 40 ms, their children (the trainers) 50 ms, over 40 steps in 2" in (
        capsys.readouterr().out
    )
    # A server without its CPU time (an older launcher's log): no figure rather than a part of one.
    _unit(tmp_path, "state_walk_mrv2_eager/shard_1_of_1", 9.0, _timing("zygote"), _test_cpu(1.0), _step(1.0, "wake:-"))
    assert bazel_runs.walk_cpu_per_step(bazel_runs.test_units(str(tmp_path))) is None
    assert bazel_runs.walk_cpu_per_step(bazel_runs.test_units(str(tmp_path / "none"))) is None


def test_the_walks_step_seconds_are_the_time_between_its_records_by_operation(tmp_path, capsys):
    _unit(
        tmp_path,
        "state_walk_mrv1_eager/shard_1_of_2",
        50.0,
        _timing("zygote"),
        _step(10.0, "sleep:1:abort:0"),
        _step(10.5, "wake:-"),
        _step(10.6, "sleep:0:wait:1"),
        _step(11.6, "reload:B"),
        _step(12.0, "wake:weights"),
    )
    _unit(
        tmp_path,
        "state_walk_mrv1_eager/shard_2_of_2",
        50.0,
        _timing("zygote"),
        _step(20.3, "wake:kv_cache"),
        _step(20.0, "reload:-"),
        _step(20.5, "sleep:0:wait:2"),  # a late arrival during the drain: in flight too
    )  # out of order on disk: sorted by time
    _unit(
        tmp_path,
        "state_walk_fake_mrv1_eager",
        9.0,
        _timing("fake"),
        _step(1.0, "sleep:1:abort:0"),
        _step(9.0, "reload:A"),
    )
    kinds = bazel_runs.walk_step_seconds(bazel_runs.test_units(str(tmp_path)))
    # wakes 0.5, 0.4 and 0.3 s; the fake tier's steps are left out; the most time first
    assert kinds == [("wake", 3, 0.4), ("reload", 1, 1.0), ("sleep in flight", 2, 0.15)]
    assert bazel_runs.main([str(tmp_path)]) == 0
    assert (
        "walk steps, mean seconds by operation: wake 0.40 (3 steps), reload 1.00 (1 steps), sleep in flight"
        " 0.15 (2 steps)"
    ) in capsys.readouterr().out


def test_the_longest_walk_shards_split_into_start_walk_waits_and_the_rest(tmp_path, capsys):
    # (shard, its seconds, its server's start and memory-phase waits, its steps' times)
    for shard, seconds, start, waits, times in (
        (1, 60.0, 15.0, 20.0, (100.0, 140.0)),
        (2, 30.0, 5.0, 1.0, (10.0, 30.0, 31.0)),
    ):
        steps = [_step(t, op) for t, op in zip(times, ("sleep:1:abort:0", "wake:-", "reload:B"))]
        # the first shard's record has its start's CPU seconds, the second's (an older record) not
        cpu = {"start_cpu_s": 11.5} if shard == 1 else {}
        timing = _timing("zygote", start_s=start, memory_phase_wait_s=waits, **cpu)
        _unit(tmp_path, f"state_walk_mrv1_eager/shard_{shard}_of_2", seconds, timing, *steps)
    _unit(
        tmp_path,
        "state_walk_fake_mrv1_eager",
        90.0,
        _timing("fake"),
        _step(1.0, "sleep:1:abort:0"),
        _step(9.0, "wake:-"),
    )
    _unit(tmp_path, "flags_mrv1_eager", 95.0, _timing("zygote", start_s=5.0))  # no walk
    rows = bazel_runs.walk_shard_split(bazel_runs.test_units(str(tmp_path)), top=1)
    assert rows == [
        {
            "unit": "state_walk_mrv1_eager/shard_1_of_2",
            "clock": bazel_runs.PYTEST_CLOCK,
            "seconds": 60.0,
            "start_s": 15.0,
            "start_cpu_s": 11.5,
            "walk_s": 40.0,
            "steps": 2,
            "memory_wait_s": 20.0,
            "rest_s": 5.0,
        }
    ]
    assert bazel_runs.main([str(tmp_path)]) == 0
    assert (
        "walk shards, the longest on pytest's suite time (no build event gave Bazel's time of every shard):"
        " state_walk_mrv1_eager/shard_1_of_2 60.0 s = start 15.0 (11.5 CPU-s) + walk 40.0"
        " (2 steps,"
        " memory-phase waits 20.0) + the rest 5.0; state_walk_mrv1_eager/shard_2_of_2 30.0 s = start 5.0 + walk"
        " 21.0 (3 steps, memory-phase waits 1.0) + the rest 4.0"
    ) in capsys.readouterr().out


def test_walk_shards_are_counted_from_the_shards_that_ran_against_the_bound(tmp_path, capsys):
    # (shard, its seconds): one over the bound, one at it; the fake tier's walk and a cell without a walk
    # are no GPU walk shards. No build events: the record says it judged them on pytest's clock.
    for shard, seconds in ((0, 61.5), (1, 60.0), (2, 42.0)):
        _unit(tmp_path, f"state_walk_mrv1_eager/shard_{shard}_of_3", seconds, _timing("zygote", start_s=6.0))
    _unit(tmp_path, "state_walk_fake_mrv1_eager", 120.0, _timing("fake"))
    _unit(tmp_path, "flags_mrv1_eager", 95.0, _timing("zygote", start_s=5.0))
    shards = bazel_runs.walk_shards(bazel_runs.test_units(str(tmp_path)))
    assert shards == {
        "shards": 3,
        "clock": bazel_runs.PYTEST_CLOCK,
        "bound_s": bazel_runs.WALK_SHARD_S_MAX,
        "median_s": 60.0,
        "longest_s": 61.5,
        "over_bound": 1,
        "over": [{"unit": "state_walk_mrv1_eager/shard_0_of_3", "seconds": 61.5}],
    }
    assert bazel_runs.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "walk shards on pytest's suite time (no build event gave Bazel's time of every shard): 3 ran, median 60.0 s,"
        " longest 61.5 s; 1 over 60 s\n  state_walk_mrv1_eager/shard_0_of_3"
    ) in out


def _walk_shards_with_build_events(tmp_path, attempt_s: dict) -> str:
    """Two walk shards, both within the bound by pytest's suite time, and a build event file that gives
    Bazel's seconds of those shards named in attempt_s (by shard)."""
    results, by_xml = [], {}
    for shard, seconds in ((1, 59.7), (2, 40.0)):
        unit = f"state_walk_mrv1_graph/shard_{shard}_of_2"
        steps = (_step(10.0, "sleep:1:abort:0"), _step(40.0, "wake:-"))
        _unit(tmp_path, unit, seconds, _timing("zygote", start_s=12.0), *steps)
        xml = str(tmp_path / unit / "test.xml")
        results.append(("//tests/sleep_wake:state_walk_mrv1_graph", xml, "PASSED", shard))
        if shard in attempt_s:
            by_xml[xml] = attempt_s[shard]
    write_bep(tmp_path / "bep.json", results, attempt_s=by_xml)
    return str(tmp_path / "bep.json")


def test_a_walk_shard_within_the_bound_by_pytest_but_over_it_on_bazels_clock_is_over(tmp_path, capsys):
    """What `bazel test` prints (the test runner's start included) is what a user waits for."""
    bep = _walk_shards_with_build_events(tmp_path, {1: 60.534, 2: 41.2})
    invocation = reading.read_invocation([bep])
    units = bazel_runs.test_units(str(tmp_path), invocation.xmls, invocation.attempt_s)
    shards = bazel_runs.walk_shards(units)
    assert shards is not None
    assert (shards["clock"], shards["longest_s"], shards["over_bound"]) == (bazel_runs.BAZEL_CLOCK, 60.5, 1)
    assert shards["over"] == [{"unit": "state_walk_mrv1_graph/shard_1_of_2", "seconds": 60.5}]
    # The longest shards' split is on the same clock: the runner's start falls in the rest.
    (row,) = bazel_runs.walk_shard_split(units, top=1)
    assert (row["clock"], row["seconds"], round(row["rest_s"], 3)) == (bazel_runs.BAZEL_CLOCK, 60.534, 18.534)
    assert bazel_runs.main([str(tmp_path), "--bep", bep]) == 0
    assert "walk shards on Bazel's clock: 2 ran, median 50.9 s, longest 60.5 s; 1 over 60 s" in capsys.readouterr().out


def test_walk_shards_are_judged_on_pytests_clock_when_a_shard_lacks_bazels(tmp_path):
    """Never two clocks in one record: one shard Bazel did not time puts every shard on pytest's."""
    bep = _walk_shards_with_build_events(tmp_path, {1: 60.534})
    invocation = reading.read_invocation([bep])
    units = bazel_runs.test_units(str(tmp_path), invocation.xmls, invocation.attempt_s)
    shards = bazel_runs.walk_shards(units)
    assert shards is not None
    assert (shards["clock"], shards["longest_s"], shards["over_bound"]) == (bazel_runs.PYTEST_CLOCK, 59.7, 0)
    assert bazel_runs.walk_shard_split(units, top=1)[0]["seconds"] == 59.7


def test_a_run_without_walk_shards_counts_none_rather_than_zero(tmp_path):
    _unit(tmp_path, "flags_mrv1_eager", 95.0, _timing("zygote", start_s=5.0))
    assert bazel_runs.walk_shards(bazel_runs.test_units(str(tmp_path))) is None


def _race(tokens, asked, choices, outcome, op):
    return {"key": "walk_race", "value": tokens, "asked": asked, "choices": choices, "outcome": outcome, "op": op}


def test_the_walks_races_say_how_far_a_request_in_flight_got_before_the_sleep_answered(tmp_path, capsys):
    _unit(
        tmp_path,
        "state_walk_mrv1_eager/shard_1_of_2",
        50.0,
        _timing("zygote"),
        _race(6, 128, 1, "caught", "sleep:1:keep:1"),
        _race(40, 128, 4, "caught", "sleep:0:abort:n4"),  # 10 a choice
        _race(512, 128, 4, "caught", "sleep:1:wait:n4"),  # a wait drains them: no margin to read
    )
    _unit(
        tmp_path,
        "state_walk_mrv1_eager/shard_2_of_2",
        50.0,
        _timing("zygote"),
        _race(128, 128, 1, "lost", "sleep:2:abort:1"),
        _race(8, 256, 1, "caught", "sleep:2:abort:1"),
    )
    _unit(tmp_path, "state_walk_fake_mrv1_eager", 9.0, _timing("fake"), _race(1, 128, 1, "caught", "sleep:1:keep:1"))
    races = bazel_runs.walk_races(bazel_runs.test_units(str(tmp_path)))
    # per choice 6, 10, 128, 8: the fake tier's and the drained race left out
    assert races == {
        "races": 4,
        "outcomes": {"caught": 3, "lost": 1},
        "median": 9.0,
        "max": 128.0,
        "caught_max": 10.0,
        "asked": [128, 256],
    }
    assert bazel_runs.main([str(tmp_path)]) == 0
    assert (
        "walk races of a request in flight (keep, abort): 4 (caught 3, lost 1); tokens generated per choice when"
        " /sleep answered: median 9.0, max 128 (10 in a caught one) of 128/256 asked"
    ) in capsys.readouterr().out
    assert bazel_runs.walk_races(bazel_runs.test_units(str(tmp_path / "none"))) is None


def test_memory_phases_by_what_took_them_add_up_over_servers_most_waited_first(tmp_path):
    by_a = {"sleep": {"n": 3, "waited_s": 1.5, "held_s": 0.3}, "reload": {"n": 2, "waited_s": 0.0, "held_s": 0.8}}
    by_b = {"sleep": {"n": 1, "waited_s": 0.5, "held_s": 0.1}, "start": {"n": 1, "waited_s": 2.5, "held_s": -1.0}}
    _unit(tmp_path, "a_mrv1_eager", 10.0, _timing("zygote", memory_phase_by=by_a))
    _unit(tmp_path, "b_mrv1_eager", 10.0, _timing("zygote", memory_phase_by=by_b))
    _unit(tmp_path, "c_mrv1_eager", 10.0, _timing("zygote"))  # a record from before the breakdown
    rows = bazel_runs.memory_phases_by(bazel_runs.test_units(str(tmp_path)))
    assert rows == [("start", 1, 2.5, None), ("sleep", 4, 2.0, pytest.approx(0.4)), ("reload", 2, 0.0, 0.8)]
    text = bazel_runs.memory_phases_by_text(rows)
    assert "start 1 waited 2 s held ?" in text and "sleep 4 waited 2 s held 0 s" in text


def test_reserved_growth_adds_up_over_servers(tmp_path):
    a = {"reload": {"n": 5, "grew": 1, "max": 3 << 20}, "sleep": {"n": 9, "grew": 0, "max": 0}}
    b = {"reload": {"n": 4, "grew": 2, "max": 8 << 20}}
    _unit(tmp_path, "a_mrv1_eager", 10.0, _timing("zygote", reserved_growth_by=a))
    _unit(tmp_path, "b_mrv1_eager", 10.0, _timing("zygote", reserved_growth_by=b))
    _unit(tmp_path, "c_mrv1_eager", 10.0, _timing("zygote"))  # a record from before the figure
    rows = bazel_runs.reserved_growth_by(bazel_runs.test_units(str(tmp_path)))
    assert rows == [("reload", 9, 3, 8 << 20, 0), ("sleep", 9, 0, 0, 0)]
    assert "reload 3 of 9 (most 8 MiB); sleep 0 of 9 (most 0 MiB)" in bazel_runs.reserved_growth_text(rows)


def test_start_steps_beyond_their_pools_take_the_most_over_servers(tmp_path):
    a = {"init_device": {"n": 1, "grew": 1, "max": 600 << 20}, "load_model": {"n": 1, "grew": 1, "max": 2 << 20}}
    b = {"init_device": {"n": 2, "grew": 2, "max": 650 << 20}, "load_model": {"n": 2, "grew": 0, "max": 0}}
    _unit(tmp_path, "a_mrv1_eager", 10.0, _timing("zygote", step_bytes_by=a))
    _unit(tmp_path, "b_mrv1_eager", 10.0, _timing("zygote", step_bytes_by=b))
    rows = bazel_runs.step_bytes_by(bazel_runs.test_units(str(tmp_path)))
    assert rows == [("init_device", 3, 3, 650 << 20, 0), ("load_model", 3, 1, 2 << 20, 0)]
    assert "init_device 650 MiB over 3; load_model 2 MiB over 3" in bazel_runs.step_bytes_text(rows)


def test_steps_that_mapped_more_than_they_declared_are_summed_and_named(tmp_path):
    """Under the rule bytes a step larger than it declared could land in a neighbour's sleep unaccounted:
    the run says how many, beside the most any mapped."""
    a = {"load_model": {"n": 2, "grew": 2, "max": 300 << 20, "over": 1}}
    b = {"load_model": {"n": 1, "grew": 1, "max": 500 << 20, "over": 1}, "init_device": {"n": 1, "grew": 1, "max": 1}}
    _unit(tmp_path, "a_mrv1_eager", 10.0, _timing("zygote", step_bytes_by=a))
    _unit(tmp_path, "b_mrv1_eager", 10.0, _timing("zygote", step_bytes_by=b))
    rows = bazel_runs.step_bytes_by(bazel_runs.test_units(str(tmp_path)))
    assert rows == [("init_device", 1, 1, 1, 0), ("load_model", 3, 3, 500 << 20, 2)]
    assert "init_device 0 MiB over 1; load_model 500 MiB over 3, 2 over what it declared" in (
        bazel_runs.step_bytes_text(rows)
    )
