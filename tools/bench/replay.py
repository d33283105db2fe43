"""A scheduler replay: how long tools/run_matrix.sh would take on G GPUs of one host, or on N hosts of G
GPUs each through remote execution, replayed from one run's record.

    python3 -m tools.bench.replay sleepwake-run.json --gpus 1 2 4 8 [--hosts 1 2] [--cores_per_gpu 16]

A record holds its units (run_record.py's `replay`, written from the test logs and each wave's build
events after every run); a record of a run before those were kept is read with its console log beside it
(<record>.log; legacy.py says how).

The model, kept simple on purpose:
- The run is its waves, one after the other (the walk's GPU shards, then the other GPU cells); the CPU-only
  targets run beside them in a lane of their own (run_matrix.sh since the CPU-only targets left the GPU
  waves), or inside the waves (layout AS_RUN of a run before that: each holds a test job there).
- A wave begins with its lead (Bazel's start and the builds its cells wait for: its first memory phase's
  offset, or its first GPU unit's start), then list-schedules its units: each GPU unit, longest first,
  onto the GPU with the most free slots when a test job and a slot are free; a CPU-only unit starts where the
  run started it (its offset), else at once. Test jobs and slots per wave as run_matrix.sh sizes them.
- A GPU unit holds its slot for its held seconds (its time less its waits for a slot), of which its waits on
  GPU neighbours' memory phases (the memory-phase lock) scale with its neighbours: the measured waits times
  (k' - 1) / (k - 1), k the wave's mean GPU units in flight per GPU as measured and k' as replayed, iterated
  to a fixed point. The rest of a unit (its start, own work, stop) keeps its measured seconds: the cores per
  GPU and the slots per GPU stay the run's, so each GPU's neighbours compete as they did.
- CPU: no wave ends before the host's CPU-seconds spent in it (its share of the run's time) over the cores.

Floors, each computed from the record, none from the schedule: the whole host's CPU-seconds over the
cores; the longest units, wave by wave (waves run in turn), at their own time (held, less their memory-phase
waits); the lock's serial time per GPU (its EXCLUSIVE windows, which nothing overlaps). The allocation
phases' holds are no floor: allocations overlap one another by design (gpu_lease.memory_phase), so their
sum, summed over holders, exceeds the run's time; the text says so beside them.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import os
import sys

AS_RUN, CPU_BESIDE = "as run", "CPU-only beside"
CPU_LANE = "cpu"  # the wave name of the CPU-only targets' own bazel test (run_record.py)
WALK, REST = "walk", "rest"
CORES_PER_GPU = 16  # the H200 host lent here: 16 cores for its GPU; hosts of 2/4/8 GPUs have 32/64/128
WAIT_ITERATIONS = 6


@dataclasses.dataclass(frozen=True)
class Unit:
    """One Bazel test of the run: a GPU cell or shard of one, or a CPU-only target."""

    name: str
    wave: str  # WALK, REST, CPU_LANE, or the one wave's name of a run with one invocation
    gpu: bool
    seconds: float  # a GPU unit's time in its slot (Bazel's, less its waits for a slot); a CPU-only one's time
    memory_wait_s: float = 0.0  # of seconds, its waits on GPU neighbours' memory phases
    began_s: float | None = None  # a CPU-only unit's start, seconds into its wave, as the run started it
    began_from_end: bool = False  # began_s worked out from its wave's end (legacy.py), not recorded

    @property
    def own_s(self) -> float:
        """Its time without any wait: what no schedule takes from it."""
        return self.seconds - self.memory_wait_s


@dataclasses.dataclass(frozen=True)
class Wave:
    name: str
    seconds: float  # measured
    lead_s: float  # from its start to its first GPU unit's


@dataclasses.dataclass
class Run:
    """What the replay reads from a record: the machine, the waves and the units, the host's CPU, the lock."""

    source: str
    machine_state: str
    gpus: int
    cores: int
    slots_per_gpu: int
    elapsed_s: float
    waves: list[Wave]
    units: list[Unit]
    host_cpu_s: float | None  # the whole host's busy CPU-seconds while Bazel ran (host_cpu.py)
    lock_exclusive_s: float | None  # EXCLUSIVE windows held on the busiest GPU, summed
    lock_allocate_s: float | None  # ALLOCATE phases held, summed over holders and GPUs (overlapping)

    @property
    def layout(self) -> str:
        return CPU_BESIDE if any(u.wave == CPU_LANE for u in self.units) else AS_RUN

    def gpu_waves(self) -> list[Wave]:
        return [w for w in self.waves if w.name != CPU_LANE]


