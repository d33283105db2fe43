"""The scheduler replay: its list scheduling, its scaling of memory-phase waits, its floors, and the
measured one-GPU runs of the main job kept in testdata/runs (their records and console logs; whole, or of
the cells named to tools/setup.sh, each on the card its name says) replayed on their own machine against
the elapsed time each record measured."""

import json
import os

import pytest

from tools.bench import legacy, replay

RUNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "runs")
RECORDS = sorted(f for f in os.listdir(RUNS) if f.endswith(".json"))
TOLERANCE = 0.10  # the speed issue's bound on the replay of a measured run


def test_the_fixture_holds_fresh_and_warm_runs():
    states = {json.load(open(os.path.join(RUNS, f)))["matrix"]["machine_state"] for f in RECORDS}
    assert len(RECORDS) >= 5 and states == {"fresh", "warm"}


@pytest.mark.parametrize("name", RECORDS)
def test_a_measured_run_replayed_on_its_own_machine_lands_within_ten_percent(name):
    run = replay.load(os.path.join(RUNS, name))
    with open(os.path.join(RUNS, name)) as f:
        measured = json.load(f)["matrix"]["elapsed_s"]  # run_matrix.sh's clock, not the replay's input
    predicted = replay.predict(run, replay.Machine(run.gpus, run.cores, run.slots_per_gpu)).seconds
    assert abs(predicted - measured) <= TOLERANCE * measured, (name, predicted, measured)


@pytest.mark.parametrize("name", RECORDS)
def test_each_wave_no_input_came_from_lands_within_ten_percent_and_no_gpu_schedule_overruns(name):
    """A CPU-only unit a legacy log shows ending a wave was placed from that wave's end, so that wave's
    replay matches by construction: the waves without one are the independent check, and in every wave the
    GPU units alone must fit the measured time."""
    run = replay.load(os.path.join(RUNS, name))
    checked = 0
    for wave, replayed, measured, independent in replay.validation(run):
        if independent:
            assert abs(replayed - measured) <= TOLERANCE * measured, (name, wave, replayed, measured)
            checked += 1
    p = replay.predict(run, replay.Machine(run.gpus, run.cores, run.slots_per_gpu))
    for w, ran in zip(p.waves, run.gpu_waves()):
        gpu_end = max(s.ended for s in w.placed if s.gpu is not None)
        assert gpu_end <= (1 + TOLERANCE) * ran.seconds, (name, w.name, gpu_end, ran.seconds)
    assert checked or replay.end_placed(run) == {w.name for w in run.gpu_waves()}


def test_the_independent_waves_are_most_of_the_fixture():
    checks = [v for name in RECORDS for v in replay.validation(replay.load(os.path.join(RUNS, name)))]
    assert sum(independent for *_, independent in checks) >= 5


def test_list_scheduling_puts_the_longest_first_on_the_least_busy_gpu_within_the_jobs():
    placed = replay.schedule([("a", 10.0), ("b", 30.0), ("c", 20.0)], [], jobs=2, gpus=2, slots=1, lead_s=5.0)
    at = {p.name: (p.gpu, p.began, p.ended) for p in placed}
    # b and c start at the lead on one GPU each; a waits for c's job and slot.
    assert at == {"b": (0, 5.0, 35.0), "c": (1, 5.0, 25.0), "a": (1, 25.0, 35.0)}
    # A CPU-only unit starts where the run started it, and takes a job before a waiting GPU unit.
    placed = replay.schedule([("g", 10.0), ("h", 10.0)], [("cpu", 4.0, 3.0)], jobs=1, gpus=1, slots=2, lead_s=0.0)
    assert [(p.name, p.began) for p in placed] == [("g", 0.0), ("cpu", 10.0), ("h", 14.0)]


def _run(units, waves, gpus=1, cores=16, slots=4, host_cpu_s=None):
    elapsed = sum(w.seconds for w in waves)
    return replay.Run("t", "warm", gpus, cores, slots, elapsed, waves, units, host_cpu_s, 2.0, 50.0)


def test_memory_phase_waits_shrink_with_fewer_neighbours_per_gpu():
    """Four units of 10 s own work and 10 s waits on one GPU ran 4 at once; on 4 GPUs each is alone."""
    units = [replay.Unit(f"u{i}", "rest", True, 20.0, 10.0) for i in range(4)]
    run = _run(units, [replay.Wave("rest", 20.0, 0.0)])
    same = replay.predict(run, replay.Machine(1, 16, 4))
    assert same.seconds == pytest.approx(20.0) and same.waves[0].wait_factor == pytest.approx(1.0)
    alone = replay.predict(run, replay.Machine(4, 64, 4))
    assert alone.waves[0].wait_factor == pytest.approx(0.0) and alone.seconds == pytest.approx(10.0)


