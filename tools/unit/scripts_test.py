"""tools/test.sh and tools/run_matrix.sh, run with fakes of `bazel` and `nvidia-smi` on PATH.

Each test copies the scripts and the Python they run into a scratch workspace (the scripts cd to
their parent directory) and reads what the fake bazel was asked to do.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tools.launcher import slots
from tools.matrix import shard_count
from tools.results.unit.testlogs_testing import write_xml

HERE = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.path.dirname(os.path.dirname(HERE))
SCRIPT_FILES = [
    ".bazelrc",
    "tools/__init__.py",
    "tools/test.sh",
    "tools/run_matrix.sh",
    "tools/results/placement.py",
    "tools/results/ran_tests.py",
    "tools/results/testlogs.py",
    "tools/results/walk_gate.py",
    "tools/launcher/__init__.py",
    "tools/launcher/errors.py",
    "tools/launcher/slots.py",
    "tools/launcher/visible_devices.py",
    "tools/matrix.py",
    "tools/matrix.bzl",
    "tools/bench/__init__.py",
    "tools/bench/bazel_runs.py",
    "tools/bench/host_cpu.py",
    "tools/bench/legacy.py",
    "tools/bench/phase_trace.py",
    "tools/bench/replay.py",
    "tools/bench/run_record.py",
    "tools/launcher/gpu_lease.py",
    "tools/launcher/memory_claims.py",
    "tools/bench/history.py",
    "tools/report/__init__.py",
    "tools/report/reading.py",
    "tools/launcher/zygote_host.py",
    "tools/launcher/unix_socket.py",
    # The report run_matrix.sh writes after the run, and what it imports.
    "tools/report/__main__.py",
    "tools/report/cli.py",
    "tools/report/view.py",
    "tools/report/render.py",
    "tools/report/series.py",
    "tools/report/svg.py",
    "tools/report/text.py",
    "tools/report/time_spent.py",
    "tools/report/weight_updates.py",
    "tools/results/mutation_table.py",
    "tools/launcher/config.py",
    "tools/launcher/phase_plugin/__init__.py",
    "tools/launcher/phase_plugin/sleepwake_cpu_use.py",
    "tools/launcher/phase_plugin/sleepwake_on_import.py",
]
FAKES = os.path.join(HERE, "testdata", "scripts")
# What the two H200s of an nvidia-h200-x2 runner report: index, uuid, free MiB.
TWO_H200 = "0, GPU-8932f937-d72c-4106-c12f-20bd9faed9f6, 143163\n1, GPU-1f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b, 143163\n"
NOTHING_MATCHED = "--test_filter 'no_such_test' matched no test in this target."
SKIPPED = {"no test selected": "skipped"}


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    for rel in SCRIPT_FILES:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(WORKSPACE, rel), ws / rel)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in [
        ("bazel", os.path.join(FAKES, "fake_bazel.py")),
        ("nvidia-smi", os.path.join(FAKES, "fake_nvidia_smi.py")),
        ("python3", None),
    ]:
        command = f'exec "{sys.executable}"' + (f' "{target}"' if target else "")
        (bin_dir / name).write_text(f'#!/bin/sh\n{command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    return ws


def run_script(workspace, script, args=(), results=(), **env):
    """Runs tools/<script> in the scratch workspace; returns (exit code, output, the fake bazel's argv)."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "CI",
            "SLEEPWAKE_REMOTE_CACHE",
            "CUDA_VISIBLE_DEVICES",
            "SLEEPWAKE_SLOTS_PER_GPU",
            "SLEEPWAKE_KEEP_ZYGOTES_S",
        )
    }
    base.update(
        PATH=f"{workspace.parent / 'bin'}:{os.environ['PATH']}",
        PYTHONPATH=WORKSPACE,
        FAKE_BAZEL_ARGV=str(workspace.parent / "argv.json"),
        FAKE_BAZEL_TESTLOGS=str(workspace.parent / "testlogs"),
        FAKE_BAZEL_RESULTS=json.dumps([list(r) for r in results]),
        FAKE_BAZEL_OUTPUT_BASE=str(workspace.parent / "output_base"),
        SLEEPWAKE_LOCK_DIR=str(workspace.parent / "locks"),
    )  # not the host's: its traces stay put
    if script == "run_matrix.sh":
        base.setdefault("SLEEPWAKE_KEEP_ZYGOTES_S", "0")  # a kept host is the subject of its own test only
    base.update(env)
    proc = subprocess.run(
        ["bash", str(workspace / "tools" / script), *args], env=base, capture_output=True, text=True, timeout=120
    )
    # The last bazel test of the GPU's: run_matrix.sh's CPU-only targets run beside, in their own output base.
    ran = gpu_invocations(workspace) if (workspace.parent / "argv.json.all").exists() else []
    return proc.returncode, proc.stdout + proc.stderr, ran[-1] if ran else None