@dataclasses.dataclass(frozen=True)
class Machine:
    gpus: int  # per host
    cores: int  # per host
    slots_per_gpu: int
    hosts: int = 1
    remote_overhead_s: float = 0.0  # added to each unit run on another host (inputs staged, outputs fetched)

    @property
    def all_gpus(self) -> int:
        return self.gpus * self.hosts

    @property
    def all_cores(self) -> int:
        return self.cores * self.hosts

    def describe(self) -> str:
        one = f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}, {self.cores} cores"
        return one if self.hosts == 1 else f"{self.hosts} hosts x ({one})"


def test_jobs(machine: Machine, wave: str, layout: str) -> int:
    """The Bazel test jobs of a wave on one host as tools/run_matrix.sh sizes them: the walk wave's up to
    the cores, the rest's a job per slot and half a slot's worth of cells waiting for a lent server, the
    CPU-only targets' a quarter of the cores; AS_RUN: before those left the GPU waves, which gave the CPU
    targets a quarter of the cores more in each."""
    slots = machine.gpus * machine.slots_per_gpu
    quarter = max(machine.cores // 4, 1)
    if wave == CPU_LANE:
        return quarter
    extra = quarter if layout == AS_RUN else 0
    if wave == WALK:
        return min(slots + extra, machine.cores)
    return slots + extra + slots // 2


@dataclasses.dataclass
class Scheduled:
    name: str
    gpu: int | None
    began: float
    ended: float


def schedule(
    gpu_units: list[tuple[str, float]],
    cpu_units: list[tuple[str, float, float]],
    jobs: int,
    gpus: int,
    slots: int,
    lead_s: float,
) -> list[Scheduled]:
    """List scheduling: (name, seconds) GPU units, longest first, from lead_s, each onto the GPU with the most
    free slots while a job is free; (name, seconds, earliest start) CPU-only units take a free job first once
    their start has come. Returns every unit's placement."""
    pending_gpu = sorted(gpu_units, key=lambda u: -u[1])
    pending_cpu = sorted(cpu_units, key=lambda u: u[2])
    free = [slots] * gpus
    running: list[tuple[float, int, int | None]] = []  # (end, index into out, gpu)
    out: list[Scheduled] = []
    t, free_jobs = 0.0, jobs
    while pending_gpu or pending_cpu or running:
        while pending_cpu and free_jobs and pending_cpu[0][2] <= t:
            name, seconds, _ = pending_cpu.pop(0)
            out.append(Scheduled(name, None, t, t + seconds))
            heapq.heappush(running, (t + seconds, len(out) - 1, None))
            free_jobs -= 1
        while pending_gpu and free_jobs and t >= lead_s and max(free) > 0:
            g = free.index(max(free))
            name, seconds = pending_gpu.pop(0)
            out.append(Scheduled(name, g, t, t + seconds))
            heapq.heappush(running, (t + seconds, len(out) - 1, g))
            free[g] -= 1
            free_jobs -= 1
        upcoming = [running[0][0]] if running else []
        if pending_cpu and free_jobs:
            upcoming.append(pending_cpu[0][2])
        if pending_gpu and t < lead_s:
            upcoming.append(lead_s)
        if not upcoming:
            raise ValueError("schedule: units left with no job or slot ever free (jobs or slots of 0)")
        t = max(t, min(upcoming))
        while running and running[0][0] <= t:
            _, _, held = heapq.heappop(running)
            free_jobs += 1
            if held is not None:
                free[held] += 1
    return out


@dataclasses.dataclass
class WavePrediction:
    name: str
    seconds: float
    makespan_s: float  # the schedule's, before the CPU check
    cpu_floor_s: float | None
    wait_factor: float  # the memory-phase waits' scale (k' - 1) / (k - 1)
    last: Scheduled | None  # the unit that ended the wave
    bound: str  # what bounds it: a unit, the test jobs or slots, the CPU
    placed: list[Scheduled]


@dataclasses.dataclass
class Prediction:
    machine: Machine
    layout: str
    seconds: float
    waves: list[WavePrediction]
    cpu_lane: WavePrediction | None  # the CPU-only targets beside the GPU waves

    @property
    def bound(self) -> str:
        """What the whole prediction is bound by: each wave's bound, or the CPU-only lane when it ends last."""
        if self.cpu_lane and self.cpu_lane.seconds > sum(w.seconds for w in self.waves):
            return f"the CPU-only targets beside the waves ({self.cpu_lane.bound})"
        return "; ".join(f"{w.name}: {w.bound}" for w in self.waves)


def _in_flight_per_gpu(run_gpus: int, seconds: float, held: float) -> float:
    return held / (run_gpus * seconds) if seconds > 0 else 0.0


def _wave_prediction(run: Run, wave: Wave, machine: Machine, layout: str) -> WavePrediction:
    units = [u for u in run.units if u.wave == wave.name]
    gpu_units = [u for u in units if u.gpu]
    cpu_units = [u for u in units if not u.gpu] if layout == AS_RUN else []
    overhead = machine.remote_overhead_s if machine.hosts > 1 else 0.0
    measured_k = _in_flight_per_gpu(run.gpus, wave.seconds - wave.lead_s, sum(u.seconds for u in gpu_units))
    jobs = test_jobs(machine, wave.name, layout) * machine.hosts
    factor, placed = 1.0, []
    for _ in range(WAIT_ITERATIONS):
        durations = [(u.name, u.own_s + factor * u.memory_wait_s + overhead) for u in gpu_units]
        cpu = [(u.name, u.seconds, u.began_s or 0.0) for u in cpu_units]
        placed = schedule(durations, cpu, jobs, machine.all_gpus, machine.slots_per_gpu, wave.lead_s)
        gpu_placed = [p for p in placed if p.gpu is not None]
        span = max((p.ended for p in gpu_placed), default=wave.lead_s) - wave.lead_s
        k = _in_flight_per_gpu(machine.all_gpus, span, sum(p.ended - p.began for p in gpu_placed))
        new = (k - 1) / (measured_k - 1) if measured_k > 1 else 1.0
        new = max(new, 0.0)
        if abs(new - factor) < 1e-3:
            break
        factor = new
    makespan = max((p.ended for p in placed), default=0.0)
    cpu_floor = None
    if run.host_cpu_s is not None and run.elapsed_s:
        cpu_floor = run.host_cpu_s * wave.seconds / run.elapsed_s / machine.all_cores
    last = max(placed, key=lambda p: p.ended, default=None)
    bound = _bound(last, placed, wave.lead_s, makespan, cpu_floor, gpu_units)
    seconds = max(makespan, cpu_floor or 0.0)
    return WavePrediction(wave.name, seconds, makespan, cpu_floor, factor, last, bound, placed)


def _bound(last, placed, lead_s, makespan, cpu_floor, gpu_units) -> str:
    if last is None:
        return "nothing ran"
    if cpu_floor is not None and cpu_floor > makespan:
        return f"the CPU ({cpu_floor:.0f} s of the host's CPU-s over the cores)"
    kind = "GPU unit" if last.gpu is not None else "CPU-only unit"
    at = lead_s if last.gpu is not None else 0.0
    # A unit that started as soon as its wave let it bounds the wave by its own length; one that started
    # later waited for a test job or a slot: the jobs or slots bound it.
    if last.began <= at + 1e-6:
        return f"the {kind} {last.name} ({last.ended - last.began:.0f} s from {last.began:+.0f} s)"
    if last.gpu is None:
        return f"the {kind} {last.name}, started at {last.began:+.0f} s as the run started it"
    return f"the test jobs and slots (the last unit, {last.name}, started at {last.began:+.0f} s)"


def predict(run: Run, machine: Machine, layout: str | None = None) -> Prediction:
    """The run replayed on `machine`, with its CPU-only units as they ran (AS_RUN) or beside the GPU waves."""
    layout = layout or run.layout
    waves = [_wave_prediction(run, w, machine, layout) for w in run.gpu_waves()]
    lane = None
    cpu_units = [u for u in run.units if not u.gpu]
    if layout == CPU_BESIDE and cpu_units:
        jobs = test_jobs(machine, CPU_LANE, layout) * machine.hosts
        # Longest first, as the GPU units: Bazel's own order is arbitrary (items run as they become ready).
        lane_units = sorted(cpu_units, key=lambda u: -u.seconds)
        placed = schedule([], [(u.name, u.seconds, 0.0) for u in lane_units], jobs, 1, 1, 0.0)
        last = max(placed, key=lambda p: p.ended)
        lane = WavePrediction(
            CPU_LANE,
            last.ended,
            last.ended,
            None,
            1.0,
            last,
            f"the CPU-only unit {last.name} ({last.ended - last.began:.0f} s from {last.began:+.0f} s)",
            placed,
        )
    gpu_s = sum(w.seconds for w in waves)
    return Prediction(machine, layout, max(gpu_s, lane.seconds if lane else 0.0), waves, lane)


@dataclasses.dataclass(frozen=True)
class Floor:
    name: str
    seconds: float
    what: str


def floors(run: Run, machine: Machine, layout: str | None = None) -> list[Floor]:
    """The honest floors on `machine`, each from the record: no schedule ends the run sooner."""
    layout = layout or run.layout
    out = []
    if run.host_cpu_s is not None:
        out.append(
            Floor(
                "CPU",
                run.host_cpu_s / machine.all_cores,
                f"the whole host's {run.host_cpu_s:.0f} CPU-s over {machine.all_cores} cores",
            )
        )
    # Waves run in turn: each one's longest unit at its own time, summed; the CPU-only lane beside them
    # ends no sooner than its own longest unit.
    longest, names = 0.0, []
    for wave in run.gpu_waves():
        members = [u for u in run.units if u.wave == wave.name and (u.gpu or layout == AS_RUN)]
        if members:
            unit = max(members, key=lambda u: u.own_s)
            longest += unit.own_s
            names.append(f"{wave.name}: {unit.name} {unit.own_s:.0f} s")
    what = "their own time, waits left out: " + " + ".join(names)
    cpu = [u for u in run.units if not u.gpu]
    if layout == CPU_BESIDE and cpu:
        unit = max(cpu, key=lambda u: u.seconds)
        what += f"; beside them {unit.name} {unit.seconds:.0f} s"
        longest = max(longest, unit.seconds)
    out.append(Floor("longest units", longest, what))
    if run.lock_exclusive_s is not None:
        per_gpu = run.lock_exclusive_s * run.gpus / machine.all_gpus
        out.append(
            Floor(
                "lock",
                per_gpu,
                f"the memory-phase lock's EXCLUSIVE windows, {run.lock_exclusive_s:.0f} s on the run's busiest GPU,"
                f" spread over {machine.all_gpus} GPU(s)",
            )
        )
    return out


def _percent(predicted: float, measured: float) -> str:
    return f"{100 * (predicted - measured) / measured:+.1f} %"


def prediction_text(p: Prediction, measured: float | None = None) -> str:
    waves = ", ".join(f"{w.name} {w.seconds:.0f} s" for w in p.waves)
    lane = f", CPU-only beside {p.cpu_lane.seconds:.0f} s" if p.cpu_lane else ""
    vs = f" [measured {measured:.1f} s: {_percent(p.seconds, measured)}]" if measured else ""
    return f"{p.machine.describe()}: {p.seconds:.0f} s ({waves}{lane}){vs}; bound: {p.bound}"


def floors_text(fs: list[Floor], predicted: float) -> str:
    top = max(fs, key=lambda f: f.seconds)
    return (
        "floors: "
        + "; ".join(f"{f.name} {f.seconds:.0f} s ({f.what})" for f in fs)
        + f"; the highest: {top.name}, {100 * top.seconds / predicted:.0f} % of the prediction"
    )


def machines(run: Run, gpus: list[int], hosts: list[int], cores_per_gpu: int, overhead_s: float) -> list[Machine]:
    return [Machine(g, g * cores_per_gpu, run.slots_per_gpu, h, overhead_s) for h in sorted(set(hosts)) for g in gpus]


def end_placed(run: Run) -> set[str]:
    """The waves a CPU-only unit's start was worked out from their end (legacy.py, for a log without start
    times): their replay on the run's own machine matches the measurement by construction."""
    return {u.wave for u in run.units if u.began_s is not None and u.began_from_end}


def validation(run: Run) -> list[tuple[str, float, float, bool]]:
    """(wave, replayed, measured, independent) per GPU wave, replayed on the run's own machine as it ran;
    independent: no input of the replay was worked out from that wave's end (end_placed)."""
    p = predict(run, Machine(run.gpus, run.cores, run.slots_per_gpu), run.layout)
    placed = end_placed(run)
    return [(w.name, pw.seconds, w.seconds, w.name not in placed) for w, pw in zip(run.gpu_waves(), p.waves)]


def text(run: Run, ms: list[Machine]) -> str:
    lines = [
        f"replay of {run.source}: {run.machine_state}, {run.gpus} GPU(s), {run.cores} cores, {run.slots_per_gpu}"
        f" slots per GPU; measured {run.elapsed_s:.1f} s ("
        + ", ".join(f"{w.name} {w.seconds:.1f} s" for w in run.waves)
        + f"); {sum(u.gpu for u in run.units)} GPU units, {sum(not u.gpu for u in run.units)} CPU-only"
    ]
    own = Machine(run.gpus, run.cores, run.slots_per_gpu)
    p = predict(run, own, run.layout)
    where = {AS_RUN: "inside the GPU waves, each started as the run started it", CPU_BESIDE: "beside the GPU waves"}
    lines.append(f"  as it ran (the CPU-only targets {where[run.layout]}): " + prediction_text(p, run.elapsed_s))
    lines.append(
        "    by wave: "
        + "; ".join(
            f"{name} {replayed:.0f} s vs {measured:.1f} s ({_percent(replayed, measured)}"
            + ("" if independent else ", a CPU-only unit placed from this wave's end: not independent")
            + ")"
            for name, replayed, measured, independent in validation(run)
        )
    )
    if run.lock_allocate_s is not None:
        lines.append(
            f"  the allocation phases were held {run.lock_allocate_s:.0f} s summed over holders, more than the run's"
            f" {run.elapsed_s:.0f} s: they overlap one another, so their sum is no floor (the lock's floor is its"
            " EXCLUSIVE windows)"
        )
    lines.append("  with the CPU-only targets beside the GPU waves (tools/run_matrix.sh):")
    for m in ms:
        p = predict(run, m, CPU_BESIDE)
        lines.append("    " + prediction_text(p))
        lines.append("      " + floors_text(floors(run, m, CPU_BESIDE), p.seconds))
    return "\n".join(lines)


def predictions_json(run: Run, ms: list[Machine]) -> dict:
    rows = []
    for m in ms:
        p = predict(run, m, CPU_BESIDE)
        rows.append(
            {
                "gpus": m.gpus,
                "hosts": m.hosts,
                "cores": m.cores,
                "seconds": round(p.seconds, 1),
                "waves": {w.name: round(w.seconds, 1) for w in p.waves},
                "cpu_only_beside_s": round(p.cpu_lane.seconds, 1) if p.cpu_lane else None,
                "bound": p.bound,
                "floors": {f.name: round(f.seconds, 1) for f in floors(run, m, CPU_BESIDE)},
            }
        )
    return {
        "source": run.source,
        "measured_s": run.elapsed_s,
        "as_run": [
            {"wave": w, "replayed_s": round(r, 1), "measured_s": m, "independent": i} for w, r, m, i in validation(run)
        ],
        "cpu_only_beside": rows,
    }


def load(path: str, log: str | None = None) -> Run:
    """The run of a record, with its console log beside it for a record without units (legacy.py)."""
    from tools.bench import legacy  # noqa: PLC0415 (legacy.py builds this module's Run)

    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    if record.get("replay"):
        return from_record(record, path)
    log = log or os.path.splitext(path)[0] + ".log"
    if not os.path.isfile(log):
        raise ValueError(
            f"{path} holds no units (a record of a run before run_record kept them) and no console log {log}"
            " is beside it: pass --log"
        )
    with open(log, encoding="utf-8", errors="replace") as f:
        return legacy.run(record, f.read(), path)


def from_record(record: dict, source: str) -> Run:
    """The Run of a record with its `replay` section (run_record.replay_section)."""
    r = record["replay"]
    fields = r["fields"]
    units = []
    for row in r["units"]:
        u = dict(zip(fields, row))
        units.append(Unit(u["unit"], u["wave"], bool(u["gpu"]), u["seconds"], u["memory_wait_s"], u["began_s"]))
    return Run(
        source=os.path.basename(source),
        machine_state=record["matrix"]["machine_state"],
        gpus=record["machine"]["gpus"],
        cores=record["machine"]["cores"],
        slots_per_gpu=r["slots_per_gpu"],
        elapsed_s=record["matrix"]["elapsed_s"],
        waves=[Wave(w["name"], w["seconds"], w["lead_s"]) for w in r["waves"]],
        units=units,
        host_cpu_s=r.get("host_cpu_s"),
        lock_exclusive_s=r.get("lock_exclusive_s"),
        lock_allocate_s=r.get("lock_allocate_s"),
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("record", help="a run record (sleepwake-run.json, run_matrix.sh writes one after each run)")
    parser.add_argument("--log", help="the run's console log, for a record without units (default: <record>.log)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8], help="GPUs per host to replay on")
    parser.add_argument("--hosts", type=int, nargs="+", default=[1], help="hosts (remote execution), each --gpus")
    parser.add_argument(
        "--cores_per_gpu", type=int, default=CORES_PER_GPU, help="cores per GPU of a host (16: the H200 host's)"
    )
    parser.add_argument(
        "--remote_overhead_s",
        type=float,
        default=0.0,
        help="seconds added to each unit on a host of several (remote execution's staging; not measured here)",
    )
    parser.add_argument("--json", help="also write the predictions to this JSON file")
    args = parser.parse_args(argv)
    if min(args.gpus + args.hosts) < 1 or args.cores_per_gpu < 1:
        parser.error("--gpus, --hosts and --cores_per_gpu must be >= 1")
    try:
        run = load(args.record, args.log)
    except (OSError, ValueError, KeyError) as e:
        print(f"replay: {e}", file=sys.stderr)
        return 1
    ms = machines(run, args.gpus, args.hosts, args.cores_per_gpu, args.remote_overhead_s)
    print(text(run, ms))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(predictions_json(run, ms), f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
