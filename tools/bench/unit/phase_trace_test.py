"""The phase trace read back: a wait is split among what kept it out, instant by instant, and a real
lock's phases write the lines it reads."""

import json

import pytest

from tools.bench import phase_trace
from tools.launcher import gpu_lease
from tools.launcher.gpu_lease import ALLOCATE, EXCLUSIVE, FREE, RELEASE


def _write(path, phases):
    path.write_text(
        "".join(json.dumps(dict(zip(("kind", "what", "asked", "entered", "left"), p))) + "\n" for p in phases)
        + "not json\n"
    )


def test_each_instant_of_a_wait_goes_to_what_kept_it_out(tmp_path):
    trace = tmp_path / "gpu0.memory.trace.jsonl"
    _write(
        trace,
        [
            (ALLOCATE, "start:load_model", 0.0, 0.0, 2.0),  # a long start step
            (ALLOCATE, "reload", 0.5, 0.5, 1.5),  # beside it until 1.5: the two share the sleep's wait then
            (FREE, "sleep", 1.0, 2.0, 2.1),  # a sleep waits for it from 1.0 to 2.0 ...
            # ... and keeps this start step out 1.5-2.0 (allocations overlap: the start step is no cause),
            # then holds 2.0-2.1, then a poll:
            (ALLOCATE, "start:init_device", 1.5, 2.2, 2.3),
            (RELEASE, "teardown", 1.5, 1.5, 1.6),  # overlaps everything but an exclusive window: no wait
            (EXCLUSIVE, "window", 3.0, 3.5, 4.0),  # kept out by the teardown below
            (RELEASE, "teardown", 3.0, 3.0, 3.5),
        ],
    )
    phases, bad = phase_trace.read(str(trace))
    s = phase_trace.summarize(phases)
    assert bad == 1 and s.phases == 7 and s.span_s == pytest.approx(4.0)
    assert s.waits[FREE] == (1, pytest.approx(1.0)) and s.waits[ALLOCATE] == (1, pytest.approx(0.7))
    assert s.kept_out_by[FREE] == {"allocate start": pytest.approx(0.75), "allocate reload": pytest.approx(0.25)}
    step = s.kept_out_by[ALLOCATE]
    assert step == {
        "waiting free": pytest.approx(0.5),
        "free sleep": pytest.approx(0.1),
        phase_trace.POLL: pytest.approx(0.1),
    }
    assert s.kept_out_by[EXCLUSIVE] == {"release teardown": pytest.approx(0.5)}
    assert RELEASE not in s.waits
    out = phase_trace.text("gpu0", s)
    assert "free waited 1.0 s in 1 phases, kept out by: allocate start 0.8 s, allocate reload 0.2 s" in out


def test_a_waiting_free_keeps_no_wake_out_while_a_start_step_is_inside(tmp_path):
    """gpu_lease.passes_waiting_free: a wake or reload passes a waiting FREE while a start step holds
    ALLOCATE, so those instants of its wait are not the FREE's (here a poll), the ones after are."""
    trace = tmp_path / "gpu0.memory.trace.jsonl"
    _write(
        trace,
        [
            (ALLOCATE, "start:load_model", 0.0, 0.0, 2.0),
            (FREE, "sleep", 1.0, 2.5, 2.6),  # waits for the start step, then (2.0-2.5) for the wake below
            (ALLOCATE, "wake", 1.8, 1.8, 2.5),
            (ALLOCATE, "reload", 1.5, 2.7, 2.8),  # 1.5-2.0: passes the keep-out (start step inside);
            #                           2.0-2.5 the waiting FREE, 2.5-2.6 the sleep, 2.6-2.7 a poll
        ],
    )
    s = phase_trace.summarize(phase_trace.read(str(trace))[0])
    assert s.kept_out_by[ALLOCATE] == {
        phase_trace.POLL: pytest.approx(0.6),
        "waiting free": pytest.approx(0.5),
        "free sleep": pytest.approx(0.1),
    }


def test_a_held_phase_writes_its_trace_line_and_the_reader_reads_it(tmp_path, capsys):
    lock = tmp_path / "gpu0.memory.lock"
    with gpu_lease.memory_phase_at(str(lock), FREE, timeout_s=1, what="sleep"):
        pass
    with gpu_lease.memory_phase_at(str(lock), ALLOCATE, timeout_s=1):
        pass
    entries = [json.loads(line) for line in (tmp_path / "gpu0.memory.trace.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["what"]) for e in entries] == [(FREE, "sleep"), (ALLOCATE, ALLOCATE)]
    assert all(e["asked"] <= e["entered"] <= e["left"] for e in entries)
    [(name, summary)] = phase_trace.summaries(str(tmp_path)).items()  # the bench's JSON
    assert name == "gpu0.memory.trace.jsonl" and summary["phases"] == 2 and json.dumps(summary)
    assert phase_trace.main([str(tmp_path)]) == 0
    assert "gpu0.memory.trace.jsonl: 2 memory phases" in capsys.readouterr().out
    assert phase_trace.main([str(tmp_path / "nowhere")]) == 1
    assert "no memory-phase trace at" in capsys.readouterr().err


def test_run_matrix_waves_are_summarised_apart(tmp_path, capsys):
    """A phase belongs to the wave it was asked in; the whole run's summary still counts every one."""
    _write(
        tmp_path / "gpu0.memory.trace.jsonl",
        [
            (FREE, "window", 10.0, 10.0, 11.0),  # the walk's wave
            (ALLOCATE, "wake", 10.5, 11.0, 11.1),
            (ALLOCATE, "start:load_model", 20.0, 20.0, 22.0),  # the rest's wave
            (FREE, "sleep", 21.0, 22.0, 22.1),
        ],
    )
    (tmp_path / phase_trace.WAVES_FILE).write_text(
        '{"wave": "walk", "began": 9.0, "ended": 15.0}\n{"wave": "rest", "began": 15.0, "ended": 30.0}\n'
    )
    assert phase_trace.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "gpu0.memory.trace.jsonl: 4 memory phases" in out
    assert "  wave walk: 2 memory phases over 1 s" in out
    assert "    allocate waited 0.5 s in 1 phases, kept out by: free window 0.5 s" in out
    assert "  wave rest: 2 memory phases over 2 s" in out
    assert "    free waited 1.0 s in 1 phases, kept out by: allocate start 1.0 s" in out
    # Before its first phase a wave's slots did nothing for it: Bazel, the tests' start-up, server set-up.
    assert "    its first memory phase came 1.0 s after the wave began" in out  # walk: 10.0 - 9.0
    assert "    its first memory phase came 5.0 s after the wave began" in out  # rest: 20.0 - 15.0
    waves = phase_trace.summaries(str(tmp_path))["gpu0.memory.trace.jsonl"]["waves"]
    assert sorted(waves) == ["rest", "walk"] and waves["walk"]["phases"] == 2
    assert (waves["walk"]["lead_s"], waves["rest"]["lead_s"]) == (1.0, 5.0)
