"""Who waited for whom: a GPU's memory-phase trace (tools/launcher/gpu_lease.py appends one line per
phase held) read back as each kind's waits, split by what the phases that kept it out were doing.

A wait of kind K is kept out by the holders of the kinds K excludes (an ALLOCATE by FREE and EXCLUSIVE
holders, a FREE by ALLOCATE and EXCLUSIVE ones, a RELEASE by EXCLUSIVE ones, an EXCLUSIVE by all), by a
waiting EXCLUSIVE (nothing new enters) and, for an ALLOCATE, by a waiting FREE (the keep-out that bounds
a sleep's wait), except for a wake or reload while a start step holds ALLOCATE (gpu_lease's
passes_waiting_free). Each instant of a wait is shared equally among what kept it out then; an instant with
nothing is the poll's latency. The speed issue's question "what are cells waiting for" is then a table:
which lever (start steps, sleeps, windows, keep-out) would buy what.

    python3 -m tools.bench.phase_trace /tmp/sleepwake-gpu-locks   # every gpu*.memory.trace.jsonl there

Where tools/run_matrix.sh ran its waves one after the other, it left their times beside the traces
(waves.jsonl), and each wave is summarised apart too: the waves never overlap, so a phase belongs to the
wave it was asked in.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import dataclasses
import glob
import json
import os
import sys

from tools.launcher.gpu_lease import (
    ALLOCATE,
    EXCLUDED_BY,
    FREE,
    KEPT_OUT_BY_WAITING,
    KINDS,
    START_STEP,
    passes_waiting_free,
    role,
)

POLL = "poll"  # nothing kept the wait out: the poll's latency, or a holder the trace does not have


@dataclasses.dataclass(frozen=True)
class Phase:
    kind: str
    what: str
    asked: float
    entered: float
    left: float

    @property
    def role(self) -> str:
        """What the holder was doing, coarse enough to name a lever: start, sleep, wake, reload,
        window (a test's block), teardown."""
        return role(self.what)


def read(path: str) -> tuple[list[Phase], int]:
    """The phases of one trace file and the number of lines that were not phases."""
    phases, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                r = json.loads(line)
                phases.append(Phase(r["kind"], r["what"], float(r["asked"]), float(r["entered"]), float(r["left"])))
            except (ValueError, KeyError, TypeError):
                bad += 1
    return phases, bad


@dataclasses.dataclass
class Summary:
    phases: int
    span_s: float  # first ask to last leave
    held_s: dict  # kind -> seconds held, summed over holders
    waits: dict  # kind -> (count, seconds)
    kept_out_by: dict  # waiting kind -> {cause: seconds}; cause: "<kind> <role>" or "waiting <kind>" or POLL


def summarize(phases: list[Phase]) -> Summary:
    intervals = []  # (start, end, kind, cause): holds, and waits that keep others out
    for p in phases:
        intervals.append((p.entered, p.left, p.kind, f"{p.kind} {p.role}"))
        if p.entered > p.asked:
            intervals.append((p.asked, p.entered, "waiting " + p.kind, "waiting " + p.kind))
    intervals.sort()
    starts = [i[0] for i in intervals]
    longest = max((i[1] - i[0] for i in intervals), default=0.0)
    held: collections.defaultdict[str, float] = collections.defaultdict(float)
    waits: collections.defaultdict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    kept: collections.defaultdict[str, collections.defaultdict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float)
    )
    for p in phases:
        held[p.kind] += p.left - p.entered
        if p.entered <= p.asked:
            continue
        waits[p.kind][0] += 1
        waits[p.kind][1] += p.entered - p.asked
        blockers = set(EXCLUDED_BY[p.kind]) | {"waiting " + k for k in KEPT_OUT_BY_WAITING[p.kind]}
        lo, hi = bisect.bisect_left(starts, p.asked - longest), bisect.bisect_left(starts, p.entered)
        found = [
            (max(s, p.asked), min(e, p.entered), cause)
            for s, e, kind, cause in intervals[lo:hi]
            if kind in blockers and e > p.asked
        ]
        # While a start step is inside, a waiting FREE does not keep this one out.
        passes = (
            [(s, e) for s, e, kind, cause in intervals[lo:hi] if e > p.asked and cause == f"{ALLOCATE} {START_STEP}"]
            if p.kind == ALLOCATE and passes_waiting_free(p.what)
            else []
        )
        cuts = sorted(
            {p.asked, p.entered}
            | {x for s, e, _ in found for x in (s, e)}
            | {min(max(x, p.asked), p.entered) for span in passes for x in span}
        )
        for a, b in zip(cuts, cuts[1:]):
            causes = {c for s, e, c in found if s <= a and e >= b}
            if any(s <= a and e >= b for s, e in passes):
                causes.discard("waiting " + FREE)
            if not causes:
                kept[p.kind][POLL] += b - a
            for c in causes:
                kept[p.kind][c] += (b - a) / len(causes)
    span = (max(p.left for p in phases) - min(p.asked for p in phases)) if phases else 0.0
    return Summary(
        len(phases), span, dict(held), {k: tuple(v) for k, v in waits.items()}, {k: dict(v) for k, v in kept.items()}
    )


