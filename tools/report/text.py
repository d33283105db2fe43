"""The run as plain text for a terminal or a CI log: the page's headline, the cells that failed or
prove nothing (with why), the counts, the server starts and the spread of every measured key across
cells (what thresholds are set from), and the main job's last runs from the run history. The same view
of the run as the page, so the two never disagree."""

from __future__ import annotations

import statistics

from tools.bench import history as run_history
from tools.matrix import FRONT_DOORS
from tools.report import time_spent, view, weight_updates
from tools.report.reading import RunHistory
from tools.results import placement

HISTORY_LINES = 5  # the last runs of the history listed, one line each


def _spread(run: view.Run) -> dict[str, list[tuple[float, str]]]:
    """measured key -> [(value, cell)] over the GPU cells that ran and are not stale."""
    by_key: dict[str, list[tuple[float, str]]] = {}
    for cell in run.ran():
        for r in cell.records:
            value = r.get("value")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and r.get("key"):
                by_key.setdefault(r["key"], []).append((float(value), cell.name))
    return by_key


def _excluded(run: view.Run) -> list[str]:
    """A line per class the spec leaves out of some door's cells, with those doors and why: once, however
    many of the door's cells it would have had."""
    return [
        f"excluded by tools/matrix.bzl: {test_class} through {', '.join(doors)} ({why})"
        for (test_class, why), doors in run.excluded().items()
    ]


def _history(h: RunHistory) -> list[str]:
    if h.error:
        return [f"run history: {h.error}"]
    red = sum(e["status"] != "green" for e in h.entries)
    lines = [f"run history: {len(h.entries)} main-job runs in {h.path}, {red} red; the last {HISTORY_LINES}:"]
    for e in h.entries[-HISTORY_LINES:]:
        lines.append(
            f"  {e['commit']} {e['date']} {e['machine_state']:5s} {e['elapsed_s']:7.1f} s  {e['status']}"
            f"  {e['cells']} cells, {e['server_starts']} starts"
        )
    lines.append(run_history.latest_line(list(h.entries)))
    return lines


def summary(run: view.Run, history: RunHistory | None = None) -> str:
    text, _, fake_text = run.headline()
    lines = [view.VERDICT_PREFIX[run.verdict()] + text + fake_text]
    lines.append(
        f"read from {run.testlogs}: "
        + (
            f"the results of `bazel {run.invocation}`"
            if run.invocation
            else "every result found there (no build events)"
        )
    )
    lines += [f"note: {n}" for n in run.notes]
    ran = [c for c in run.ordered() if c.state not in view.ABSENT]
    states = ", ".join(f"{s} {n}" for s, n in sorted(run.states(ran).items()))
    cases = [c for cell in ran if cell.state != view.STALE for c in cell.cases]
    outcome = ", ".join(f"{sum(c.outcome == o for c in cases)} {o}" for o in ("passed", "failed", "skipped"))
    by_door = ", ".join(f"{door} {n}" for door in FRONT_DOORS if (n := sum(c.door == door for c in ran)))
    lines.append(
        f"GPU cells: {len(ran)} ({states or 'none ran'}" + (f"; by door: {by_door}" if by_door else "") + ")"
        f"; their test cases: {outcome}"
    )
    lines += _excluded(run)
    if run.fake:
        fake_states = sorted(run.states(list(run.fake.values())).items())
        lines.append(f"fake tier: {len(run.fake)} ({', '.join(f'{s} {n}' for s, n in fake_states)})")
    if run.cpu_placement:
        lines.append(placement.text(run.cpu_placement))
    if run.time_spent:
        lines += time_spent.lines(run.time_spent)
    for cell in run.failing():
        why = cell.note or "; ".join(
            f"{c.name}: {c.message.splitlines()[0] if c.message else 'failed'}" for c in cell.failures[:3]
        )
        lines.append(f"  {cell.state}: {cell.name}" + (f" ({why})" if why else ""))
    by_key = _spread(run)
    starts = sorted(v for v, _ in by_key.get("server_start_s", []))
    if starts:
        lines.append(
            f"server starts: {len(starts)}; ready for the tests (GPU slot wait included) after median "
            f"{statistics.median(starts):.1f} s, min {starts[0]:.1f} s, max {starts[-1]:.1f} s"
        )
    for key, values in sorted(by_key.items()):
        vs = sorted(v for v, _ in values)
        lines.append(
            f"{key:45s} n={len(vs):3d} min={vs[0]:.6g} median={statistics.median(vs):.6g} "
            f"max={vs[-1]:.6g}  (max in {max(values)[1]})"
        )
    for w in run.walk_coverage():
        lines.append(
            f"state walk {w.label}: {w.visited}/{w.pairs} situation pairs visited, "
            f"{w.shards}/{w.expected_shards} shards"
            + (f" ({w.stopped} stopped by a failure)" if w.stopped else "")
            + f", {w.walks} walks, {w.steps} steps"
            + (
                f", {w.states} states" + (f" of {w.model_states} reachable" if w.model_states else "")
                if w.states
                else ""
            )
            + (f"; unvisited: {', '.join(w.unvisited[:10])}" if w.unvisited else "")
            + f"; the cell: {w.gate_text()}"
        )
    lines += weight_updates.lines(run.ran())
    if history is not None:
        lines += _history(history)
    if run.mutation:
        lines.append("mutants: " + run.mutation.verdict() + " (the page holds the table)")
    return "\n".join(lines) + "\n"
