"""The replay's units of a run recorded before run_record kept them (the records up to 84c86bc),
rebuilt from its record and its console log (tools/run_matrix.sh's output, saved beside the record).

What each gives:
- the log: each wave's targets with Bazel's seconds ("PASSED in"), a sharded target's shards as Bazel's
  "Stats over N runs" (max, min, avg), the waves' seconds, the slots and the walk wave's test jobs, the
  whole host's CPU-seconds (host_cpu.py's line), each wave's first memory phase (its lead) and the lock's
  holds (phase_trace.py's lines), and the progress line Bazel printed last in each wave;
- the record: per class of GPU cells, the seconds its units waited for a slot and on memory phases.

What it cannot give, and how it is filled in (each a stated approximation):
- a shard's own seconds: of N shards, one took the max, one the min, the other N - 2 the rest of N x avg
  evenly;
- a unit's slot and memory-phase waits: its class's, shared among its units in proportion to Bazel's seconds;
- a CPU-only unit's start: the one the wave's last progress line names (Bazel names the oldest running
  action) ran until the wave ended, so it began its seconds before that; every other began with its wave.
"""

from __future__ import annotations

import os
import re

from tools import matrix
from tools.bench import bazel_runs, host_cpu, replay

_CELLS = re.compile(r"^run_matrix\.sh: (\d+) GPU\(s\) x (\d+) slot\(s\) = \d+ cells at once", re.M)
_WAVE = re.compile(r"^run_matrix\.sh: wave (\d+) of (\d+) \((\w+)\):", re.M)
_STATS = re.compile(r"^\s+Stats over (\d+) runs: max = ([\d.]+)s, min = ([\d.]+)s, avg = ([\d.]+)s", re.M)
_PROGRESS = re.compile(r"^\[[\d,]+ / [\d,]+\] .*$", re.M)
_OLDEST = re.compile(r"Testing (//\S+?)(?: \(shard \d+ of \d+\))?; (\d+)s local")
_TRACE = re.compile(r"^(gpu\d+)\.memory\.trace\.jsonl: .*held \(summed over holders\): (.*)$", re.M)
_TRACE_WAVE = re.compile(r"^\s+wave (\w+): .*held \(summed over holders\): (.*)$", re.M)
_LEAD = re.compile(r"^\s+its first memory phase came ([\d.]+) s after the wave began", re.M)


def _held(text: str) -> dict[str, float]:
    """phase_trace.text's "allocate 806 s, free 93 s" as {kind: seconds}."""
    out = {}
    for part in text.split(","):
        words = part.split()
        if len(words) == 3 and words[2] == "s":
            out[words[0]] = float(words[1])
    return out


def _sections(log: str) -> list[tuple[str, str]]:
    """(wave name, its part of the log) of each run_matrix.sh wave, in order; one unnamed part without waves."""
    marks = list(_WAVE.finditer(log))
    if not marks:
        return [("", log)]
    ends = [m.start() for m in marks[1:]] + [len(log)]
    return [(m.group(3), log[m.start() : end]) for m, end in zip(marks, ends)]


def _shards(section: str, label: str, end: int) -> list[float] | None:
    """The shards' seconds of a target whose result line ends at `end`, from the Stats line after it."""
    m = _STATS.match(section, end + 1)
    if not m:
        return None
    n, top, bottom, mean = int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))
    if n < 3:
        return [top, bottom][:n]
    rest = (n * mean - top - bottom) / (n - 2)
    return [top, bottom] + [rest] * (n - 2)


def _targets(section: str) -> list[tuple[str, list[float]]]:
    """(label, the seconds of each of its units) of the section's test summary."""
    out = []
    for m in bazel_runs._TARGET.finditer(section):
        if m.group(4) is None or m.group(2):  # no time, or from the cache (it ran no test)
            continue
        seconds = _shards(section, m.group(1), m.end()) or [float(m.group(4))]
        out.append((m.group(1), seconds))
    return out


def _class_share(record: dict) -> dict[str, dict]:
    return record.get("cell_time", {}).get("by_class", {})


def run(record: dict, log: str, source: str) -> replay.Run:
    cells = _CELLS.search(log)
    if not cells:
        raise ValueError(f"{source}'s log has no run_matrix.sh line on its GPUs and slots: not a main-job log")
    gpus, slots = int(cells.group(1)), int(cells.group(2))
    waves_s = bazel_runs.wave_seconds(log) or [bazel_runs.elapsed_s(log) or 0.0]
    leads = [float(x) for x in _LEAD.findall(log)]
    sections = _sections(log)
    rows: list[tuple[str, str, bool, float]] = []  # (unit, wave, gpu, Bazel's seconds)
    began: dict[str, float] = {}
    for (name, section), seconds in zip(sections, waves_s):
        lines = _PROGRESS.findall(section)
        oldest = _OLDEST.search(lines[-1]) if lines else None
        for label, unit_seconds in _targets(section):
            target = label.split(":")[-1]
            gpu = matrix.split_cell(target) is not None and matrix.FAKE_INFIX not in target
            for i, s in enumerate(unit_seconds):
                unit = target if len(unit_seconds) == 1 else f"{target}/shard_{i + 1}_of_{len(unit_seconds)}"
                rows.append((unit, name, gpu, s))
            if not gpu and oldest and oldest.group(1) == label:
                began[target] = max(seconds - unit_seconds[0], 0.0)
    by_class = _class_share(record)
    totals: dict[str, float] = {}
    for unit, _, gpu, s in rows:
        if gpu:
            name = bazel_runs.class_of(unit.split("/")[0])
            totals[name] = totals.get(name, 0.0) + s
    units = []
    for unit, wave, gpu, s in rows:
        if not gpu:
            units.append(replay.Unit(unit, wave, False, s, 0.0, began.get(unit), unit in began))
            continue
        name = bazel_runs.class_of(unit.split("/")[0])
        share = s / totals[name] if totals.get(name) else 0.0
        c = by_class.get(name, {})
        held = max(s - share * c.get("lease_wait_s", 0.0), 0.0)
        units.append(replay.Unit(unit, wave, True, held, min(share * c.get("memory_phase_wait_s", 0.0), held)))
    busy = host_cpu.busy_s(log)
    trace = _TRACE.search(log)
    per_gpu = _held(trace.group(2)) if trace else {}
    return replay.Run(
        source=os.path.basename(source),
        machine_state=record["matrix"]["machine_state"],
        gpus=gpus,
        cores=record["machine"]["cores"],
        slots_per_gpu=slots,
        elapsed_s=record["matrix"]["elapsed_s"],
        waves=[
            replay.Wave(name, s, leads[i] if i < len(leads) else 0.0)
            for i, ((name, _), s) in enumerate(zip(sections, waves_s))
        ],
        units=units,
        host_cpu_s=busy,
        lock_exclusive_s=per_gpu.get("exclusive", 0.0) if trace else None,
        lock_allocate_s=per_gpu.get("allocate") if trace else None,
    )
