"""Where a run's time went, drawn from its run record (tools/bench/run_record.py, sleepwake-run.json): per
GPU wave, what its slots did (the units' own work, their servers' starts and stops, their waits on GPU
neighbours' memory phases, and the slot time nothing used), the CPU-only targets' own bazel test beside
the waves, and the host's busy and idle cores; then the record's own replay on more GPUs
(tools/bench/replay.py) with what bounds it. A picture (inline SVG) for the page and lines for --text.

A wave's slot time is the units it could run at once (the walk wave's test jobs, the slots in the rest)
times its seconds; a unit's wait for a slot is none of it (it holds no slot) and is said apart.
"""

from __future__ import annotations

import dataclasses
from html import escape

CPU_WAVE = "cpu"  # run_record.CPU_WAVE: the CPU-only targets' own bazel test
# What a wave's slot time went to, bottom to top, with its colour.
PARTS = (
    ("own", "own work", "#2ca02c"),
    ("starts", "server starts", "#1f77b4"),
    ("waits", "memory-phase waits", "#ff7f0e"),
    ("stops", "stops", "#7f7f7f"),
    ("idle", "idle slots", "#e6e6e6"),
)
BUSY_COLOUR, IDLE_COLOUR, CPU_ONLY_COLOUR = "#9467bd", "#e6e6e6", "#17becf"


@dataclasses.dataclass
class WaveUse:
    name: str
    seconds: float
    at_once: int
    parts: dict[str, float]  # PARTS key -> slot-seconds
    slot_waits_s: float  # its units' waits for a slot, which held none

    @property
    def capacity(self) -> float:
        return sum(self.parts.values())


@dataclasses.dataclass
class TimeSpent:
    waves: list[WaveUse]
    cpu_only_s: float | None  # the CPU-only targets' own bazel test, beside the waves
    elapsed_s: float
    cores: int
    host_busy_s: float | None
    predicted: list[dict]  # run_record.predicted: the record's replay on more GPUs
    cpu: str | None = None  # the host's CPU model (run_record.cpu_model), None in older records
    walk_cpu_per_step: dict | None = None  # bazel_runs.walk_cpu_per_step: the host's speed at fixed work

    @property
    def gpu_s(self) -> float:
        return sum(w.seconds for w in self.waves)


def read(record: dict) -> TimeSpent | None:
    """The time spent of a record with its replay section (None for a record without: older runs')."""
    r = record.get("replay")
    if not r:
        return None
    fields = r["fields"]
    units = [dict(zip(fields, row)) for row in r["units"]]
    slots = r["slots_per_gpu"] * record["machine"]["gpus"]
    waves, cpu_only = [], None
    for w in r["waves"]:
        if w["name"] == CPU_WAVE:
            cpu_only = w["seconds"]
            continue
        gpu = [u for u in units if u["wave"] == w["name"] and u["gpu"]]
        at_once = min(w.get("at_once") or slots, slots)
        starts = sum(u.get("start_s") or 0.0 for u in gpu)
        waits = sum(u["memory_wait_s"] for u in gpu)
        stops = sum(u.get("stop_s") or 0.0 for u in gpu)
        held = sum(u["seconds"] for u in gpu)
        parts = {
            "own": max(held - starts - waits - stops, 0.0),
            "starts": starts,
            "waits": waits,
            "stops": stops,
            "idle": max(at_once * w["seconds"] - held, 0.0),
        }
        waves.append(WaveUse(w["name"], w["seconds"], at_once, parts, sum(u.get("slot_wait_s") or 0.0 for u in gpu)))
    elapsed = record["matrix"].get("elapsed_s") or 0.0
    cores = record["machine"]["cores"]
    return TimeSpent(
        waves,
        cpu_only,
        elapsed,
        cores,
        r.get("host_cpu_s"),
        record.get("predicted") or [],
        record["machine"].get("cpu"),
        record["matrix"].get("walk_cpu_per_step"),
    )


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def lines(t: TimeSpent) -> list[str]:
    out = []
    for w in t.waves:
        out.append(
            f"time spent, wave {w.name}: {w.seconds:.0f} s x {w.at_once} units at once = {w.capacity:.0f}"
            " slot-seconds: "
            + ", ".join(f"{label} {_share(w.parts[key], w.capacity)}" for key, label, _ in PARTS)
            + f"; its units also waited {w.slot_waits_s:.0f} s for a slot"
        )
    if t.cpu_only_s is not None:
        out.append(f"time spent, CPU-only targets: {t.cpu_only_s:.0f} s in their own bazel test beside the waves")
    if t.host_busy_s is not None and t.elapsed_s:
        whole = t.cores * t.elapsed_s
        out.append(
            f"time spent, host CPU: {t.host_busy_s:.0f} of {whole:.0f} core-seconds busy"
            f" ({_share(t.host_busy_s, whole)}), idle cores {_share(whole - t.host_busy_s, whole)}"
            + (f"; {t.cpu}" if t.cpu else "")
        )
    if t.walk_cpu_per_step:
        per_step = t.walk_cpu_per_step
        # A plan's steps are the same work on every host: this, not the elapsed time, says a host was slower.
        out.append(
            f"time spent, the walk's CPU per step: servers {per_step['servers_ms']:g} ms, test processes"
            f" {per_step['tests_ms']:g} ms, their trainers {per_step['children_ms']:g} ms ({per_step['steps']} steps;"
            " runs on two hosts compare by this)"
        )
    for p in t.predicted:
        if p["gpus"] == max(q["gpus"] for q in t.predicted):
            out.append(
                f"replay (tools/bench/replay.py, the CPU-only targets beside): on {p['gpus']} GPUs, {p['cores']} cores"
                f" this run would take {p['seconds']:.0f} s; bound: {p['bound']}; floors: "
                + ", ".join(f"{k} {v:.0f} s" for k, v in p["floors"].items())
            )
    return out