def invocations(workspace) -> list[list[str]]:
    """Every `bazel test` the fake bazel was asked to run (not `bazel info`), startup options included."""
    lines = (workspace.parent / "argv.json.all").read_text().splitlines()
    return [argv for argv in map(json.loads, lines) if "test" in argv]


def cpu_only(argv: list[str]) -> bool:
    """Whether a bazel test is run_matrix.sh's CPU-only targets' own, in its own output base."""
    return any(a.startswith("--output_base=") for a in argv)


def gpu_invocations(workspace) -> list[list[str]]:
    return [argv for argv in invocations(workspace) if not cpu_only(argv)]


def test_test_sh_fails_when_the_filter_matched_nothing_anywhere(workspace):
    code, output, argv = run_script(
        workspace,
        "test.sh",
        ["--test_filter=no_such_test"],
        [("//tools:a_test", SKIPPED, NOTHING_MATCHED), ("//tools:b_test", SKIPPED, NOTHING_MATCHED)],
    )
    assert code == 1, output
    assert "ran_tests: FAILED: no test case ran in `bazel test //...`" in output
    assert NOTHING_MATCHED in output and "test.sh: FAILED: no test case ran" in output
    assert argv[-2:] == ["--test_filter=no_such_test", "//..."]


def test_test_sh_passes_when_a_test_case_ran_in_some_target(workspace):
    code, output, argv = run_script(
        workspace,
        "test.sh",
        ["--test_filter=test_x"],
        [("//tools:a_test", SKIPPED, NOTHING_MATCHED), ("//tools:b_test", {"test_x": "passed"}, "")],
    )
    assert code == 0, output
    assert "ran_tests: 1 test case(s) ran" in output
    assert f"--build_event_json_file={workspace}/.bazel-bep.json" in argv


def test_test_sh_keeps_bazels_own_failures(workspace):
    code, output, _ = run_script(
        workspace, "test.sh", results=[("//tools:a_test", {"t": "failed"}, "")], FAKE_BAZEL_RC="3"
    )
    assert code == 3 and "some tests failed" in output


def test_run_matrix_fails_when_the_filter_matched_nothing_in_any_cell(workspace):
    code, output, argv = run_script(
        workspace,
        "run_matrix.sh",
        ["--test_filter=TestNoSuch"],
        [("//tests/sleep_wake:flags_mrv1_eager", SKIPPED, NOTHING_MATCHED, ["gpu", "flags"])],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
        SLEEPWAKE_SLOTS_PER_GPU="2",
    )
    assert code == 1, output
    assert "run_matrix.sh: FAILED: no test case ran" in output
    assert argv[-2:] == ["--test_filter=TestNoSuch", "//tests/sleep_wake/..."]
    # The run record carries that verdict, not Bazel's exit 0.
    assert json.loads((workspace / "sleepwake-run.json").read_text())["matrix"]["status"] == "red"


def test_run_matrix_uses_only_the_gpus_it_was_given(workspace):
    # The runner reserved GPU 0 for another job: one GPU, named by its UUID, is this matrix's.
    code, output, argv = run_script(
        workspace,
        "run_matrix.sh",
        ["//tests/sleep_wake:flags_mrv1_eager"],
        [("//tests/sleep_wake:flags_mrv1_eager", {"t": "passed"}, "", ["gpu", "flags"])],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
        SLEEPWAKE_SLOTS_PER_GPU="3",
        CUDA_VISIBLE_DEVICES="GPU-1f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b",
    )
    assert code == 0, output
    cores = len(os.sched_getaffinity(0))
    walk_jobs = min(3, cores)
    assert f"run_matrix.sh: 1 GPU(s) x 3 slot(s) = 3 cells at once ({walk_jobs} in the walk wave)" in output
    assert "slots: GPUs 1 (NVML indices) x 3 slot(s) per GPU (SLEEPWAKE_SLOTS_PER_GPU)" in output
    # A test job per slot (the CPU-only targets run beside, in a bazel test of their own).
    # With reuse (the default) half the slots more cells wait, for the servers cells give back.
    assert f"--local_test_jobs={3 + 3 // 2}" in argv and "--test_env=SLEEPWAKE_SLOTS_PER_GPU=3" in argv
    assert "--test_env=SLEEPWAKE_REUSE_SERVERS=1" in argv
    assert f"--jobs={max(3 + 3 // 2, cores)}" in argv  # --jobs caps the tests at once


