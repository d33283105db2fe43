"""What a `bazel test` run says about time: Bazel's elapsed time and per-target results from its
output, and where the GPU cells' time went: the server timings they recorded (measurements.jsonl, key
server_timings, tools/launcher/timings.py)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import sys
from xml.etree import ElementTree

from tools import matrix
from tools.bench import host_cpu
from tools.report import reading
from tools.results import testlogs

_ELAPSED = re.compile(r"^INFO: Elapsed time: ([\d.]+)s", re.M)
_CRITICAL = re.compile(r"^INFO: Elapsed time: [\d.]+s, Critical Path: ([\d.]+)s", re.M)
# tools/run_matrix.sh's line after the run: "run_matrix.sh: host CPUs busy 63% of 16 during bazel test"
_CPU_BUSY = re.compile(r"^run_matrix\.sh: host CPUs busy (\d+)% of (\d+) during bazel test", re.M)
# tools/run_matrix.sh's line after its waves: "run_matrix.sh: bazel test took 271.3 s in 2 waves (150.2 121.1 s)"
_WAVES = re.compile(r"^run_matrix\.sh: bazel test took ([\d.]+) s in \d+ waves \(([\d. ]+) s\)", re.M)
# "//tests/sleep_wake:flags_mrv1_eager      PASSED in 23.1s", "(cached) PASSED in 3.2s",
# "FAILED in 2 out of 2 in 12.0s", "TIMEOUT in 900.1s"
_TARGET = re.compile(r"^(//\S+)\s+(\(cached\) )?(PASSED|FAILED|FLAKY|TIMEOUT|NO STATUS)\b(?:.* in ([\d.]+)s)?", re.M)


def elapsed_s(output: str) -> float | None:
    """Bazel's own "Elapsed time" (the last one, for output holding several commands); for run_matrix.sh's
    waves, the time of all of them."""
    waves = _WAVES.findall(output)
    if waves:
        return float(waves[-1][0])
    found = _ELAPSED.findall(output)
    return float(found[-1]) if found else None


def wave_seconds(output: str) -> list[float]:
    """Each of run_matrix.sh's waves' time, in order ([] for a run of one invocation)."""
    found = _WAVES.findall(output)
    return [float(x) for x in found[-1][1].split()] if found else []


def host_cpu_busy(output: str) -> dict | None:
    """How busy the host's CPUs were while run_matrix.sh's Bazel ran: {"share": 0..1, "cpus": N}."""
    found = _CPU_BUSY.findall(output)
    return {"share": int(found[-1][0]) / 100, "cpus": int(found[-1][1])} if found else None


def critical_path_s(output: str) -> float | None:
    """Bazel's critical path of the last command: the longest chain of actions, here the slowest cell;
    for run_matrix.sh's waves, which run one after the other, the sum of theirs."""
    found = _CRITICAL.findall(output)
    count = len(wave_seconds(output)) or 1
    return round(sum(float(f) for f in found[-count:]), 1) if found else None


def target_results(output: str) -> dict:
    """target -> {"status", "cached", "seconds"} from Bazel's test summary."""
    return {
        m.group(1): {
            "status": m.group(3),
            "cached": bool(m.group(2)),
            "seconds": float(m.group(4)) if m.group(4) else None,
        }
        for m in _TARGET.finditer(output)
    }


FAKE_START_MODE = "fake"
# Where a GPU cell's time goes, in server_timings' fields; the rest of the cell's time is its tests'
# own requests and checks, pytest and the interpreter.
CELL_PHASES = (
    ("lease_wait_s", "waiting for a GPU slot"),
    ("start_s", "server starts (launch to GET /health 200)"),
    ("memory_phase_wait_s", "waiting on GPU neighbours' memory phases"),
    ("stop_s", "teardowns and NVML release checks"),
)
LEASE_WAIT = CELL_PHASES[0][0]
# The CPU seconds each server's process tree spent (tools/launcher/timings.py): None in older logs.
CPU_KEYS = ("start_cpu_s", "serve_cpu_s")


