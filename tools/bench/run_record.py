"""One matrix run as a JSON record, written by tools/run_matrix.sh after every run (sleepwake-run.json):
the machine and what it ran (vLLM's build, torch, the GPUs and driver: @sleepwake_gpu's identity.txt
beside the test logs), the run's verdict and elapsed time, its GPU server starts and whether the machine
was fresh or warm, then where the GPU cells' time went (bazel_runs). The main job's record also goes into
the run history, tools/bench/runs.jsonl, as one line (tools/bench/history.py).

    python3 -m tools.bench.run_record bazel-testlogs/tests/sleep_wake --out sleepwake-run.json \\
        --gpus 1 --cores 16 --rc 0 --machine_state fresh --wave_s 212.7 --wave_s 173.7 --bep .bazel-bep-wave1.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tools.bench import bazel_runs, host_cpu, phase_trace, replay
from tools.report import reading
from tools.results import placement, testlogs, walk_gate

MACHINE_STATES = ("fresh", "warm")  # fresh: no earlier run_matrix.sh run on this host (run_matrix.sh says how)


def _cell_outcomes(units: list[dict]) -> dict[tuple[str, str], dict]:
    """(front door, GPU cell name) -> its test cases' outcome counts, summed over its units (its shards)."""
    out: dict[tuple[str, str], dict] = {}
    for unit in units:
        door = bazel_runs.door_of(unit["cell"])
        if door is None:
            continue  # the fake tier's targets, unit tests: no cell of the matrix
        counts = out.setdefault((door, unit["cell"]), {})
        for outcome, n in unit.get("outcomes", {}).items():
            counts[outcome] = counts.get(outcome, 0) + n
    return out


def cells_by_door(units: list[dict]) -> dict[str, dict]:
    """door -> {"cells", "passed", "failed"} of the GPU cells among the units: counted from the results
    that are there, so a door none of whose cells ran is absent. A cell failed if a case of it failed,
    passed if a case ran and none failed; one that is neither ran no case."""
    out: dict[str, dict] = {}
    for (door, _), counts in _cell_outcomes(units).items():
        tally = out.setdefault(door, {"cells": 0, "passed": 0, "failed": 0})
        tally["cells"] += 1
        tally["failed"] += bool(counts.get("failed"))
        tally["passed"] += bool(counts.get("passed")) and not counts.get("failed")
    return out


def cases_of(xmls) -> dict[str, int]:
    """{"passed", "failed", "skipped"}: the test cases of these test.xml files (an invocation's results,
    every target's, the fake tier's and the unit tests' too), as tools/results/ran_tests.py counts them."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for xml in sorted(xmls):
        if os.path.exists(xml):
            for outcome, n in testlogs.junit_outcomes(xml).items():
                totals[outcome] = totals.get(outcome, 0) + n
    return totals


def cpu_model(cpuinfo: str) -> str | None:
    """The host CPU's model from /proc/cpuinfo's first `model name` line; None where it names none. Runs on
    hosts whose GPUs have one name can differ in CPU, and the main job is bound by the host's CPU (design.md):
    two runs' times compare only with their CPUs named."""
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return None