def test_run_matrix_sizes_slots_from_free_memory_and_cores_and_prints_why(workspace):
    code, output, argv = run_script(
        workspace,
        "run_matrix.sh",
        [],
        [("//tests/sleep_wake:flags_mrv1_eager", {"t": "passed"}, "", ["gpu", "flags"])],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
    )
    assert code == 0, output
    expected, why = slots.automatic_slots(143163 << 20, len(os.sched_getaffinity(0)), 2)
    assert f"run_matrix.sh: 2 GPU(s) x {expected} slot(s) = {2 * expected} cells at once" in output, output
    assert why in output and "SLEEPWAKE_SLOTS_PER_GPU=N overrides" in output
    cores = len(os.sched_getaffinity(0))
    assert f"--local_test_jobs={2 * expected + 2 * expected // 2}" in argv
    # The golden actions lease a slot beside the cells: both see the same count (tools/goldens.bzl).
    assert f"--test_env=SLEEPWAKE_SLOTS_PER_GPU={expected}" in argv
    assert f"--action_env=SLEEPWAKE_SLOTS_PER_GPU={expected}" in argv
    # Bazel runs no more tests at once than --jobs, whose default is the cores.
    assert f"--jobs={max(2 * expected + 2 * expected // 2, cores)}" in argv


def test_run_matrix_keeps_the_last_runs_phase_trace_apart_from_this_ones(workspace):
    """Each GPU's memory-phase trace describes one run: the last one's moves to .prev before Bazel
    starts, so this run's summary never counts it (no cell of the fake bazel writes one)."""
    locks = workspace.parent / "locks"
    locks.mkdir()
    (locks / "gpu0.memory.trace.jsonl").write_text("{}\n")
    code, output, _ = run_script(
        workspace,
        "run_matrix.sh",
        [],
        [("//tests/sleep_wake:flags_mrv1_eager", {"t": "passed"}, "", ["gpu", "flags"])],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
    )
    assert code == 0, output
    assert (locks / "gpu0.memory.trace.jsonl.prev").read_text() == "{}\n"
    assert not (locks / "gpu0.memory.trace.jsonl").exists() and "memory phases over" not in output


def test_run_matrix_says_how_busy_the_hosts_cpus_were(workspace):
    """Cores or memory phases: whether more slots could help is read from the host's CPU time."""
    code, output, _ = run_script(
        workspace,
        "run_matrix.sh",
        [],
        [("//tests/sleep_wake:flags_mrv1_eager", {"t": "passed"}, "", ["gpu", "flags"])],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
    )
    assert code == 0, output
    assert re.search(r"run_matrix.sh: host CPUs busy \d+% of \d+ during bazel test", output), output
    # ... and by kind of process (tools/bench/host_cpu.py), with the tests' processes apart from the servers.
    assert re.search(
        r"run_matrix.sh: host CPU-s over \d+ s on \d+ cores: busy \d+ \(\d+%\); servers \d+, bazel \d+,"
        r" tests \d+, other \d+; unsampled -?\d+",
        output,
    ), output


def test_run_matrix_writes_a_run_record_fresh_then_warm(workspace):
    """Each run leaves sleepwake-run.json: the first on a host is fresh, the next warm; a red run says so."""
    flags = [("//tests/sleep_wake:flags_mrv1_eager", {"t": "passed"}, "", ["gpu", "flags"])]
    code, output, _ = run_script(workspace, "run_matrix.sh", [], flags, FAKE_NVIDIA_SMI_CSV=TWO_H200)
    assert code == 0 and "run record: " in output, output
    first = json.loads((workspace / "sleepwake-run.json").read_text())
    assert (first["machine"]["gpus"], first["matrix"]["status"], first["matrix"]["machine_state"]) == (
        2,
        "green",
        "fresh",
    )
    # The run's time: its GPU waves', and the wait after them for the CPU-only targets' own bazel test.
    assert len(first["matrix"]["waves_s"]) == 2 and first["matrix"]["elapsed_s"] == round(
        sum(first["matrix"]["waves_s"]) + first["matrix"]["cpu_wait_s"], 1
    )
    failed = [("//tests/sleep_wake:flags_mrv1_eager", {"t": "failed"}, "", ["gpu", "flags"])]
    code, output, _ = run_script(
        workspace, "run_matrix.sh", [], failed, FAKE_NVIDIA_SMI_CSV=TWO_H200, FAKE_BAZEL_RC="3"
    )
    second = json.loads((workspace / "sleepwake-run.json").read_text())
    assert code == 3 and (second["matrix"]["status"], second["matrix"]["machine_state"]) == ("red", "warm"), output