def svg(t: TimeSpent, width: int = 760) -> str:
    """Columns along the run's time, one per GPU wave, as wide as its seconds and split by what its slot
    time went to; under them the CPU-only targets' bazel test and the host's busy cores over the run."""
    left, top, plot_w, col_h, bar_h = 130, 26, width - 150, 110, 16
    span = max(t.gpu_s, t.cpu_only_s or 0.0, t.elapsed_s) or 1.0

    def x_of(seconds: float) -> float:
        return left + plot_w * seconds / span

    rows = 3 if t.cpu_only_s is not None else 2
    height = top + col_h + 22 + rows * (bar_h + 10) + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart time-spent" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="where the run\'s time went">',
        f'<text x="{left}" y="14" class="title">where the run\'s time went ({span:.0f} s)</text>',
        f'<text x="{left - 6}" y="{top + col_h / 2}" class="label" text-anchor="end">GPU slots</text>',
    ]
    at = 0.0
    for w in t.waves:
        x0, x1 = x_of(at), x_of(at + w.seconds)
        y = float(top + col_h)
        for key, label, colour in PARTS:
            h = col_h * w.parts[key] / w.capacity if w.capacity else 0.0
            y -= h
            out.append(
                f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 0.5):.1f}" height="{h:.1f}" fill="{colour}"'
                f' data-wave="{escape(w.name)}" data-part="{key}" data-seconds="{w.parts[key]:.1f}">'
                f"<title>{escape(w.name)}: {label} {w.parts[key]:.0f} slot-seconds"
                f" ({_share(w.parts[key], w.capacity)})</title></rect>"
            )
        out.append(
            f'<text x="{(x0 + x1) / 2:.1f}" y="{top + col_h + 14}" class="tick" text-anchor="middle">'
            f"{escape(w.name)} {w.seconds:.0f} s, {w.at_once} at once</text>"
        )
        at += w.seconds
    y = float(top + col_h + 24)
    if t.cpu_only_s is not None:
        out.append(f'<text x="{left - 6}" y="{y + 12}" class="label" text-anchor="end">CPU-only targets</text>')
        out.append(
            f'<rect x="{left}" y="{y}" width="{x_of(t.cpu_only_s) - left:.1f}" height="{bar_h}"'
            f' fill="{CPU_ONLY_COLOUR}" data-part="cpu-only" data-seconds="{t.cpu_only_s:.1f}">'
            f"<title>their own bazel test beside the GPU waves: {t.cpu_only_s:.0f} s</title></rect>"
        )
        y += bar_h + 10
    if t.host_busy_s is not None and t.elapsed_s:
        busy = t.host_busy_s / (t.cores * t.elapsed_s)
        x_end = x_of(t.elapsed_s)
        out.append(f'<text x="{left - 6}" y="{y + 12}" class="label" text-anchor="end">host cores</text>')
        out.append(
            f'<rect x="{left}" y="{y}" width="{x_end - left:.1f}" height="{bar_h}" fill="{IDLE_COLOUR}"'
            f' data-part="idle-cores" data-seconds="{t.cores * t.elapsed_s - t.host_busy_s:.1f}">'
            f"<title>idle cores: {_share(1 - busy, 1)}</title></rect>"
        )
        out.append(
            f'<rect x="{left}" y="{y + bar_h * (1 - busy):.1f}" width="{x_end - left:.1f}" height="{bar_h * busy:.1f}"'
            f' fill="{BUSY_COLOUR}" data-part="busy-cores" data-seconds="{t.host_busy_s:.1f}">'
            f"<title>busy: {t.host_busy_s:.0f} CPU-s of {t.cores} cores ({_share(busy, 1)})</title></rect>"
        )
        y += bar_h + 10
    legend = list(PARTS) + [("cpu-only", "CPU-only targets", CPU_ONLY_COLOUR), ("busy", "busy cores", BUSY_COLOUR)]
    x = left
    for _, label, colour in legend:
        out.append(
            f'<rect x="{x}" y="{y + 4}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{y + 13}" class="tick">{escape(label)}</text>'
        )
        x += 14 + 7 * len(label) + 12
    out.append("</svg>")
    return "".join(out)