def suite_seconds(xml_path: str) -> float:
    """A unit's own time: its JUnit testsuites' time (pytest's session, fixtures included)."""
    root = ElementTree.parse(xml_path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return sum(float(suite.get("time") or 0) for suite in suites)


def test_units(testlogs_dir: str, only: set | None = None, attempt_s: dict | None = None) -> list[dict]:
    """Every test unit under testlogs_dir: a cell, or each shard of a sharded one (Bazel runs shards
    apart, so a shard is what occupies a slot). Each: "unit" (cell[/shard_K_of_N]), "cell", "seconds"
    (suite_seconds), "bazel_s": Bazel's seconds of its attempt, None where the build events give none,
    "outcomes": its test cases' {"passed", "failed", "skipped"} counts, the "timings"
    (server_timings) it recorded, with their "cell" and "start_mode", and "test_cpu": its test process's
    CPU seconds (test_process_cpu), None where it recorded none, "walk_steps": the (time, operation
    token) of each walk_step it recorded, in time order, "walk_races": its walk_race records, and "xml":
    its test.xml's real path.
    only: the real paths of the test.xml files to keep; attempt_s: real path of a test.xml -> Bazel's
    seconds of its attempt (an invocation's xmls and attempt_s: tools/report/reading.py)."""
    units: list[dict] = []
    if not os.path.isdir(testlogs_dir):
        return units
    for cell in sorted(os.listdir(testlogs_dir)):
        for unit_dir in testlogs.result_dirs(os.path.join(testlogs_dir, cell)):
            xml = os.path.realpath(os.path.join(unit_dir, "test.xml"))
            if only is not None and xml not in only:
                continue
            text = testlogs.read_output(unit_dir, testlogs.MEASUREMENTS_FILE) or ""
            entries = [json.loads(line) for line in text.splitlines() if line.strip()]
            timings = [
                dict(
                    {k: e.get(k, 0.0) for k, _ in CELL_PHASES},
                    **{k: e.get(k) for k in CPU_KEYS},
                    cell=cell,
                    start_mode=e.get("start_mode"),
                    # A record without the field is one server's, started and stopped by its cell.
                    launches=e.get("launches", 1),
                    # Sleeps vLLM's own check failed (tools/launcher/timings.py); None in older logs.
                    sleep_asserts=e.get("sleep_asserts"),
                    # The memory phases by what took them (timings.py); absent in older logs.
                    memory_phase_by=e.get("memory_phase_by") or {},
                    reserved_growth_by=e.get("reserved_growth_by") or {},
                    step_bytes_by=e.get("step_bytes_by") or {},
                    cpu_by_thread=e.get("cpu_by_thread") or {},
                )
                for e in entries
                if e.get("key") == "server_timings"
            ]
            test_cpu = next(
                (
                    {
                        "cpu_s": e["value"],
                        "children_cpu_s": e.get("children_cpu_s", 0.0),
                        "launcher_cpu_s": e.get("launcher_cpu_s", 0.0),
                    }
                    for e in entries
                    if e.get("key") == "test_process_cpu"
                ),
                None,
            )
            walk_steps = sorted((e["time"], e.get("op", "")) for e in entries if e.get("key") == "walk_step")
            walk_races = [e for e in entries if e.get("key") == "walk_race"]
            units.append(
                {
                    "unit": os.path.relpath(unit_dir, testlogs_dir),
                    "cell": cell,
                    "seconds": suite_seconds(os.path.join(unit_dir, "test.xml")),
                    "bazel_s": (attempt_s or {}).get(xml),
                    "outcomes": dict(testlogs.junit_outcomes(os.path.join(unit_dir, "test.xml"))),
                    "timings": timings,
                    "test_cpu": test_cpu,
                    "walk_steps": walk_steps,
                    "walk_races": walk_races,
                    "xml": xml,
                }
            )
    return units


def gpu_only(timings: list[dict]) -> list[dict]:
    """The GPU servers' timings: the fake tier's cells run with the matrix and start in-process fakes."""
    return [t for t in timings if t["start_mode"] != FAKE_START_MODE]


def gpu_units(units: list[dict]) -> list[dict]:
    """The units that started a GPU server (not the fake tier's, not unit tests)."""
    return [u for u in units if gpu_only(u["timings"])]


def gpu_timings(units: list[dict]) -> list[dict]:
    """The GPU servers' timings of the units, in order."""
    return [t for u in units for t in gpu_only(u["timings"])]


def class_of(cell: str) -> str:
    """The class short name of a GPU cell name <class>[_<door>]_<runner>_<mode> (the name itself otherwise)."""
    return (matrix.split_cell(cell) or (cell,))[0]


def door_of(cell: str) -> str | None:
    """The front door of a GPU cell name (matrix.HTTP where it names none); None for any other target."""
    parts = matrix.split_cell(cell)
    return parts[1] if parts else None


def _phase_sums(units: list[dict]) -> dict:
    sums = {k: sum(t[k] for t in gpu_timings(units)) for k, _ in CELL_PHASES}
    sums["rest_s"] = sum(
        max(u["seconds"] - sum(t[k] for t in gpu_only(u["timings"]) for k, _ in CELL_PHASES), 0.0) for u in units
    )
    return sums


def cell_breakdown(units: list[dict], elapsed_s: float | None) -> dict:
    """Where the GPU units' time went: per phase the cell-seconds summed over the units, the share of
    all their time, the share of their time in their slots (slot_share; none for the waits for a slot,
    which are no slot's time) and the median unit's; the rest is the tests' own work. Per class the same sums
    (by_class), and the longest units. mean_cells_in_flight (cell-seconds / Bazel's elapsed time) shows
    how full the slots were kept."""
    gpu = gpu_units(units)
    if not gpu:
        return {"cells": 0}
    total = sum(u["seconds"] for u in gpu)
    per_unit = [_phase_sums([u]) for u in gpu]
    in_slots = total - sum(p[LEASE_WAIT] for p in per_unit)
    phases = []
    for key, what in CELL_PHASES + (("rest_s", "the tests' own requests and checks, pytest"),):
        values = [p[key] for p in per_unit]
        phases.append(
            {
                "key": key,
                "what": what,
                "cell_seconds": round(sum(values), 1),
                "share": round(sum(values) / total, 3) if total else None,
                # Of the time the units held their slots: a wait for a slot is none of it.
                "slot_share": round(sum(values) / in_slots, 3) if in_slots and key != LEASE_WAIT else None,
                "median_cell_s": round(statistics.median(values), 2),
            }
        )
    by_class = {}
    for name in sorted({class_of(u["cell"]) for u in gpu}):
        members = [u for u in gpu if class_of(u["cell"]) == name]
        by_class[name] = dict(
            {k: round(v, 1) for k, v in _phase_sums(members).items()},
            units=len(members),
            servers=sum(len(gpu_only(u["timings"])) for u in members),
            cell_seconds=round(sum(u["seconds"] for u in members), 1),
            median_unit_s=round(statistics.median(u["seconds"] for u in members), 1),
            longest_unit_s=round(max(u["seconds"] for u in members), 1),
        )
    longest = sorted(gpu, key=lambda u: -u["seconds"])[:5]
    return {
        "cells": len(gpu),
        "cell_seconds": round(total, 1),
        "median_cell_s": round(statistics.median(u["seconds"] for u in gpu), 2),
        "phases": phases,
        "by_class": by_class,
        "longest_units": [[u["unit"], round(u["seconds"], 1)] for u in longest],
        "mean_cells_in_flight": round(total / elapsed_s, 1) if elapsed_s else None,
    }


def summarise(values) -> dict:
    """count, median, min, max of a list of seconds (empty: count 0 only)."""
    values = list(values)
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "median_s": round(statistics.median(values), 2),
        "min_s": round(min(values), 2),
        "max_s": round(max(values), 2),
    }