def _this_hosts_cpu() -> str | None:
    """The CPU model run_matrix.sh's record names here, read apart from run_record: /proc/cpuinfo's first
    `model name`, its spaces collapsed; None where the host names none."""
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        models = [line.split(":", 1)[1].split() for line in f if line.split(":", 1)[0].strip() == "model name"]
    return " ".join(models[0]) if models and models[0] else None


def test_run_matrix_appends_the_main_jobs_line_to_the_run_history(workspace, tmp_path):
    """After the main job (no targets, no filters) its record becomes a line of the history; a run of
    chosen targets or filters adds none, and a tree that is no git checkout adds none unless
    SLEEPWAKE_COMMIT names the commit."""
    base = tmp_path / "output_base"  # what bazel-testlogs resolves into: the identity sits beside execroot
    testlogs = base / "execroot" / "ws" / "bazel-out" / "k8-fastbuild" / "testlogs"
    (workspace / "bazel-testlogs").symlink_to(testlogs)
    identity = base / "external" / "sleepwake_gpu" / "identity.txt"
    identity.parent.mkdir(parents=True)
    identity.write_text("vllm: 0.26.0 record-sha256=6f3d\ngpus: 0, NVIDIA H200, 580.159.04, 143771 MiB\n")
    outputs = testlogs / "tests" / "sleep_wake" / "flags_mrv1_eager" / "test.outputs"
    outputs.mkdir(parents=True)
    timing = {"key": "server_timings", "start_mode": "zygote", "start_s": 6.0, "lease_wait_s": 0.0}
    timing.update(memory_phase_wait_s=0.0, memory_phases=0, stop_s=0.0)
    (outputs / "measurements.jsonl").write_text(json.dumps(timing) + "\n")
    history = tmp_path / "runs.jsonl"
    cell = [("//tests/sleep_wake:flags_mrv1_eager", {"t": "passed", "u": "passed"}, "", ["gpu", "flags"])]
    env = {
        "FAKE_NVIDIA_SMI_CSV": TWO_H200,
        "FAKE_BAZEL_TESTLOGS": str(testlogs),
        "SLEEPWAKE_RUN_HISTORY": str(history),
        "GIT_CEILING_DIRECTORIES": str(tmp_path),  # the scratch workspace is no git checkout
    }
    code, output, _ = run_script(workspace, "run_matrix.sh", [], cell, SLEEPWAKE_COMMIT="0123abc", **env)
    assert code == 0, output
    (line,) = [json.loads(text) for text in history.read_text().splitlines()]
    cores = len(os.sched_getaffinity(0))
    assert {k: line[k] for k in ("commit", "vllm", "machine", "machine_state", "cells", "cases", "status")} == {
        "commit": "0123abc",
        "vllm": "0.26.0",
        "machine": {"gpu": "NVIDIA H200", "gpus": 2, "cores": cores, "cpu": _this_hosts_cpu()},
        "machine_state": "fresh",
        "cells": 1,
        "cases": 2,
        "status": "green",
    }, output
    # The report it prints comes after the line and draws it.
    assert f"run history: 1 main-job runs in {history}, 0 red" in output, output
    for chosen in (["//tests/sleep_wake:flags_mrv1_eager"], ["--test_filter=t"]):
        code, output, _ = run_script(workspace, "run_matrix.sh", chosen, cell, SLEEPWAKE_COMMIT="0123abc", **env)
        assert code == 0 and len(history.read_text().splitlines()) == 1, output
    code, output, _ = run_script(workspace, "run_matrix.sh", [], cell, **env)
    assert code == 0 and "this tree is no git checkout; set SLEEPWAKE_COMMIT" in output, output
    assert len(history.read_text().splitlines()) == 1


