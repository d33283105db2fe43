"""Measures how fast the suite runs on this GPU runner, in one bounded run, and writes JSON and Markdown.

    bazel run --config=gpu //tools/bench -- --out bench.json      # then bench.md next to it

Phases, in order, each cut short (and reported "not measured") when the budget (--budget_s) runs out:
  1. server starts through the launcher (--runner, --execution_mode, the synthetic checkpoint), each to
     GET /health 200 and torn down with the release check: plain and idle; zygote with a cold zygote
     (its import included); zygote warm; then --contention servers at once on GPU 0, plain and zygote.
     Each start's phases come from its server log (start_phases.py). The bench's leases and zygote
     live in a lock dir of its own, so its zygote starts cold.
  2. one cell (--cell) with `bazel test --nocache_test_results`, twice: the first run warms the
     cells' zygote, the second is the warm cell.
  3. the whole matrix: tools/run_matrix.sh --nocache_test_results (the default settings), Bazel's
     elapsed time, the GPU servers' starts (launch to /health, from the timings the cells recorded),
     and where the GPU cells' time went: slot waits, starts, waits on neighbours' memory phases,
     teardowns, and the rest (bazel_runs.cell_breakdown); what each kind of memory phase waited for
     (phase_trace, from the GPUs' traces) and how busy the host's CPUs were.
For 2 and 3 the bench keeps a zygote host on the default lock dir (cells inside Bazel cannot start one).
Run it on an otherwise idle runner: it takes every GPU for the matrix.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from absl import app, flags

from tools.bench import bazel_runs, bench_table, phase_trace, start_phases
from tools.launcher import config as config_lib
from tools.launcher import unix_socket, zygote_client, zygote_host
from tools.launcher.config import ServerConfig
from tools.launcher.server import VllmServer, read_log

flags.DEFINE_string(
    "out",
    None,
    "Where the JSON goes (relative to the directory bazel run was called from);"
    " the Markdown table goes next to it (.md).",
    required=True,
)
flags.DEFINE_float(
    "budget_s",
    600.0,
    "Wall-clock budget of the whole run; a phase that does not fit is cut"
    " and reported as not measured (the whole run took 332 s on 2 x H200).",
)
flags.DEFINE_enum("runner", "mrv1", list(config_lib.RUNNERS), "Runner of the measured server starts.")
flags.DEFINE_enum("execution_mode", "eager", list(config_lib.EXECUTION_MODES), "Mode of the measured starts.")
flags.DEFINE_integer("contention", 8, "Servers started at once on GPU 0 for the contention cases (0: none).")
flags.DEFINE_string("cell", "//tests/sleep_wake:scheduler_gate_mrv1_eager", "The cell timed end to end (empty: skip).")
flags.DEFINE_enum("matrix", "run", ["run", "skip"], "run: time tools/run_matrix.sh; skip: leave it out.")
flags.DEFINE_string("bazel", "bazel", "The Bazel binary for the cell and the matrix.")

FLAGS = flags.FLAGS
TEARDOWN_RESERVE_S = 20.0  # stops and NVML release checks after the last start of a case
# What the matrix phase measures (bench_table.TARGETS).
MATRIX_KEYS = ("matrix_elapsed_s", "matrix_start_median_s", "longest_cell_s", "wait_share")


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def _workspace() -> str:
    return os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )


def _user_path(path: str) -> str:
    return os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), path)


def machine() -> dict:
    try:
        gpus = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            .stdout.strip()
            .splitlines()
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        gpus = ["nvidia-smi failed: %s" % e]
    return {"gpus": gpus, "cpus": os.cpu_count(), "host": socket.gethostname()}


def vllm_identity() -> str:
    """The first lines of @sleepwake_gpu//:identity.txt (vLLM, torch, GPU), as the cells' cache key."""
    for runfiles in (os.environ.get("RUNFILES_DIR"), os.environ.get("PYTHON_RUNFILES"), sys.argv[0] + ".runfiles"):
        path = os.path.join(runfiles or "", "sleepwake_gpu", "identity.txt")
        if runfiles and os.path.exists(path):
            with open(path) as f:
                return "; ".join(line.strip() for line in f.read().splitlines()[:4] if line.strip())
    try:
        import vllm  # the GPU toolchain has it

        return "vllm %s" % vllm.__version__
    except ImportError as e:
        return "unknown (%s)" % e