def held_s(unit: dict) -> float:
    """A unit's time in its GPU slot: its suite's time less its waits for a slot. A cell Bazel started
    beyond the slots (run_matrix.sh gives the CPU targets extra test jobs) waits for its lease before it
    runs: that wait is the matrix's, not time the cell takes."""
    return max(unit["seconds"] - sum(t["lease_wait_s"] for t in gpu_only(unit["timings"])), 0.0)


def _held_and_waits(gpu: list[dict]) -> tuple[float, float]:
    """The GPU units' seconds in their slots and, of those, their waits on neighbours' memory phases."""
    return (sum(held_s(u) for u in gpu), sum(t["memory_phase_wait_s"] for t in gpu_timings(gpu)))


def matrix_measures(units: list[dict], elapsed_s: float | None) -> dict:
    """The matrix's figures the speed targets name (report.TARGETS): Bazel's elapsed time, the median
    GPU server start, the longest GPU cell (a unit of any class of the spec: a walk shard counts as one)
    and the share of the GPU cells' time spent waiting on neighbours' memory phases, both over the
    time the cells held their slots (held_s), and the sleeps vLLM's own check failed; None where unknown."""
    gpu = [u for u in gpu_units(units) if class_of(u["cell"]) in matrix.SLEEP_WAKE_CLASSES]
    held, waits = _held_and_waits(gpu)
    return {
        "matrix_elapsed_s": elapsed_s,
        "matrix_start_median_s": summarise(t["start_s"] for t in gpu_timings(gpu) if t["launches"]).get("median_s"),
        "longest_cell_s": round(max(held_s(u) for u in gpu), 1) if gpu else None,
        "wait_share": round(waits / held, 3) if held else None,
        # vLLM's "Memory usage increased after sleeping." in the GPU cells' servers: a neighbour's
        # allocation landed in a sleep the memory-phase rule let it overlap. None where none was counted.
        "sleep_asserts": _sleep_asserts(gpu),
    }


def _sleep_asserts(gpu: list[dict]) -> int | None:
    counted = [t["sleep_asserts"] for t in gpu_timings(gpu) if t.get("sleep_asserts") is not None]
    return sum(counted) if counted else None


def memory_phases_by(units: list[dict]) -> list[tuple[str, int, float, float | None]]:
    """The GPU servers' memory phases by what took them (timings' memory_phase_by: a worker's sleep, wake
    or reload, a start step, the launcher's own), most waited first: (what, phases, seconds waited, seconds
    held or None where some were not timed). Which kind waits, and behind which holds, is what a narrower
    lock rule would be judged from; empty for records before the breakdown."""
    total: dict = {}
    for t in gpu_timings(gpu_units(units)):
        for what, e in (t.get("memory_phase_by") or {}).items():
            n, waited, held = total.get(what, (0, 0.0, 0.0))
            total[what] = (
                n + e["n"],
                waited + e["waited_s"],
                None if held is None or e["held_s"] < 0 else held + e["held_s"],
            )
    return sorted(((w, *v) for w, v in total.items()), key=lambda r: -r[2])