WALK = (
    "//tests/sleep_wake:state_walk_mrv1_eager",
    {"test_walk": "passed"},
    "",
    ["gpu", "state_walk", "gpu_state_walk"],
)
FLAGS = ("//tests/sleep_wake:flags_mrv1_eager", {"test_flags": "passed"}, "", ["gpu", "flags"])
WALK_SHARDS = shard_count("state_walk", "eager", "http")  # WALK's cell's, and FAKE_WALK's


def _host_answer(lock_dir, present: bool):
    """The zygote host's ping answer once one serves (present) or None once none does."""
    from tools.launcher import zygote_host

    for _ in range(200):
        answer = zygote_host.ping(str(lock_dir))
        if (answer is not None) == present:
            return answer
        time.sleep(0.05)  # polled: a host stopped by the script's exit takes up to its 1 s select to go
    raise AssertionError(f"a zygote host {'never answered' if present else 'still answers'} on {lock_dir}")


def test_run_matrix_leaves_its_zygote_host_for_the_next_run_unless_told_not_to(workspace):
    locks = workspace.parent / "locks"
    cell = [("//tests/sleep_wake:flags_mrv1_eager", {"t": "passed"}, "", ["gpu", "flags"])]
    code, output, argv = run_script(
        workspace, "run_matrix.sh", [], cell, FAKE_NVIDIA_SMI_CSV=TWO_H200, SLEEPWAKE_KEEP_ZYGOTES_S="600"
    )
    try:
        assert code == 0, output
        assert "run_matrix.sh: the zygote host waits 600 s after this run for the next" in output
        assert "--test_env=SLEEPWAKE_ZYGOTE_IDLE_S=600" in argv  # each zygote waits as long
        # ... also one a golden action created (the cells' key), which the cells then fork from.
        assert "--action_env=SLEEPWAKE_ZYGOTE_IDLE_S=600" in argv
        kept = _host_answer(locks, present=True)
        # The next run's cells reach the same host, whose zygotes have imported vLLM already.
        code, output, _ = run_script(
            workspace, "run_matrix.sh", [], cell, FAKE_NVIDIA_SMI_CSV=TWO_H200, SLEEPWAKE_KEEP_ZYGOTES_S="600"
        )
        assert code == 0 and _host_answer(locks, present=True)["pid"] == kept["pid"], output
    finally:
        os.kill(_host_answer(locks, present=True)["pid"], signal.SIGTERM)
    _host_answer(locks, present=False)
    code, output, argv = run_script(
        workspace, "run_matrix.sh", [], cell, FAKE_NVIDIA_SMI_CSV=TWO_H200, SLEEPWAKE_KEEP_ZYGOTES_S="0"
    )
    assert code == 0 and not [a for a in argv if "ZYGOTE_IDLE" in a], output
    # At once again: the last run's host may still be on its way out; this run's waits for its lock.
    code, output, _ = run_script(
        workspace, "run_matrix.sh", [], cell, FAKE_NVIDIA_SMI_CSV=TWO_H200, SLEEPWAKE_KEEP_ZYGOTES_S="0"
    )
    assert code == 0 and "no zygote host answered" not in output, output
    _host_answer(locks, present=False)  # stopped with the run
    code, output, _ = run_script(
        workspace, "run_matrix.sh", [], cell, FAKE_NVIDIA_SMI_CSV=TWO_H200, SLEEPWAKE_KEEP_ZYGOTES_S="ten minutes"
    )
    assert code == 2 and "SLEEPWAKE_KEEP_ZYGOTES_S=ten minutes is not a whole number" in output, output