def parse_identity(text: str) -> dict[str, str]:
    """identity.txt (third_party/gpu_runtime/gpu_runtime.bzl), one `name: value` a line, as a dict."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(": ")
        if sep:
            out[name.strip()] = value.strip()
    return out


# The replay's units (tools/bench/replay.py), a row each: a GPU unit's seconds are Bazel's of its attempt
# less its waits for a slot (slot_wait_s); began_s: its attempt's start, seconds after its bazel test's;
# start_s and stop_s: its servers' starts and stops (the report's picture of where the time went).
REPLAY_FIELDS = ("unit", "wave", "gpu", "seconds", "memory_wait_s", "began_s", "start_s", "stop_s", "slot_wait_s")
# The machines the record's own replay predicts it on: GPUs of one host, replay.CORES_PER_GPU cores each.
PREDICTED_GPUS = (1, 2, 4, 8)
CPU_WAVE = "cpu"  # the CPU-only targets' own bazel test beside the GPU waves (tools/run_matrix.sh)


def _unit_name(result: testlogs.TestResult, shards: int) -> str:
    name = result.label.split(":")[-1]
    return name if shards == 1 else f"{name}/shard_{result.shard}_of_{shards}"


def replay_section(
    units: list[dict],
    waves: list[tuple[str, testlogs.Invocation, float, int | None]],
    slots_per_gpu: int,
    host_cpu_s: float | None = None,
    lock: dict | None = None,
) -> dict:
    """What tools/bench/replay.py replays the run from: each unit of each bazel test (waves: (name, its
    build events, its seconds, the units it ran at once); CPU_WAVE for the CPU-only targets' own) with its
    seconds, memory-phase waits and start; each wave's seconds, lead (its first GPU unit's start) and units
    at once; the host's busy CPU-s;
    the memory-phase lock's EXCLUSIVE holds on the busiest GPU and ALLOCATE holds summed over holders
    (phase_trace.summaries). Units from the cache ran nothing and are left out."""
    by_xml = {u["xml"]: u for u in units if u.get("xml")}
    rows, out_waves = [], []
    for name, inv, seconds, at_once in waves:
        shards: dict[str, int] = {}
        for r in inv.results:
            shards[r.label] = max(shards.get(r.label, 1), r.shard)
        firsts = []
        for r in inv.results:
            if r.cached:
                continue
            unit = by_xml.get(os.path.realpath(r.xml)) if r.xml else None
            tags = inv.tags.get(r.label)
            gpu = placement.GPU_TAG in tags if tags is not None else bool(unit and bazel_runs.gpu_only(unit["timings"]))
            timings = bazel_runs.gpu_only(unit["timings"]) if unit else []
            total = r.attempt_s if r.attempt_s is not None else (unit["seconds"] if unit else 0.0)
            held = max(total - sum(t["lease_wait_s"] for t in timings), 0.0)
            began = r.began - inv.began if r.began is not None and inv.began is not None else None
            if gpu and began is not None:
                firsts.append(began + (total - held))  # its slot's start, after its wait for one
            rows.append(
                [
                    unit["unit"] if unit else _unit_name(r, shards[r.label]),
                    name,
                    int(gpu),
                    round(held, 2),
                    round(sum(t["memory_phase_wait_s"] for t in timings), 2),
                    None if began is None else round(began, 2),
                    round(sum(t["start_s"] for t in timings), 2),
                    round(sum(t["stop_s"] for t in timings), 2),
                    round(total - held, 2),
                ]
            )
        lead = round(min(firsts), 2) if firsts else 0.0
        out_waves.append({"name": name, "seconds": seconds, "lead_s": lead, "at_once": at_once})
    exclusive = [g.get("held_s", {}).get("exclusive", 0.0) for g in (lock or {}).values()]
    allocate = [g.get("held_s", {}).get("allocate", 0.0) for g in (lock or {}).values()]
    return {
        "fields": list(REPLAY_FIELDS),
        "units": rows,
        "waves": out_waves,
        "slots_per_gpu": slots_per_gpu,
        "host_cpu_s": host_cpu_s,
        "lock_exclusive_s": round(max(exclusive), 1) if exclusive else None,
        "lock_allocate_s": round(sum(allocate), 1) if allocate else None,
    }


def _cpu_only(p: placement.Placement | None) -> dict | None:
    if p is None:
        return None
    return {
        "targets": len(p.targets),
        "beside": len(p.beside),
        "inside": len(p.inside),
        "late_s": None if p.late_s is None else round(p.late_s, 1),
        "off_critical_path": p.off_critical_path,
    }


def record(
    units: list[dict],
    *,
    gpus: int,
    cores: int,
    rc: int,
    machine_state: str,
    waves_s: list[float],
    identity: dict[str, str] | None = None,
    cpu: str | None = None,
    cpu_wait_s: float = 0.0,
    cpu_only: placement.Placement | None = None,
    replay: dict | None = None,
    cases: dict[str, int] | None = None,
) -> dict:
    """The run's record: `matrix` holds the figures the speed issue names (status, elapsed_s,
    server_starts, machine_state), counted from the cells' own timings (launch_to_health_s: a start's own
    seconds, without the wait for a GPU slot), the cells that ran by front door (cells_by_door) and the
    walk's shards against the walk issue's bound (bazel_runs.walk_shards, on Bazel's clock where the
    build events timed every shard) and `cases`, the outcomes of every test case of the run's results
    (cases_of: what ran_tests counts; None without build events to name them); elapsed_s the GPU waves'
    and the wait after them for the CPU-only targets' own bazel test (cpu_wait_s), and where those ran
    (cpu_only: tools/results/placement.py); `cell_time` the breakdown; `replay` what
    tools/bench/replay.py replays it from (replay_section)."""
    if machine_state not in MACHINE_STATES:
        raise ValueError(f"machine_state {machine_state!r}: say one of {', '.join(MACHINE_STATES)}")
    elapsed = round(sum(waves_s) + cpu_wait_s, 1) if waves_s else None
    gpu = bazel_runs.gpu_units(units)
    starts = bazel_runs.gpu_timings(gpu)
    counted = {
        # Counted only from matrix cells: a run of other targets (the mutants', whose servers their inner
        # runs start) has none to count from, which is no count of zero.
        "server_starts": sum(t["launches"] for t in starts) if gpu else None,
        # Tenancies of a server another cell started and gave back (tools/launcher/parking.py), those
        # whose reset the suite's check refused (then a start of its own follows) included.
        "servers_taken_over": sum(t["launches"] == 0 for t in starts) if gpu else None,
        "launch_to_health_s": bazel_runs.summarise(t["start_s"] for t in starts if t["launches"]),
    }
    if not gpu:
        counted["not_counted"] = "no GPU cell of the matrix ran: servers are counted from the cells' own timings"
    return {
        # Only a run whose GPU cells ran fetched @sleepwake_gpu for the vLLM it served: the file a run that
        # stopped before them left may name an earlier run's release.
        "machine": {"gpus": gpus, "cores": cores, "cpu": cpu, "identity": identity if gpu else None},
        "matrix": {
            # partial: every test passed, but a state walk cell did not walk its whole door (walk_gate.py).
            "status": "green" if rc == 0 else "partial" if rc == walk_gate.PARTIAL_EXIT else "red",
            "rc": rc,
            "elapsed_s": elapsed,
            "waves_s": waves_s,
            "cpu_wait_s": cpu_wait_s,
            "cpu_only": _cpu_only(cpu_only),
            **counted,
            "gpu_units": len(gpu),
            "cells_by_door": cells_by_door(units),
            "cases": cases,
            "walk_shards": bazel_runs.walk_shards(units),
            # The host's speed, from work that is the same on every host: what runs on two hosts compare by.
            "walk_cpu_per_step": bazel_runs.walk_cpu_per_step(units),
            "machine_state": machine_state,
            **bazel_runs.matrix_measures(units, elapsed),
        },
        "cell_time": bazel_runs.cell_breakdown(units, elapsed),
        "replay": replay,
    }


def predicted(result: dict, source: str) -> list[dict]:
    """The record's own replay (tools/bench/replay.py) on PREDICTED_GPUS GPUs of one host, the CPU-only
    targets beside the GPU waves: each prediction's seconds, what bounds it and its floors."""
    run = replay.from_record(result, source)
    out = []
    for gpus in PREDICTED_GPUS:
        machine = replay.Machine(gpus, gpus * replay.CORES_PER_GPU, run.slots_per_gpu)
        p = replay.predict(run, machine, replay.CPU_BESIDE)
        out.append(
            {
                "gpus": gpus,
                "cores": machine.cores,
                "seconds": round(p.seconds, 1),
                "bound": p.bound,
                "floors": {f.name: round(f.seconds, 1) for f in replay.floors(run, machine, replay.CPU_BESIDE)},
            }
        )
    return out