def memory_phases_by_text(rows: list[tuple]) -> str:
    def one(what, n, waited, held):
        return f"{what} {n} waited {waited:.0f} s held " + (f"{held:.0f} s" if held is not None else "?")

    return "memory phases by what took them (phases, seconds waited, seconds held): " + "; ".join(one(*r) for r in rows)


Growth = tuple[str, int, int, int, int]


def growth_by(units: list[dict], field: str) -> list[Growth]:
    """A growth table of the GPU servers' timings (timings.py: reserved_growth_by, step_bytes_by), summed:
    (what, measured, those that added bytes, the most bytes one added, those that added more than they
    declared under the rule bytes); empty before the figure."""
    total: dict = {}
    for t in gpu_timings(gpu_units(units)):
        for what, e in (t.get(field) or {}).items():
            n, grew, most, over = total.get(what, (0, 0, 0, 0))
            total[what] = (n + e["n"], grew + e["grew"], max(most, e["max"]), over + e.get("over", 0))
    return sorted((w, *v) for w, v in total.items())


def reserved_growth_by(units: list[dict]) -> list[Growth]:
    """The worker calls by what they were: (what, calls measured, calls after which torch's caching
    allocator held more mapped, the most bytes one call added, calls that added more than they declared)."""
    return growth_by(units, "reserved_growth_by")


def step_bytes_by(units: list[dict]) -> list[Growth]:
    """The start steps by name: (step, starts measured, those that mapped bytes beyond their pools, the most
    bytes one mapped beyond them, those that mapped more than they declared beside their pools), what the
    bounds the steps declare beside their pools are taken from and held to."""
    return growth_by(units, "step_bytes_by")


def _over(over: int) -> str:
    return f", {over} over what it declared" if over else ""


def step_bytes_text(rows: list[Growth]) -> str:
    return (
        "start steps' device bytes beyond the pools they fill (under the rule bytes each declares"
        " step_overhead_bytes or load_overhead_bytes beside them), the most over the starts: "
        + "; ".join(f"{step} {most / (1 << 20):.0f} MiB over {n}{_over(over)}" for step, n, _, most, over in rows)
    )


def reserved_growth_text(rows: list[Growth]) -> str:
    return (
        "worker calls after which torch's caching allocator held more (memory outside the pools a sleep frees): "
        + "; ".join(
            f"{what} {grew} of {n} (most {most / (1 << 20):.0f} MiB{_over(over)})" for what, n, grew, most, over in rows
        )
    )


def floor(
    units: list[dict], slots: int, start_alone_s: float | None = None, waves: list[tuple[set, int]] | None = None
) -> dict:
    """What the GPU units' time in their slots allows, in matrix seconds: the slots kept busy with this work
    (busy_s), then without any memory-phase wait (no_waits_s), then with every server start as fast as
    start_alone_s, a start with no neighbours (starts_alone_s). Each wave (waves: (the real paths of its
    test.xml files, the GPU units it runs at once), run_matrix.sh's walk wave capped below the slots by
    the cores) is floored at its own units at once, never more than the slots, and the waves run in turn;
    without waves, one at `slots`. The matrix ends no sooner than busy_s; below no_waits_s only less work
    or more slots go."""
    gpu = gpu_units(units)
    parts = [(slots, gpu)]
    if waves:
        parts = [(min(at_once, slots), [u for u in gpu if u.get("xml") in xmls]) for xmls, at_once in waves]
    out: dict = {"slots": slots, "at_once": [a for a, _ in parts], "busy_s": 0.0, "no_waits_s": 0.0}
    alone = 0.0
    for at_once, members in parts:
        held, waits = _held_and_waits(members)
        starts = [t for t in gpu_timings(members)]
        out["busy_s"] += held / at_once
        out["no_waits_s"] += (held - waits) / at_once
        if start_alone_s is not None:
            own = held - waits - sum(t["start_s"] for t in starts)
            alone += (own + len(starts) * start_alone_s) / at_once
    out["busy_s"], out["no_waits_s"] = round(out["busy_s"], 1), round(out["no_waits_s"], 1)
    if start_alone_s is not None:
        out.update(start_alone_s=start_alone_s, starts_alone_s=round(alone, 1))
    return out


def floor_text(f: dict) -> str:
    at_once = f.get("at_once", [f["slots"]])
    waves = (
        f" ({', '.join(str(a) for a in at_once)} at once in its {len(at_once)} waves, in turn)"
        if len(at_once) > 1 or at_once[0] != f["slots"]
        else ""
    )
    line = (
        f"floor at {f['slots']} slots{waves}: the slots busy {f['busy_s']:.0f} s with this work, "
        f"{f['no_waits_s']:.0f} s without memory-phase waits"
    )
    if "starts_alone_s" in f:
        line += f", {f['starts_alone_s']:.0f} s with every start in {f['start_alone_s']:g} s as alone"
    return line