# -- phase 1: server starts -------------------------------------------------------------------------


def _start_many(n: int, cfg: ServerConfig, environ: dict) -> list[dict]:
    """Starts n servers at once (one thread each, which stays alive while its server runs: the
    supervisor's PDEATHSIG follows the starting thread), then stops them all; one record per server."""
    records: list[dict] = [{} for _ in range(n)]
    started = threading.Barrier(n + 1)
    release = threading.Event()

    def run(i):
        server = VllmServer(cfg, lease=True, environ=environ)
        running = True
        begin = time.monotonic()
        try:
            server.start()
            records[i].update(
                seconds=round(time.monotonic() - begin, 3),
                start_mode=server.start_mode,
                log=server.log_path,
                start_cpu_s=round(server.timings.start_cpu_s, 2),
            )
        except Exception as e:  # recorded; the other servers still count
            records[i].update(error="%s: %s" % (type(e).__name__, str(e).splitlines()[0]))
            running = False
        started.wait()
        release.wait()
        if running:
            try:
                server.stop()
            except Exception as e:
                records[i].update(stop_error="%s: %s" % (type(e).__name__, str(e).splitlines()[0]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    started.wait()
    release.set()
    for thread in threads:
        thread.join()
    for record in records:
        if record.get("log"):
            parsed = start_phases.parse(read_log(record["log"]))
            record.update(phases=parsed["phases"], reported=parsed["reported"], memory_phase=parsed["memory_phase"])
    return records


def _medians(records: list[dict], field: str, keys) -> dict:
    """key -> the median of records' field[key] over the records that have it."""
    out = {}
    for key in keys:
        values = [r[field][key] for r in records if key in r.get(field, {})]
        if values:
            out[key] = round(statistics.median(values), 2)
    return out


def _case(name: str, mode: str, n: int, records: list[dict]) -> dict:
    seconds = [r["seconds"] for r in records if "seconds" in r]
    cpu = [r["start_cpu_s"] for r in records if "start_cpu_s" in r]
    return {
        "name": name,
        "start_mode": mode,
        "concurrency": n,
        "servers": records,
        "memory_phase": _medians(records, "memory_phase", [k for k, _ in bench_table.MEMORY_COLUMNS]),
        "median_s": round(statistics.median(seconds), 2) if seconds else None,
        "max_s": round(max(seconds), 2) if seconds else None,
        "phases": _medians(records, "phases", [p for p, _, _ in start_phases.PHASES]),
        "cpu_median_s": round(statistics.median(cpu), 2) if cpu else None,
        "modes_seen": sorted({r.get("start_mode") for r in records if r.get("start_mode")}),
        "errors": [r["error"] for r in records if "error" in r],
    }


def measure_starts(result: dict, budget: Budget, out_dir: str) -> None:
    lock_dir = tempfile.mkdtemp(prefix="sleepwake-bench-locks-", dir="/tmp")
    environ = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
    environ.pop("TEST_TMPDIR", None)
    result["start_config"] = "%s-%s, synthetic Qwen3, GPU 0, leases in %s" % (
        FLAGS.runner.upper(),
        FLAGS.execution_mode,
        lock_dir,
    )
    # The zygote's preloads (config.VLLM_PRELOAD) against none: a zygote of its own (another key), so the
    # cold case pays its import, the warm one and the contention one compare the forks alone.
    cases = [
        ("plain, idle", "plain", 1, "auto"),
        ("zygote, cold (its import included)", "zygote", 1, "auto"),
        ("zygote, warm", "zygote", 1, "auto"),
        ("zygote without preloads, cold", "zygote", 1, "none"),
        ("zygote without preloads, warm", "zygote", 1, "none"),
    ]
    if FLAGS.contention > 0:
        cases += [
            ("plain, %d at once" % FLAGS.contention, "plain", FLAGS.contention, "auto"),
            ("zygote, %d at once" % FLAGS.contention, "zygote", FLAGS.contention, "auto"),
            ("zygote without preloads, %d at once" % FLAGS.contention, "zygote", FLAGS.contention, "none"),
        ]
    try:
        for name, mode, n, preload in cases:
            left = budget.left() - TEARDOWN_RESERVE_S
            if left < 30:
                result["notes"].append("start case %r not run: %.0f s of budget left" % (name, budget.left()))
                continue
            cfg = ServerConfig(
                runner=FLAGS.runner,
                execution_mode=FLAGS.execution_mode,
                lock_dir=lock_dir,
                slots_per_gpu=max(n, 1),
                start_mode=mode,
                zygote_preload=preload,
                startup_timeout_s=left,
                lease_timeout_s=left,
                zygote_idle_s=600,
                zygote_host_idle_s=60,
                log_dir=os.path.join(out_dir, "bench-logs"),
            )
            print("bench: starting %s ..." % name, flush=True)
            case = _case(name, mode, n, _start_many(n, cfg, environ))
            print(
                "bench: %s: median %s s (CPU %s s), max %s s, modes %s%s"
                % (
                    name,
                    case["median_s"],
                    case["cpu_median_s"],
                    case["max_s"],
                    case["modes_seen"],
                    ", errors %s" % case["errors"] if case["errors"] else "",
                ),
                flush=True,
            )
            result["starts"].append(case)
    finally:
        _stop_host(lock_dir)
    by_name = {c["name"]: c for c in result["starts"]}
    warm = by_name.get("zygote, warm")
    if warm and warm["median_s"] is not None and warm["modes_seen"] == ["zygote"]:
        result["measured"]["warm_start_s"] = warm["median_s"]
    else:
        result["not_measured"]["warm_start_s"] = (
            "the warm zygote case did not run"
            if not warm
            else "the warm case did not start through the zygote: %s %s" % (warm["modes_seen"], warm["errors"][:1])
        )


def _stop_host(lock_dir: str) -> None:
    """Stops the host serving lock_dir (and so its zygotes), if one answers."""
    answer = zygote_host.ping(lock_dir)
    if answer is not None:
        os.kill(answer["pid"], signal.SIGTERM)


# -- phases 2 and 3: Bazel --------------------------------------------------------------------------


def _bazel(argv: list[str], timeout_s: float, log_path: str) -> tuple[str, float, bool]:
    """(output, wall seconds, finished) of a command in the workspace; past timeout_s it gets SIGINT
    (Bazel then cancels its tests and tears their servers down) and 60 s later SIGKILL."""
    begin = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=_workspace(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finished = True
        try:
            proc.wait(timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            finished = False
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    with open(log_path) as f:
        return f.read(), time.monotonic() - begin, finished


def _ensure_cells_host(result: dict):
    """A zygote host on the cells' lock dir, which they cannot start from inside Bazel; returns the
    process if the bench started it."""
    lock_dir = ServerConfig().lock_dir
    try:
        unix_socket.connect(os.path.join(lock_dir, zygote_host.HOST_SOCKET), 5).close()
        return None
    except OSError:
        result["notes"].append("started a zygote host on %s for the cells" % lock_dir)
        return zygote_client.start_host(lock_dir, idle_s=120, environ=os.environ)


def measure_cell(result: dict, budget: Budget, out_dir: str) -> None:
    if not FLAGS.cell:
        result["not_measured"]["warm_cell_s"] = "--cell is empty"
        return
    runs = []
    for label in ("first", "warm"):
        if budget.left() < 30:
            result["notes"].append("cell run %r not run: %.0f s of budget left" % (label, budget.left()))
            break
        argv = [FLAGS.bazel, "test", "--config=gpu", "--nocache_test_results", FLAGS.cell]
        output, wall, finished = _bazel(argv, budget.left(), os.path.join(out_dir, "bench-cell-%s.log" % label))
        summary = bazel_runs.target_results(output).get(FLAGS.cell, {})
        runs.append(
            {
                "label": label,
                "wall_s": round(wall, 2),
                "test_s": summary.get("seconds"),
                "status": summary.get("status") if finished else "cut at the budget",
                "bazel_elapsed_s": bazel_runs.elapsed_s(output),
            }
        )
    result["cell"] = {
        "target": FLAGS.cell,
        "command": "bazel test --config=gpu --nocache_test_results %s" % FLAGS.cell,
        "runs": runs,
    }
    warm = [r for r in runs if r["label"] == "warm" and r["status"] == "PASSED"]
    if warm:
        result["measured"]["warm_cell_s"] = warm[0]["wall_s"]
    else:
        result["not_measured"]["warm_cell_s"] = "no passing warm run: %s" % runs


def measure_matrix(result: dict, budget: Budget, out_dir: str) -> None:
    if FLAGS.matrix == "skip":
        for key in MATRIX_KEYS:
            result["not_measured"][key] = "--matrix=skip"
        return
    argv = [os.path.join(_workspace(), "tools", "run_matrix.sh"), "--nocache_test_results"]
    left = budget.left()
    output, wall, finished = _bazel(argv, left, os.path.join(out_dir, "bench-matrix.log"))
    elapsed = bazel_runs.elapsed_s(output)
    results = bazel_runs.target_results(output)
    failed = sorted(t for t, r in results.items() if r["status"] != "PASSED")
    cells_dir = os.path.join(_workspace(), "bazel-testlogs", "tests", "sleep_wake")
    units = bazel_runs.test_units(cells_dir)
    timings = bazel_runs.gpu_timings(units)
    modes = dict(collections.Counter(t["start_mode"] for t in timings))
    result["matrix"] = {
        "command": " ".join(shlex.quote(a) for a in argv),
        "wall_s": round(wall, 2),
        "elapsed_s": elapsed,
        "critical_path_s": bazel_runs.critical_path_s(output),
        "waves_s": bazel_runs.wave_seconds(output),
        "targets": len(results),
        "failed": failed,
        "status": (
            "cut after %.0f s (budget)" % left
            if not finished
            else "passed"
            if not failed and results
            else "failed: %s" % failed
        ),
        "starts": bazel_runs.summarise(t["start_s"] for t in timings),
        "start_modes": modes,
        "breakdown": bazel_runs.cell_breakdown(units, elapsed),
        # What the waits were for, and whether the cores bound the slots.
        "memory_phases": phase_trace.summaries(ServerConfig().lock_dir),
        "host_cpu_busy": bazel_runs.host_cpu_busy(output),
    }
    values = bazel_runs.matrix_measures(units, elapsed) if finished else {}
    for key in MATRIX_KEYS:
        if values.get(key) is not None:
            result["measured"][key] = values[key]
        else:
            result["not_measured"][key] = result["matrix"]["status"]


def main(argv) -> int:
    if len(argv) > 1:
        raise app.UsageError("unexpected arguments %s" % argv[1:])
    out = _user_path(FLAGS.out)
    out_dir = os.path.dirname(os.path.abspath(out))
    os.makedirs(out_dir, exist_ok=True)
    budget = Budget(FLAGS.budget_s)
    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "vllm": vllm_identity(),
        "command": "bazel run --config=gpu //tools/bench -- " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "starts": [],
        "measured": {},
        "not_measured": {},
        "notes": [],
    }
    host = None
    try:
        measure_starts(result, budget, out_dir)
        if FLAGS.cell or FLAGS.matrix == "run":
            host = _ensure_cells_host(result)
        measure_cell(result, budget, out_dir)
        measure_matrix(result, budget, out_dir)
    finally:
        if host is not None:
            host.terminate()
            host.wait(timeout=60)
        result["targets"] = bench_table.targets(result)
        with open(out, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
        markdown = os.path.splitext(out)[0] + ".md"
        with open(markdown, "w") as f:
            f.write(bench_table.markdown(result))
        print("bench: wrote %s and %s\n\n%s" % (out, markdown, bench_table.markdown(result)), flush=True)
    return 0


if __name__ == "__main__":
    app.run(main)