def test_run_matrix_runs_the_walk_first_in_a_wave_of_its_own(workspace):
    """Beside the walk's shards, other cells' starts hold the allocation phase its sleeps wait for."""
    cores = len(os.sched_getaffinity(0))
    slots_per_gpu = cores  # more slots than cores: the walk wave is capped by the cores
    # An earlier run's result, which the report must tell from this run's by the waves' build events.
    write_xml(
        workspace / "bazel-testlogs" / "tests" / "sleep_wake" / "latency_mrv2_graph" / "test.xml",
        {"test_latency": "passed"},
    )
    _walk_records(workspace / "bazel-testlogs", "state_walk_mrv1_eager", range(WALK_SHARDS))  # a full walk
    code, output, _ = run_script(
        workspace,
        "run_matrix.sh",
        [],
        [WALK, FLAGS],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
        FAKE_BAZEL_TESTLOGS=str(workspace / "bazel-testlogs"),
        SLEEPWAKE_SLOTS_PER_GPU=str(slots_per_gpu),
    )
    assert code == 0, output
    waves = [json.loads(line) for line in (workspace.parent / "locks" / "waves.jsonl").read_text().splitlines()]
    assert [w["wave"] for w in waves] == ["walk", "rest"]  # for the trace's summary per wave
    assert waves[0]["ended"] <= waves[1]["began"]
    # Where the cells' time went, read from this run's results (the fake cells recorded no server timings).
    assert "cell time: no GPU cell recorded server timings" in output
    # --config=gpu's own filter (.bazelrc) stays in each wave's.
    filters = [[a for a in argv if a.startswith("--test_tag_filters")] for argv in gpu_invocations(workspace)]
    assert filters == [
        ["--test_tag_filters=gpu_state_walk,-vllm_overlay"],
        ["--test_tag_filters=gpu,-gpu_state_walk,-vllm_overlay"],
    ]
    assert "run_matrix.sh: wave 1 of 2 (walk): --test_tag_filters=gpu_state_walk,-vllm_overlay" in output
    # The walk wave runs no more tests at once than the cores (below them, the slots); the rest wave a job
    # per slot and the cells waiting for a lent server.
    test_jobs = [[a for a in argv if a.startswith("--local_test_jobs=")] for argv in gpu_invocations(workspace)]
    assert test_jobs[0] == [f"--local_test_jobs={min(2 * slots_per_gpu, cores)}"], test_jobs
    assert test_jobs[1] == [f"--local_test_jobs={2 * slots_per_gpu + 2 * slots_per_gpu // 2}"], test_jobs
    assert re.search(r"run_matrix.sh: bazel test took [\d.]+ s in 2 waves \([\d.]+ [\d.]+ s\)", output), output
    assert "ran_tests: 2 test case(s) ran" in output
    # The report reads both waves' build events: this run's cells are told from the earlier one (stale).
    assert "the results of `bazel test //tests/sleep_wake/...; bazel test //tests/sleep_wake/...`" in output, output
    assert re.search(r"^2/2 GPU cells passed.*1 earlier result\(s\) in these testlogs not counted", output, re.M), (
        output
    )


FAKE_WALK = ("//tests/sleep_wake:state_walk_fake_mrv1_eager", {"test_walk": "passed"}, "", ["fake", "state_walk"])
UNIT: tuple = ("//tests/sleep_wake/unit:oracle_unit_test", {"test_oracle": "passed"}, "", [])
REUSE = ("//tests/sleep_wake/reuse:reuse_equivalence_test", {"test_reuse": "passed"}, "", ["fake"])


def _labels(bep) -> set[str]:
    events = [json.loads(line) for line in bep.read_text().splitlines()]
    return {e["id"]["testResult"]["label"] for e in events if "testResult" in e["id"]}


def test_run_matrix_runs_no_cpu_only_target_in_a_gpu_wave(workspace):
    """A target without the gpu tag (the fake tier, a unit test, the reuse equivalence) runs beside the GPU
    waves in a bazel test of its own, in its own output base; one carrying a GPU class's plain tag
    (state_walk) too. Counted from each invocation's build events, as the report counts them."""
    _walk_records(workspace / "bazel-testlogs", "state_walk_mrv1_eager", range(WALK_SHARDS))
    _walk_records(
        workspace.parent / "output_base-cpu-only" / "testlogs", "state_walk_fake_mrv1_eager", range(WALK_SHARDS)
    )
    code, output, _ = run_script(
        workspace,
        "run_matrix.sh",
        [],
        [WALK, FLAGS, FAKE_WALK, UNIT, REUSE],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
        FAKE_BAZEL_TESTLOGS=str(workspace / "bazel-testlogs"),
    )
    assert code == 0, output
    assert _labels(workspace / ".bazel-bep-wave1.json") == {WALK[0]}
    assert _labels(workspace / ".bazel-bep-wave2.json") == {FLAGS[0]}
    assert _labels(workspace / ".bazel-bep-wave-cpu.json") == {FAKE_WALK[0], UNIT[0], REUSE[0]}
    cpu = [argv for argv in invocations(workspace) if cpu_only(argv)]
    assert len(cpu) == 1 and "--test_tag_filters=-gpu,-vllm_overlay" in cpu[0] and "--symlink_prefix=/" in cpu[0]
    assert f"--output_base={workspace.parent / 'output_base'}-cpu-only" in cpu[0]
    assert f"--local_test_jobs={max(len(os.sched_getaffinity(0)) // 4, 1)}" in cpu[0]
    # The report finds their results in that output base, and says where they ran.
    assert re.search(r"fake tier: 1/1 passed", output), output
    assert re.search(
        r"^CPU-only targets: 3 ran \(fake tier 2, other 1\): 3 in a bazel test of their own beside the GPU waves"
        r" \([+-][\d.]+ to [+-][\d.]+ s of the GPU waves' [\d.]+ s\): (off|on) the GPU job's critical path",
        output,
        re.M,
    ), output
    assert "ran_tests: 5 test case(s) ran" in output  # every invocation's results are the run's
    # The run record keeps each unit in its wave for the replay (tools/bench/replay.py).
    replay = json.loads((workspace / "sleepwake-run.json").read_text())["replay"]
    assert [w["name"] for w in replay["waves"]] == ["walk", "rest", "cpu"]
    assert sorted((row[1], row[2]) for row in replay["units"]) == [("cpu", 0)] * 3 + [("rest", 1), ("walk", 1)]
    # ... which the report, written after it, draws: where the time went, wave by wave, and the replay.
    assert re.search(r"^time spent, wave walk: [\d.]+ s x 2 units at once", output, re.M), output
    assert re.search(r"^replay \(tools/bench/replay.py, .*\): on 8 GPUs, 128 cores this run would take", output, re.M)