def servers_cpu(units: list[dict], cores: int) -> dict | None:
    """The GPU servers' CPU work and its seconds over `cores` (over_cores_s): a part of the host's CPU only
    (the tests' processes, Bazel and the rest come on top), so no floor; host_floor is. None when a server
    recorded no CPU time (logs of a launcher before it did)."""
    timings = gpu_timings(units)
    if not timings or any(t.get(k) is None for t in timings for k in CPU_KEYS):
        return None
    starts, serving = sum(t["start_cpu_s"] for t in timings), sum(t["serve_cpu_s"] for t in timings)
    return {
        "cores": cores,
        "servers": len(timings),
        "start_cpu_s": round(starts, 1),
        "serve_cpu_s": round(serving, 1),
        "start_cpu_median_s": round(statistics.median(t["start_cpu_s"] for t in timings), 2),
        "over_cores_s": round((starts + serving) / cores, 1),
    }


def servers_cpu_text(f: dict | None) -> str:
    if f is None:
        return "the GPU servers' CPU: unknown (the servers recorded no CPU time)"
    return (
        f"the GPU servers' CPU: {f['start_cpu_s']:.0f} CPU-s starting ({f['servers']} servers, median"
        f" {f['start_cpu_median_s']:g}) and {f['serve_cpu_s']:.0f} CPU-s serving, {f['over_cores_s']:.0f} s over"
        f" {f['cores']} cores (a part of the host's CPU: no floor)"
    )


def host_floor(busy_cpu_s: float, cores: int) -> dict:
    """The whole host's busy CPU-seconds while the run's Bazel ran (tools/bench/host_cpu.py) over its cores:
    no order of the units, number of slots or test jobs ends the run sooner, only less CPU work."""
    return {"cores": cores, "busy_cpu_s": busy_cpu_s, "floor_s": round(busy_cpu_s / cores, 1)}


def host_floor_text(f: dict | None) -> str:
    if f is None:
        return "CPU floor: unknown (no host_cpu.py line: pass --host_cpu)"
    return (
        f"CPU floor on {f['cores']} cores: {f['floor_s']:.0f} s, the whole host's busy {f['busy_cpu_s']:.0f} CPU-s"
        " over them"
    )


def cpu_by_thread(units: list[dict]) -> list[dict]:
    """The GPU servers' CPU seconds by "process/thread" name, most first, each with its share of them all
    and the threads and servers it was summed over: whether the CPU floor is vLLM's own loop or helper
    threads a setting could quiet."""
    groups: dict = {}
    for t in gpu_timings(units):
        for key, g in t.get("cpu_by_thread", {}).items():
            total = groups.setdefault(key, {"name": key, "cpu_s": 0.0, "threads": 0, "servers": 0})
            total["cpu_s"] += g["cpu_s"]
            total["threads"] += g["threads"]
            total["servers"] += 1
    everything = sum(g["cpu_s"] for g in groups.values())
    out = sorted(groups.values(), key=lambda g: -g["cpu_s"])
    for g in out:
        g["cpu_s"] = round(g["cpu_s"], 1)
        g["share"] = round(g["cpu_s"] / everything, 3) if everything else 0.0
    return out


def cpu_by_thread_text(groups: list[dict], top: int = 8) -> str:
    if not groups:
        return "CPU by thread: unknown (the servers recorded none)"
    return "CPU by thread: " + "; ".join(
        f"{g['name']} {g['cpu_s']:.0f} CPU-s ({100 * g['share']:.0f}%, {g['threads']} threads in"
        f" {g['servers']} servers)"
        for g in groups[:top]
    )


def tests_cpu(units: list[dict]) -> dict | None:
    """The GPU units' test processes: their CPU seconds (their reaped children's included), the part
    spent while their servers started (the launcher's lease, zygote request and /health polls) and by
    class; a part of the host's CPU (host_floor holds all of it). None: no unit recorded its test
    process's CPU."""
    recorded = [u for u in gpu_units(units) if u.get("test_cpu")]
    if not recorded:
        return None
    by_class: dict = {}
    for u in recorded:
        name = class_of(u["cell"])
        by_class[name] = by_class.get(name, 0.0) + u["test_cpu"]["cpu_s"] + u["test_cpu"]["children_cpu_s"]
    total = sum(by_class.values())
    return {
        "units": len(recorded),
        "cpu_s": round(total, 1),
        "launcher_cpu_s": round(sum(u["test_cpu"]["launcher_cpu_s"] for u in recorded), 1),
        "by_class": [(k, round(v, 1)) for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])],
    }


def tests_cpu_text(f: dict | None, top: int = 6) -> str:
    if f is None:
        return "tests' CPU: unknown (the GPU cells recorded no test_process_cpu)"
    return (
        f"tests' CPU: {f['cpu_s']:.0f} CPU-s in {f['units']} GPU units ({f['launcher_cpu_s']:.0f} of them while"
        f" their servers started); by class: " + ", ".join(f"{k} {v:.0f}" for k, v in f["by_class"][:top])
    )