def test_floors_are_the_hosts_cpu_the_longest_units_and_the_locks_exclusive_windows():
    units = [
        replay.Unit("w1", "walk", True, 50.0, 20.0),
        replay.Unit("w2", "walk", True, 40.0, 5.0),
        replay.Unit("r1", "rest", True, 60.0, 10.0),
        replay.Unit("fake", "cpu", False, 45.0),
    ]
    run = _run(units, [replay.Wave("walk", 100.0, 0.0), replay.Wave("rest", 80.0, 0.0)], host_cpu_s=1600.0)
    fs = {f.name: f.seconds for f in replay.floors(run, replay.Machine(2, 32, 4))}
    # CPU: 1600 / 32; the waves in turn: w2's own 35 s + r1's 50 s, and the CPU-only 45 s beside them is less;
    # the lock: 2 s of EXCLUSIVE windows spread over 2 GPUs.
    assert fs == {"CPU": 50.0, "longest units": 85.0, "lock": 1.0}


def test_the_cpu_bounds_a_wave_whose_share_of_the_hosts_cpu_exceeds_its_schedule():
    units = [replay.Unit("u", "rest", True, 10.0)]
    run = _run(units, [replay.Wave("rest", 10.0, 0.0)], host_cpu_s=16 * 30.0)
    p = replay.predict(run, replay.Machine(1, 16, 4))
    assert p.seconds == pytest.approx(30.0) and p.waves[0].bound.startswith("the CPU")


def test_a_legacy_logs_shards_keep_bazels_max_min_and_mean():
    log = (
        "run_matrix.sh: 1 GPU(s) x 24 slot(s) = 24 cells at once (16 in the walk wave)\n"
        "run_matrix.sh: wave 1 of 1 (walk): --test_tag_filters=state_walk\n"
        "[9 / 10] 1 / 2 tests; Testing //tests/sleep_wake:state_walk_fake_mrv1_eager; 80s local\n"
        "//tests/sleep_wake:state_walk_fake_mrv1_eager                 PASSED in 90.0s\n"
        "//tests/sleep_wake:state_walk_mrv1_eager                      PASSED in 50.0s\n"
        "  Stats over 4 runs: max = 50.0s, min = 20.0s, avg = 35.0s, dev = 5.0s\n"
        "run_matrix.sh: bazel test took 100.0 s in 1 waves (100.0 s)\n"
    )
    record = {
        "machine": {"cores": 16},
        "matrix": {"machine_state": "warm", "elapsed_s": 100.0},
        "cell_time": {"by_class": {"state_walk": {"lease_wait_s": 0.0, "memory_phase_wait_s": 14.0}}},
    }
    run = legacy.run(record, log, "r.json")
    shards = sorted(u.seconds for u in run.units if u.gpu)
    assert shards == [20.0, 35.0, 35.0, 50.0] and sum(shards) == 4 * 35.0
    assert sum(u.memory_wait_s for u in run.units if u.gpu) == pytest.approx(14.0)
    # The wave's last progress line names the fake walk: it ran to the wave's end.
    [fake] = [u for u in run.units if not u.gpu]
    assert (fake.began_s, fake.began_from_end) == (10.0, True) and replay.end_placed(run) == {"walk"}


def test_the_command_line_names_the_eight_gpu_prediction_its_bound_and_floors(capsys):
    record = os.path.join(RUNS, "h200-2026-12-05-84c86bc-w1.json")
    assert replay.main([record, "--gpus", "1", "8"]) == 0
    out = capsys.readouterr().out
    assert "[measured 549.9 s:" in out and "8 GPUs, 128 cores: " in out
    eight = next(line for line in out.splitlines() if "8 GPUs, 128 cores: " in line)
    assert "; bound: " in eight
    assert "floors: CPU 33 s (the whole host's 4241 CPU-s over 128 cores)" in out
    assert "they overlap one another, so their sum is no floor" in out
    assert replay.main([os.path.join(RUNS, "missing.json")]) == 1
    assert "replay: " in capsys.readouterr().err