def test_run_matrix_judges_the_waves_together_for_a_filter_and_for_failures(workspace):
    # The filter names a walk test only: the second wave runs nothing, the run as a whole did.
    code, output, _ = run_script(
        workspace,
        "run_matrix.sh",
        ["--test_filter=test_walk"],
        [WALK, (FLAGS[0], SKIPPED, NOTHING_MATCHED, FLAGS[3])],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
    )
    assert code == 0 and "ran_tests: 1 test case(s) ran" in output, output
    # A target of one wave only: the other wave's "no test targets" is said to be expected.
    code, output, _ = run_script(workspace, "run_matrix.sh", [FLAGS[0]], [FLAGS], FAKE_NVIDIA_SMI_CSV=TWO_H200)
    assert code == 0 and "run_matrix.sh: wave 1 has none of the targets asked for" in output, output
    # A failing wave does not stop the next one; its exit code stays the run's.
    code, output, _ = run_script(
        workspace, "run_matrix.sh", [], [WALK, FLAGS], FAKE_NVIDIA_SMI_CSV=TWO_H200, FAKE_BAZEL_RC="3"
    )
    assert code == 3 and len(gpu_invocations(workspace)) == 3 * 2, output
    # A wave in which some targets failed to build ran the others (--keep_going): the next wave runs, the
    # results so far are read, and the run fails.
    code, output, _ = run_script(
        workspace,
        "run_matrix.sh",
        [],
        [WALK, FLAGS],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
        FAKE_BAZEL_RC="1",
        FAKE_BAZEL_TESTLOGS=str(workspace / "bazel-testlogs"),
    )
    assert code == 1 and len(gpu_invocations(workspace)) == 3 * 2 + 2, output
    assert "run_matrix.sh: wave 1: some targets failed to build" in output
    assert "cell time: no GPU cell recorded server timings" in output  # this run's results, read