def walk_cpu_per_step(units: list[dict]) -> dict | None:
    """The GPU walk's CPU milliseconds per step it recorded: its servers' serving, its test processes' own
    and their children's (the trainers), over the walk units that recorded their test process's CPU. A
    plan's steps are the same work on every host, so two runs of one plan differ here by their host's speed
    (or its neighbours'), where their elapsed times mix that with everything else. None: no such unit, or a
    server without its CPU time."""
    walk = [u for u in gpu_walk_shards(units) if u.get("test_cpu") and u.get("walk_steps")]
    timings = [t for u in walk for t in gpu_only(u["timings"])]
    if not walk or any(t.get("serve_cpu_s") is None for t in timings):
        return None
    steps = sum(len(u["walk_steps"]) for u in walk)
    per_step = 1000.0 / steps
    return {
        "units": len(walk),
        "steps": steps,
        "servers_ms": round(sum(t["serve_cpu_s"] for t in timings) * per_step, 1),
        "tests_ms": round(sum(u["test_cpu"]["cpu_s"] for u in walk) * per_step, 1),
        "children_ms": round(sum(u["test_cpu"]["children_cpu_s"] for u in walk) * per_step, 1),
    }


def walk_cpu_per_step_text(f: dict) -> str:
    return (
        f"the walk's CPU per step (one plan is the same work on any host: compare hosts by this): servers"
        f" {f['servers_ms']:g} ms serving, test processes {f['tests_ms']:g} ms, their children (the trainers)"
        f" {f['children_ms']:g} ms, over {f['steps']} steps in {f['units']} units"
    )


def _step_kind(token: str) -> str:
    """A walk operation's token (walk/operations.py Operation.__str__) as the deal prices it: a sleep
    with a request in flight apart from the other sleeps."""
    name = token.split(":")[0]
    # sleep:<level>:<mode>:<requests in flight>, 2 with a late arrival during a wait drain
    return "sleep in flight" if name == "sleep" and not token.endswith(":0") else name


def walk_step_seconds(units: list[dict]) -> list[tuple]:
    """[(operation kind, steps, mean seconds), ...] most time first, over the GPU units' walk steps: a
    step's walk_step record is written once it and its checks are done, so the time since the record
    before is that step's. What tests/core/walk/plan.py's STEP_SECONDS should stay near."""
    seconds: dict = {}
    for u in gpu_units(units):
        steps = u.get("walk_steps") or []
        for (before, _), (after, token) in zip(steps, steps[1:]):
            seconds.setdefault(_step_kind(token), []).append(after - before)
    return sorted(
        ((k, len(v), round(statistics.mean(v), 3)) for k, v in seconds.items()), key=lambda kv: -kv[1] * kv[2]
    )


def walk_step_seconds_text(kinds: list[tuple]) -> str:
    return "walk steps, mean seconds by operation: " + ", ".join(f"{k} {mean:.2f} ({n} steps)" for k, n, mean in kinds)


def walk_races(units: list[dict]) -> dict | None:
    """The GPU walk's races of a request in flight against a sleep that does not drain it (mode keep or
    abort): how many, by outcome, and the tokens the engine had generated per choice when /sleep answered
    (median, max) against the tokens each asked for: what a shorter request in flight would have to stay
    above. None where no such race was recorded."""
    # the op token is sleep:<level>:<mode>:<requests in flight> (gpu_walk.py's walk_race record)
    races = [r for u in gpu_units(units) for r in u.get("walk_races") or [] if r["op"].split(":")[2] != "wait"]
    if not races:
        return None
    per_choice = [r["value"] / r["choices"] for r in races]
    caught = [r["value"] / r["choices"] for r in races if r["outcome"] == "caught"]
    return {
        "races": len(races),
        "outcomes": dict(sorted(collections.Counter(r["outcome"] for r in races).items())),
        "median": statistics.median(per_choice),
        "max": max(per_choice),
        "caught_max": max(caught) if caught else None,
        "asked": sorted({r["asked"] for r in races}),
    }


def walk_races_text(r: dict) -> str:
    outcomes = ", ".join(f"{k} {n}" for k, n in r["outcomes"].items())
    caught = "none caught" if r["caught_max"] is None else f"{r['caught_max']:.0f} in a caught one"
    return (
        f"walk races of a request in flight (keep, abort): {r['races']} ({outcomes}); tokens generated per choice"
        f" when /sleep answered: median {r['median']:.1f}, max {r['max']:.0f} ({caught}) of"
        f" {'/'.join(map(str, r['asked']))} asked"
    )


# The walk issue's bound on one GPU walk shard inside the default main job: its time, the start of its
# server included, on Bazel's clock where the build events give it (a shard is one Bazel test unit, and
# what `bazel test` prints for it is what a user waits for when picking one).
WALK_SHARD_S_MAX = 60.0
# The clocks a walk shard's seconds can be on: Bazel's time of the test's attempt (test runner and
# interpreter start included), or pytest's suite time (its session only), which reads lower.
BAZEL_CLOCK, PYTEST_CLOCK = "bazel", "pytest"
CLOCK_TEXT = {
    BAZEL_CLOCK: "on Bazel's clock",
    PYTEST_CLOCK: "on pytest's suite time (no build event gave Bazel's time of every shard)",
}