def trace_files(lock_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(lock_dir, "gpu*.memory.trace.jsonl")))


WAVES_FILE = "waves.jsonl"  # tools/run_matrix.sh: one line per `bazel test` wave: {"wave", "began", "ended"}


def read_waves(lock_dir: str) -> list[tuple[str, float, float]]:
    """(name, began, ended) of the waves of the last run_matrix.sh run in lock_dir; [] if it ran one."""
    path = os.path.join(lock_dir, WAVES_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [(w["wave"], float(w["began"]), float(w["ended"])) for w in map(json.loads, f) if w]


def by_wave(phases: list[Phase], waves) -> list[tuple[str, float, list[Phase]]]:
    """(name, when it began, its phases: those asked while it ran) of each wave."""
    return [(name, began, [p for p in phases if began <= p.asked < ended]) for name, began, ended in waves]


def lead_s(phases: list[Phase], began: float) -> float | None:
    """Seconds from a wave's start to its first memory phase: Bazel's start, the tests' own start-up and
    their servers' set-up before any GPU step, during which the wave's slots do nothing for its work
    (13 s for the walk's wave, 22 s for the rest with four test jobs a slot: docs/design.md, the
    longest-first slot queue)."""
    return round(min(p.asked for p in phases) - began, 1) if phases else None


def summaries(lock_dir: str) -> dict:
    """Per GPU trace file in lock_dir, its Summary as a dict (the bench's JSON), with each wave's."""
    out, waves = {}, read_waves(lock_dir)
    for path in trace_files(lock_dir):
        phases = read(path)[0]
        out[os.path.basename(path)] = dict(
            dataclasses.asdict(summarize(phases)),
            waves={
                name: dict(dataclasses.asdict(summarize(part)), lead_s=lead_s(part, began))
                for name, began, part in by_wave(phases, waves)
            },
        )
    return out


def text(name: str, s: Summary) -> str:
    lines = [
        f"{name}: {s.phases} memory phases over {s.span_s:.0f} s; held (summed over holders): "
        + ", ".join(f"{k} {s.held_s[k]:.0f} s" for k in KINDS if k in s.held_s)
    ]
    for kind in KINDS:
        if kind not in s.waits:
            continue
        n, total = s.waits[kind]
        causes = sorted(s.kept_out_by.get(kind, {}).items(), key=lambda kv: -kv[1])
        lines.append(
            f"  {kind} waited {total:.1f} s in {n} phases, kept out by: "
            + ", ".join(f"{c} {v:.1f} s" for c, v in causes)
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("where", help="a trace file, or the lock dir holding gpu*.memory.trace.jsonl")
    args = parser.parse_args(argv)
    paths = trace_files(args.where) if os.path.isdir(args.where) else [args.where]
    if not paths or not all(os.path.isfile(p) for p in paths):
        print(
            f"phase_trace: no memory-phase trace at {args.where} (a run with GPU neighbours writes "
            "gpu<N>.memory.trace.jsonl in its lock dir)",
            file=sys.stderr,
        )
        return 1
    for path in paths:
        phases, bad = read(path)
        print(
            text(os.path.basename(path), summarize(phases))
            + (f"\n  ({bad} line(s) were not phases and were left out)" if bad else "")
        )
        for name, began, part in by_wave(phases, read_waves(os.path.dirname(os.path.abspath(path)))):
            print("\n".join("  " + line for line in text(f"wave {name}", summarize(part)).splitlines()))
            if part:
                print(f"    its first memory phase came {lead_s(part, began):.1f} s after the wave began")
    return 0


if __name__ == "__main__":
    sys.exit(main())