def _walk_records(testlogs, cell: str, shards) -> None:
    """The walk_coverage records a walk cell's shards leave (tests/core/walk/coverage.py), in the testlogs
    where the fake bazel writes the cell's test.xml: each shard walked one pair of a door of one pair per
    shard of the spec's, each pair one that reaches the worker (so the cell alone walks its door)."""
    door = WALK_SHARDS
    outputs = testlogs / "tests" / "sleep_wake" / cell / "test.outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    rows = [
        {"key": "walk_coverage", "value": 1, "shard": s, "visited_pairs": [f"pair {s}"], "door_pairs": door}
        | {"worker_visited_pairs": [f"pair {s}"], "worker_pairs": door}
        | {"door_probes": 0, "terminal_probes": [], "completed": True, "replay": False}
        for s in shards
    ]
    (outputs / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_run_matrix_and_test_sh_exit_partial_when_a_walk_cell_walked_part_of_its_door(workspace):
    """Every test passed, but the walk cell's shards together left pairs of its door unwalked (a filter left
    shards out): exit 5 and a partial run record, never green; with every shard's record, green."""
    shards = WALK_SHARDS
    testlogs = dict(FAKE_BAZEL_TESTLOGS=str(workspace / "bazel-testlogs"))
    _walk_records(workspace / "bazel-testlogs", "state_walk_mrv1_eager", [0])
    code, output, _ = run_script(
        workspace,
        "run_matrix.sh",
        ["--test_filter=TestStateWalkShard0"],
        [WALK],
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
        **testlogs,
    )
    assert code == 5 and "run_matrix.sh: PARTIAL (exit 5)" in output, output
    assert f"{shards - 1} of {shards} shards recorded no coverage" in output
    assert json.loads((workspace / "sleepwake-run.json").read_text())["matrix"]["status"] == "partial"
    fake_walk = ("//tests/sleep_wake:state_walk_fake_mrv1_eager", {"test_walk": "passed"}, "", ["fake", "state_walk"])
    _walk_records(workspace / "bazel-testlogs", "state_walk_fake_mrv1_eager", [0])
    code, output, _ = run_script(workspace, "test.sh", ["--test_filter=TestStateWalkShard0"], [fake_walk], **testlogs)
    assert code == 5 and "test.sh: PARTIAL (exit 5)" in output, output
    _walk_records(workspace / "bazel-testlogs", "state_walk_fake_mrv1_eager", range(shards))
    code, output, _ = run_script(workspace, "test.sh", [], [fake_walk], **testlogs)
    assert code == 0 and "walk gate: 1 state walk cell(s) ran, each full" in output, output


@pytest.mark.parametrize(
    "tag_filter, targets, jobs",
    [
        # No walk wave, so no walk wave's cap: a job per slot, the CPU targets' share, the lent servers' waiters.
        ("--test_tag_filters=flags", [WALK, FLAGS], lambda cores: 16 + max(cores // 4, 1) + 16 // 2),
        # The walk's GPU shards alone: the walk wave's cap, the cores (here fewer than the 16 slots).
        ("--test_tag_filters=gpu_state_walk,-vllm_overlay", [WALK], lambda cores: min(cores, 16)),
    ],
)
def test_run_matrix_runs_a_callers_own_tag_filters_as_one_invocation(workspace, tag_filter, targets, jobs):
    code, output, argv = run_script(
        workspace,
        "run_matrix.sh",
        [tag_filter],
        targets,
        FAKE_NVIDIA_SMI_CSV=TWO_H200,
        SLEEPWAKE_SLOTS_PER_GPU="8",
    )
    assert code == 0, output
    assert len(invocations(workspace)) == 1 and "wave" not in output
    assert [a for a in argv if a.startswith("--test_tag_filters")] == [tag_filter]
    cores = len(os.sched_getaffinity(0))
    assert [a for a in argv if a.startswith("--local_test_jobs=")] == [f"--local_test_jobs={jobs(cores)}"], argv


@pytest.mark.parametrize(
    "env,message",
    [
        ({}, "nvidia-smi failed (exit 9"),
        ({"FAKE_NVIDIA_SMI_CSV": TWO_H200, "CUDA_VISIBLE_DEVICES": "5"}, "'5' is not a GPU of this host"),
        ({"FAKE_NVIDIA_SMI_CSV": TWO_H200, "SLEEPWAKE_SLOTS_PER_GPU": "many"}, "not a whole number >= 1"),
    ],
)
def test_run_matrix_without_a_usable_gpu_stops_before_bazel(workspace, env, message):
    code, output, argv = run_script(workspace, "run_matrix.sh", **env)
    assert code == 1, output
    assert message in output and "run_matrix.sh: stopped before Bazel" in output
    assert argv is None, "bazel must not run"


def test_bazelrc_gives_the_golden_actions_the_cells_gpu_settings():
    """A golden's server (tools/goldens.bzl) shares the GPU with the cells: the settings that decide how a
    server leases and starts reach actions as they reach tests, with the same defaults."""
    with open(os.path.join(WORKSPACE, ".bazelrc"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    tests = _variables(lines, "test:gpu --test_env=")
    actions = _variables(lines, "build:gpu --action_env=")
    assert actions and actions == tests


def _variables(lines: list[str], flag: str) -> dict[str, str]:
    """{NAME: "=value", or "" where the line passes the variable through} of each .bazelrc line `flag`NAME."""
    variables = {}
    for line in lines:
        if line.startswith(flag):
            setting = re.match(re.escape(flag) + r"([A-Z_]+)(=.*)?$", line)
            assert setting, f"a {flag} line sets no variable: {line!r}"
            variables[setting.group(1)] = setting.group(2) or ""
    return variables