def _replay(args, units: list[dict]) -> dict | None:
    """The replay section from the CLI's files; None without build events or slots to replay from."""
    if not args.bep or args.slots_per_gpu < 1:
        return None
    names = args.wave_name or [f"wave{i + 1}" for i in range(len(args.bep))]
    at_once = args.at_once or [None] * len(args.bep)
    waves = [(name, testlogs.read_bep(bep), n) for name, bep, n in zip(names, args.bep, at_once)]
    if args.cpu_bep and os.path.exists(args.cpu_bep):
        waves.append((CPU_WAVE, testlogs.read_bep(args.cpu_bep), None))
    # Each wave's seconds from its own build events (Bazel's start and finish), as its units' starts are.
    timed = [
        (name, inv, round(inv.ended - inv.began, 1) if inv.began is not None and inv.ended is not None else 0.0, n)
        for name, inv, n in waves
    ]
    host = None
    if args.host_cpu and os.path.exists(args.host_cpu):
        host = host_cpu.busy_s(reading.read_text(args.host_cpu))
    lock = phase_trace.summaries(args.lock_dir) if args.lock_dir and os.path.isdir(args.lock_dir) else None
    return replay_section(units, timed, args.slots_per_gpu, host, lock)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("testlogs", help="the cells' test logs, e.g. bazel-testlogs/tests/sleep_wake")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--gpus", type=int, required=True, help="the GPUs the run used")
    parser.add_argument("--cores", type=int, required=True, help="the runner's cores")
    parser.add_argument(
        "--rc", type=int, required=True, help=f"the run's exit status (0: green, {walk_gate.PARTIAL_EXIT}: partial)"
    )
    parser.add_argument("--machine_state", choices=MACHINE_STATES, required=True, help="fresh or warm")
    parser.add_argument("--wave_s", type=float, action="append", default=[], help="a wave's seconds (repeatable)")
    parser.add_argument("--bep", action="append", default=[], help="a wave's build event file (repeatable)")
    parser.add_argument(
        "--wave_name", action="append", default=[], help="each --bep's wave's name, in their order (walk, rest)"
    )
    parser.add_argument(
        "--at_once",
        type=int,
        action="append",
        default=[],
        help="the GPU units each --bep's wave ran at once, in their order (the walk wave's test jobs, the slots)",
    )
    parser.add_argument("--cpu_bep", help="the build event file of the CPU-only targets' own bazel test")
    parser.add_argument("--slots_per_gpu", type=int, default=0, help="the cells sharing one GPU (for the replay)")
    parser.add_argument("--host_cpu", help="host_cpu.py's output during the run (the whole host's CPU-s)")
    parser.add_argument(
        "--cpuinfo", default="/proc/cpuinfo", help="the host's CPU description, for its model (default: %(default)s)"
    )
    parser.add_argument("--lock_dir", help="the GPU lock dir holding this run's memory-phase traces")
    parser.add_argument(
        "--cpu_wait_s",
        type=float,
        default=0.0,
        help="seconds the run waited after its GPU waves for the CPU-only targets' own bazel test",
    )
    args = parser.parse_args(argv)
    missing = [bep for bep in args.bep if not os.path.exists(bep)]
    if missing:
        print(f"run_record: no build event file {missing[0]}; pass the files run_matrix.sh wrote", file=sys.stderr)
        return 1
    all_beps = args.bep + ([args.cpu_bep] if args.cpu_bep and os.path.exists(args.cpu_bep) else [])
    invocation = reading.read_invocation(all_beps) if all_beps else None
    only, attempt_s = (invocation.xmls, invocation.attempt_s) if invocation else (None, None)
    units = bazel_runs.test_units(args.testlogs, only, attempt_s) if os.path.isdir(args.testlogs) else []
    identity_path = reading.identity_file(args.testlogs) if os.path.isdir(args.testlogs) else None
    identity = parse_identity(reading.read_text(identity_path)) if identity_path else None
    cpu = cpu_model(reading.read_text(args.cpuinfo)) if os.path.exists(args.cpuinfo) else None
    result = record(
        units,
        gpus=args.gpus,
        cores=args.cores,
        rc=args.rc,
        machine_state=args.machine_state,
        waves_s=args.wave_s,
        identity=identity,
        cpu=cpu,
        cpu_wait_s=args.cpu_wait_s,
        cpu_only=placement.read(all_beps) if all_beps else None,
        replay=_replay(args, units),
        cases=cases_of(invocation.xmls) if invocation else None,
    )
    if result["replay"]:
        result["predicted"] = predicted(result, args.out)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    m = result["matrix"]
    print(
        f"run record: {args.out} ({m['status']}, {m['elapsed_s']} s, {m['server_starts']} server starts,"
        f" {m['machine_state']} machine)"
    )
    if m["walk_shards"]:
        print("run record: " + bazel_runs.walk_shards_text(m["walk_shards"]))
    if m["walk_cpu_per_step"]:
        print("run record: " + bazel_runs.walk_cpu_per_step_text(m["walk_cpu_per_step"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
