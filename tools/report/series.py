"""What the page plots, taken from a cell's measurement records (tests/core/measure.py).

A record is {cell, test, key, value, unit, ...}; an oracle.bounded check adds bound, relation, oracle, layer, ok, what.

Memory: a record of unit "bytes" (or whose key names "host") with no bound is a reading. The readings
of one test form, per key, a series over `cycle` when they carry one (test_memory_leak_cycle); else one
series through the test's phases in the order recorded (awake, asleep, woken: test_physical_memory).
Keys with "host" go to host panels, the others to GPU panels, so a new host series shows up unasked.

Timings: every check whose unit is "s" (the median it checked against its bound), with the samples the
latency test recorded for it; and every server start against the launcher's start-up timeout.

History: each main job of the run history (tools/bench/runs.jsonl) as a point, its elapsed time against its
place in the file, fresh and warm machines apart, with its verdict.
"""

from __future__ import annotations

import dataclasses

from tools.launcher.config import ServerConfig

GPU, HOST = "gpu", "host"
# Readings that are not the server's memory but a size to compare with: drawn as reference lines.
REFERENCE_KEYS = {"checkpoint_tensor_bytes"}
# The samples test_sleep_wake_latency.py records for each median it checks.
SAMPLES_OF = {
    "sleep_s_max": "sleep_s",
    "wake_s_max": "wake_full_s",
    "staged_wake_s_max": "wake_staged_s",
    "wake_beside_start_s_max": "wake_full_s",
    "staged_wake_beside_start_s_max": "wake_staged_s",
    "cycle_s_max": "cycle_s",
}
START_KEY = "server_start_s"
START_BOUND = ServerConfig().startup_timeout_s  # the launcher's default; SLEEPWAKE_STARTUP_TIMEOUT_S overrides


@dataclasses.dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    labels: list[str] = dataclasses.field(default_factory=list)  # per point, for phase series


@dataclasses.dataclass
class Guide:
    """A line to draw: y = value + slope * (x - first x). A bound when `bound`, else a reference."""

    label: str
    value: float
    slope: float = 0.0
    bound: bool = True


@dataclasses.dataclass
class Panel:
    """A test's readings in one cell. A cycle panel is drawn twice: the bytes (with `guides`) and their
    change since the first cycle (with `change_guides`, the spread, growth and per-cycle bounds)."""

    test: str
    kind: str  # GPU or HOST
    by_cycle: bool
    series: list[Series]
    guides: list[Guide]
    change_guides: list[Guide]


def _is_reading(r: dict) -> bool:
    return (
        "bound" not in r
        and isinstance(r.get("value"), (int, float))
        and not isinstance(r["value"], bool)
        and (r.get("unit") == "bytes" or "host" in str(r.get("key", "")))
    )


def _kind(key) -> str:
    return HOST if "host" in str(key) else GPU


def _bound_guides(checks: list[dict]) -> tuple[list[Guide], list[Guide]]:
    """(bounds on the bytes themselves, bounds on their change over the cycles: flat for a spread or
    growth, a slope for a per-cycle bound). Bounds on ratios or on other quantities are not drawn."""
    absolute, change = {}, {}
    for c in checks:
        unit = str(c.get("unit", ""))
        if not unit.startswith("bytes") or not isinstance(c.get("bound"), (int, float)):
            continue
        label = f"{c['key']} {c.get('relation', '?')} {c['bound']:g} {unit}"  # oracle.bounded's relation
        if unit == "bytes":
            absolute[label] = Guide(label, c["bound"])
        elif "per cycle" in unit:
            change[label] = Guide(label, 0.0, slope=c["bound"])
        else:
            change[label] = Guide(label, c["bound"])
    return list(absolute.values()), list(change.values())


def _reference(r: dict) -> Guide:
    return Guide(f"{r['key']} ({r['value']:g} bytes)", r["value"], bound=False)


def memory_panels(records: list[dict]) -> list[Panel]:
    """One panel per (test, GPU or host) that recorded readings, in the order the tests ran."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if _is_reading(r):
            groups.setdefault((str(r.get("test", "")), _kind(r["key"])), []).append(r)
    panels = []
    for (test, kind), readings in groups.items():
        absolute, change = _bound_guides(
            [r for r in records if r.get("test") == test and "bound" in r and _kind(r.get("key")) == kind]
        )
        refs = [_reference(r) for r in readings if r["key"] in REFERENCE_KEYS]
        readings = [r for r in readings if r["key"] not in REFERENCE_KEYS]
        by_cycle = any("cycle" in r for r in readings)
        if by_cycle:
            series: dict = {}
            for r in readings:
                if "cycle" in r:
                    series.setdefault(r["key"], Series(r["key"], [])).points.append((r["cycle"], r["value"]))
                else:  # a reading before or after the cycles
                    refs.append(_reference(r))
            found = [series[k] for k in sorted(series)]  # asleep before awake, whatever the record order
        else:
            found = (
                [
                    Series(
                        "bytes",
                        [(i + 1, r["value"]) for i, r in enumerate(readings)],
                        [str(r["key"]) for r in readings],
                    )
                ]
                if readings
                else []
            )
        if found:
            panels.append(Panel(test, kind, by_cycle, found, absolute + refs, change if by_cycle else []))
    return panels


@dataclasses.dataclass
class Timing:
    """One row of a timing chart: a cell's samples and the value checked against its bound."""

    cell: str
    test: str
    samples: list[float]
    value: float | None
    bound: float | None
    ok: bool | None


def timing_checks(records: list[dict], cell: str) -> dict[str, Timing]:
    """check key -> its Timing in this cell, for every check in seconds."""
    out = {}
    for r in records:
        if "bound" not in r or r.get("unit") != "s":
            continue
        sample_key = SAMPLES_OF.get(r["key"])
        samples = [
            s["value"]
            for s in records
            if sample_key and s.get("key") == sample_key and s.get("test") == r.get("test") and "bound" not in s
        ]
        out[r["key"]] = Timing(cell, str(r.get("test", "")), samples, r.get("value"), r["bound"], r.get("ok"))
    return out


def starts(records: list[dict], cell: str) -> Timing | None:
    """The cell's server starts (one per class server)."""
    samples = [r["value"] for r in records if r.get("key") == START_KEY and isinstance(r.get("value"), (int, float))]
    if not samples:
        return None
    return Timing(cell, "", samples, None, START_BOUND, all(s <= START_BOUND for s in samples))


@dataclasses.dataclass
class HistoryPoint:
    """One main job of the run history: its place in the file (from 1), Bazel's elapsed seconds, fresh or
    warm, green or red, and what names it."""

    index: int
    elapsed_s: float
    state: str
    status: str
    commit: str
    title: str


def history_points(entries) -> list[HistoryPoint]:
    """The history's runs in file order (the order they ended)."""
    return [
        HistoryPoint(
            i,
            e["elapsed_s"],
            e["machine_state"],
            e["status"],
            e["commit"],
            f"{e['commit']} ({e['date']}), {e['machine_state']} machine, {e['status']}: {e['elapsed_s']:g} s, "
            f"{e['cells']} cells, {e['machine']['gpus']} x {e['machine']['gpu']}"
            f"{', ' + e['machine']['cpu'] if e['machine']['cpu'] else ''}, vLLM {e['vllm']}",
        )
        for i, e in enumerate(entries, 1)
    ]