def gpu_walk_shards(units: list[dict]) -> list[dict]:
    """The GPU walk's shards among the units (not the fake tier's walk, which starts no server)."""
    return [u for u in gpu_units(units) if class_of(u["cell"]) == "state_walk"]


def walk_clock(units: list[dict]) -> str:
    """The clock the GPU walk shards are judged on: Bazel's where the build events timed every one of
    them, else pytest's for all, since a shard on one clock is no match for a shard on the other."""
    shards = gpu_walk_shards(units)
    return BAZEL_CLOCK if shards and all(u.get("bazel_s") is not None for u in shards) else PYTEST_CLOCK


def _on_clock(unit: dict, clock: str) -> float:
    return unit["bazel_s"] if clock == BAZEL_CLOCK else unit["seconds"]


def walk_shards(units: list[dict]) -> dict | None:
    """The GPU walk shards that ran (their units, counted from the test logs, never the plan): how many,
    the clock they are judged on (walk_clock), their median and longest seconds on it, and those over
    WALK_SHARD_S_MAX, longest first; None where none ran."""
    shards = gpu_walk_shards(units)
    if not shards:
        return None
    clock = walk_clock(units)
    seconds = {u["unit"]: _on_clock(u, clock) for u in shards}
    over = sorted((u for u in seconds if seconds[u] > WALK_SHARD_S_MAX), key=lambda u: -seconds[u])
    return {
        "shards": len(shards),
        "clock": clock,
        "bound_s": WALK_SHARD_S_MAX,
        "median_s": round(statistics.median(seconds.values()), 1),
        "longest_s": round(max(seconds.values()), 1),
        "over_bound": len(over),
        "over": [{"unit": u, "seconds": round(seconds[u], 1)} for u in over],
    }


def walk_shards_text(shards: dict) -> str:
    line = (
        f"walk shards {CLOCK_TEXT[shards['clock']]}: {shards['shards']} ran, median {shards['median_s']:.1f} s,"
        f" longest {shards['longest_s']:.1f} s; {shards['over_bound']} over {shards['bound_s']:g} s"
    )
    return line + "".join(f"\n  {o['unit']} {o['seconds']:.1f} s" for o in shards["over"])


def walk_shard_split(units: list[dict], top: int = 5) -> list[dict]:
    """The `top` longest GPU walk shards on walk_shards' clock (each row says which), each split into its
    server's start, its walk (first to last step record), the memory-phase waits its server had (most of
    them inside the walk) and the rest (the steps' preparations, the plan, the probe, the stop, and on
    Bazel's clock the test runner's own start): what a shard over its bound spent its time on. The start's
    CPU seconds (None where a record lacks them) tell a start that compiled its cell's graphs from one that
    loaded them from the cache and waited."""
    clock = walk_clock(units)
    rows = []
    for u in gpu_walk_shards(units):
        steps = u.get("walk_steps") or []
        if not steps or not u["timings"]:
            continue
        seconds = _on_clock(u, clock)
        start = sum(t["start_s"] for t in u["timings"])
        start_cpu = [t.get("start_cpu_s") for t in u["timings"]]
        walk = steps[-1][0] - steps[0][0]
        rows.append(
            {
                "unit": u["unit"],
                "clock": clock,
                "seconds": seconds,
                "start_s": start,
                "start_cpu_s": None if None in start_cpu else sum(start_cpu),
                "walk_s": walk,
                "steps": len(steps),
                "memory_wait_s": sum(t["memory_phase_wait_s"] for t in u["timings"]),
                "rest_s": seconds - start - walk,
            }
        )
    return sorted(rows, key=lambda r: -r["seconds"])[:top]


def walk_shard_split_text(rows: list[dict]) -> str:
    clock = f" {CLOCK_TEXT[rows[0]['clock']]}" if rows else ""
    return f"walk shards, the longest{clock}: " + "; ".join(
        f"{r['unit']} {r['seconds']:.1f} s = start {r['start_s']:.1f}"
        + ("" if r["start_cpu_s"] is None else f" ({r['start_cpu_s']:.1f} CPU-s)")
        + f" + walk {r['walk_s']:.1f} ({r['steps']} steps,"
        f" memory-phase waits {r['memory_wait_s']:.1f}) + the rest {r['rest_s']:.1f}"
        for r in rows
    )


def text(breakdown: dict) -> str:
    """The breakdown for people: the totals, then one line per class, longest first."""
    if not breakdown.get("cells"):
        return "cell time: no GPU cell recorded server timings"
    phases = {p["key"]: p for p in breakdown["phases"]}
    short = {
        "lease_wait_s": "slot waits",
        "start_s": "starts",
        "memory_phase_wait_s": "memory-phase waits",
        "stop_s": "stops",
        "rest_s": "own work",
    }
    slot_wait = phases[LEASE_WAIT]["cell_seconds"]
    in_slots = breakdown["cell_seconds"] - slot_wait
    lines = [
        f"cell time: {breakdown['cells']} GPU units (cells, or shards of one), {breakdown['cell_seconds']:.0f}"
        f" cell-seconds, {slot_wait:.0f} s of them waiting for a slot ({100 * phases[LEASE_WAIT]['share']:.0f}%);"
        f" of the {in_slots:.0f} s in their slots: "
        + ", ".join(
            f"{label} {phases[k]['cell_seconds']:.0f} s ({100 * (phases[k].get('slot_share') or 0):.0f}%)"
            for k, label in short.items()
            if k != LEASE_WAIT
        )
    ]
    lines.append("  longest: " + ", ".join(f"{u} {s:.0f} s" for u, s in breakdown["longest_units"]))
    for name, c in sorted(breakdown["by_class"].items(), key=lambda kv: -kv[1]["longest_unit_s"]):
        lines.append(
            f"  {name}: {c['units']} units, {c['cell_seconds']:.0f} s = starts {c['start_s']:.0f}"
            f" ({c['servers']} servers) + waits {c['memory_phase_wait_s']:.0f} + stops {c['stop_s']:.0f}"
            f" + slot waits {c['lease_wait_s']:.0f} + own {c['rest_s']:.0f};"
            f" median {c['median_unit_s']:.0f} s, longest {c['longest_unit_s']:.0f} s"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Where the GPU cells' time went, from a run's test logs.")
    parser.add_argument("testlogs", help="the cells' test logs, e.g. bazel-testlogs/tests/sleep_wake")
    parser.add_argument(
        "--bep",
        action="append",
        default=[],
        help="a build event file (repeatable): count only the results of its invocation",
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=0,
        help="the cells run at once (GPUs x slots per GPU): also print the floor they allow",
    )
    parser.add_argument(
        "--at_once",
        type=int,
        action="append",
        default=[],
        help="the GPU units each --bep's wave ran at once, in their order (run_matrix.sh: the walk wave's test"
        " jobs, the slots in the rest): the floor per wave, the waves in turn",
    )
    parser.add_argument(
        "--cores",
        type=int,
        default=0,
        help="the runner's cores: also print the CPU floor (the whole host's CPU-s over them, with --host_cpu)"
        " and the servers' and tests' CPU",
    )
    parser.add_argument("--host_cpu", help="tools/bench/host_cpu.py's output during the run (the host's CPU-s)")
    parser.add_argument(
        "--start_alone_s",
        type=float,
        default=None,
        help="the seconds of a server start with no neighbours (the bench's warm start): the"
        " floor with every start that fast too",
    )
    args = parser.parse_args(argv)
    if args.start_alone_s is not None and args.slots < 1:
        parser.error("--start_alone_s needs --slots, the cells run at once")
    if args.at_once and len(args.at_once) != len(args.bep):
        parser.error(f"--at_once: {len(args.at_once)} given for {len(args.bep)} --bep; give one per --bep, in order")
    if not os.path.isdir(args.testlogs):
        print(
            f"bazel_runs: no test logs at {args.testlogs}: run the matrix first (tools/run_matrix.sh)", file=sys.stderr
        )
        return 1
    missing = [bep for bep in args.bep if not os.path.exists(bep)]
    if missing:
        print(
            f"bazel_runs: no build event file {missing[0]}: pass the file given to --build_event_json_file",
            file=sys.stderr,
        )
        return 1
    invocation = reading.read_invocation(args.bep) if args.bep else None
    only, attempt_s = (invocation.xmls, invocation.attempt_s) if invocation else (None, None)
    units = test_units(args.testlogs, only, attempt_s)
    print(text(cell_breakdown(units, None)))
    if args.slots >= 1 and gpu_units(units):
        waves = None
        if args.at_once:
            waves = [(reading.read_invocation([bep]).xmls, n) for bep, n in zip(args.bep, args.at_once)]
        print(floor_text(floor(units, args.slots, args.start_alone_s, waves)))
    phases = memory_phases_by(units)
    if phases:
        print(memory_phases_by_text(phases))
    growth = reserved_growth_by(units)
    if growth:
        print(reserved_growth_text(growth))
    step_bytes = step_bytes_by(units)
    if step_bytes:
        print(step_bytes_text(step_bytes))
    steps = walk_step_seconds(units)
    if steps:
        print(walk_step_seconds_text(steps))
        print(walk_shard_split_text(walk_shard_split(units)))
    races = walk_races(units)
    if races:
        print(walk_races_text(races))
    shards = walk_shards(units)
    if shards:
        print(walk_shards_text(shards))
    if args.cores >= 1 and gpu_units(units):
        busy = host_cpu.busy_s(reading.read_text(args.host_cpu)) if args.host_cpu else None
        if args.host_cpu and busy is None:
            print(f"bazel_runs: {args.host_cpu} holds no host_cpu.py line; the CPU floor is unknown", file=sys.stderr)
        print(host_floor_text(host_floor(busy, args.cores) if busy is not None else None))
        print(servers_cpu_text(servers_cpu(units, args.cores)))
        print(cpu_by_thread_text(cpu_by_thread(units)))
        print(tests_cpu_text(tests_cpu(units)))
        per_step = walk_cpu_per_step(units)
        if per_step:
            print(walk_cpu_per_step_text(per_step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
