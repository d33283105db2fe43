"""Inline SVG charts, written by hand (no plotting library in the lock): a line chart of series with
bound and reference lines (cycles: a quantity over time), a bar chart from zero with its bounds (phases:
separate quantities, which a line would join as if one changed into the next), a strip chart of
timings (samples, checked value, bound) per row, and the history chart of the main job's runs.

Every text is escaped here; callers pass plain strings. Elements carry classes and data attributes
(series, bound) so tests and readers can find what was drawn.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from html import escape

from tools.report.series import Guide, HistoryPoint, Series

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
BOUND_COLOUR, REFERENCE_COLOUR = "#d62728", "#888888"
OK_COLOUR, BAD_COLOUR = "#2ca02c", "#d62728"


def _num(v: float) -> str:
    return f"{v:.1f}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi], about `count` of them."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _exact(v: float) -> str:
    """A number for a data attribute: what was recorded, not a rounded label."""
    return f"{v:.12g}"


def _y_range(values: list[float], min_span: float) -> tuple[float, float]:
    """[lo, hi] around the values, at least min_span wide: NVML moves in 2 MiB granules, so a span of a
    few KiB drawn full height would show noise as a swing."""
    lo, hi = min(values), max(values)
    if hi - lo < min_span:
        mid = (hi + lo) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def _frame(
    title: str,
    unit: str,
    width: int,
    height: int,
    left: int,
    top: int,
    pw: float,
    ph: float,
    y_lo: float,
    y_hi: float,
    css: str = "chart",
) -> list[str]:
    """The opening of a chart: the svg element (of class `css`), its title, the plot area, the y grid with
    its ticks (y_lo..y_hi, already in `unit`) and the y axis's unit."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="14" class="title">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>',
    ]
    for t in nice_ticks(y_lo, y_hi, 5):
        y = top + ph - (t - y_lo) / (y_hi - y_lo) * ph
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{_num(y)}" y2="{_num(y)}" class="grid"/>'
            f'<text x="{left - 4}" y="{_num(y + 3)}" class="tick" text-anchor="end">{_fmt(t)}</text>'
        )
    out.append(
        f'<text x="12" y="{top + ph / 2:.0f}" class="axis" transform="rotate(-90 12 {top + ph / 2:.0f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    return out


def line_chart(
    series: list[Series],
    *,
    title: str,
    guides: Sequence[Guide] = (),
    scale: float = 1.0,
    unit: str = "",
    x_name: str = "",
    x_labels: dict | None = None,
    baseline: bool = False,
    min_span: float = 0.0,
    width: int = 300,
    height: int = 210,
) -> str:
    """Series as polylines over a shared x; y shown divided by `scale` in `unit`, the y axis at least
    min_span (in `unit`) tall. baseline: plot each series minus its first value (change since the
    first point). x_labels: x -> tick text (categories, given room at both ends)."""
    left, right, top, bottom = 56, 10, 22, 52
    pw, ph = width - left - right, height - top - bottom
    shown = [
        Series(s.name, [(x, (y - s.points[0][1]) if baseline else y) for x, y in s.points], s.labels)
        for s in series
        if s.points
    ]
    xs = [x for s in shown for x, _ in s.points]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0, 1)
    first_x = x_lo
    if x_labels or x_hi == x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    ys = [y for s in shown for _, y in s.points] + [
        g.value + g.slope * (x - first_x) for g in guides for x in (x_lo, x_hi)
    ]
    y_lo, y_hi = _y_range([v / scale for v in ys] or [0.0], min_span)

    def px(x):
        return left + (x - x_lo) / (x_hi - x_lo) * pw

    def py(y):
        return top + ph - (y / scale - y_lo) / (y_hi - y_lo) * ph

    out = _frame(title, unit, width, height, left, top, pw, ph, y_lo, y_hi)
    ticks = sorted(x_labels) if x_labels else nice_ticks(x_lo, x_hi, 6)
    for i, t in enumerate(t for t in ticks if x_lo <= t <= x_hi):
        label = x_labels[t] if x_labels else _fmt(t)
        tick_y = top + ph + 12 + (10 if x_labels and i % 2 else 0)  # category names alternate rows, not overlap
        out.append(f'<text x="{_num(px(t))}" y="{tick_y}" class="tick" text-anchor="middle">{escape(label)}</text>')
    if x_name:
        out.append(
            f'<text x="{left + pw / 2:.0f}" y="{top + ph + 25}" class="axis" text-anchor="middle">'
            f"{escape(x_name)}</text>"
        )
    for g in guides:
        css = "bound" if g.bound else "reference"
        y1, y2 = g.value + g.slope * (x_lo - first_x), g.value + g.slope * (x_hi - first_x)
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{_num(py(y1))}" y2="{_num(py(y2))}" class="{css}" '
            f'data-bound="{_exact(g.value)}" data-slope="{_exact(g.slope)}">'
            f"<title>{escape(g.label)}</title></line>"
        )
    for i, s in enumerate(shown):
        colour = PALETTE[i % len(PALETTE)]
        points = " ".join(f"{_num(px(x))},{_num(py(y))}" for x, y in s.points)
        out.append(
            f'<polyline class="series" data-series="{escape(s.name)}" fill="none" stroke="{colour}" '
            f'stroke-width="1.8" points="{points}"/>'
        )
        for j, (x, y) in enumerate(s.points):
            what = s.labels[j] if j < len(s.labels) else f"{x_name} {x:g}"
            out.append(
                f'<circle cx="{_num(px(x))}" cy="{_num(py(y))}" r="2.2" fill="{colour}">'
                f"<title>{escape(f'{s.name}, {what}: {y / scale:.4g} {unit} ({y:g})')}</title></circle>"
            )
    out.append(
        _legend(
            [(s.name.replace("_bytes", ""), PALETTE[i % len(PALETTE)], "series") for i, s in enumerate(shown)]
            + [("bound", BOUND_COLOUR, "bound")] * any(g.bound for g in guides)
            + [("reference", REFERENCE_COLOUR, "reference")] * any(not g.bound for g in guides),
            left,
            height - 8,
        )
    )
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(
    bars: list[tuple[str, float]],
    *,
    title: str,
    guides: Sequence[Guide] = (),
    scale: float = 1.0,
    unit: str = "",
    width: int = 300,
    height: int = 210,
) -> str:
    """One bar per (label, value), from zero so heights compare as amounts; y shown divided by `scale`
    in `unit`; each guide a horizontal line (a bound red and dashed, a reference grey)."""
    left, right, top, bottom = 56, 10, 22, 52
    pw, ph = width - left - right, height - top - bottom
    y_hi = max([v for _, v in bars] + [g.value for g in guides] + [0.0]) / scale * 1.08 or 1.0

    def py(y):
        return top + ph - (y / scale) / y_hi * ph

    out = _frame(title, unit, width, height, left, top, pw, ph, 0.0, y_hi)
    slot = pw / max(1, len(bars))
    for i, (label, value) in enumerate(bars):
        x, w = left + i * slot + slot * 0.2, slot * 0.6
        y = py(max(value, 0.0))
        out.append(
            f'<rect class="bar" data-label="{escape(label)}" data-value="{_exact(value)}" x="{_num(x)}" '
            f'y="{_num(y)}" width="{_num(w)}" height="{_num(top + ph - y)}" fill="{PALETTE[0]}">'
            f"<title>{escape(f'{label}: {value / scale:.4g} {unit} ({value:g})')}</title></rect>"
        )
        ty = top + ph + 12 + (10 if i % 2 else 0)  # names alternate rows, not overlap
        out.append(f'<text x="{_num(x + w / 2)}" y="{ty}" class="tick" text-anchor="middle">{escape(label)}</text>')
    for g in guides:
        css = "bound" if g.bound else "reference"
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{_num(py(g.value))}" y2="{_num(py(g.value))}" '
            f'class="{css}" data-bound="{_exact(g.value)}" data-slope="{_exact(g.slope)}">'
            f"<title>{escape(g.label)}</title></line>"
        )
    out.append(
        _legend(
            [("bound", BOUND_COLOUR, "bound")] * any(g.bound for g in guides)
            + [("reference", REFERENCE_COLOUR, "reference")] * any(not g.bound for g in guides),
            left,
            height - 8,
        )
    )
    out.append("</svg>")
    return "\n".join(out)


def _legend(entries, x, y) -> str:
    out = []
    for name, colour, kind in entries:
        dash = ' stroke-dasharray="4 3"' if kind != "series" else ""
        out.append(
            f'<line x1="{x}" x2="{x + 14}" y1="{y - 3}" y2="{y - 3}" stroke="{colour}" stroke-width="2"{dash}/>'
            f'<text x="{x + 17}" y="{y}" class="tick">{escape(name)}</text>'
        )
        x += 24 + 6 * len(name)
    return "".join(out)


@dataclasses.dataclass
class StripRow:
    label: str
    samples: list[float]
    value: float | None  # the value checked against the bound (a median), if any
    bound: float | None
    ok: bool | None


def strip_chart(rows: list[StripRow], *, title: str, unit: str = "s", width: int = 760, label_width: int = 190) -> str:
    """One row per StripRow on a log x axis: samples as dots, the checked value as a bar (green
    within its bound, red over it), the bound as a red tick."""
    row_h, top, bottom, right = 18, 24, 50, 16
    height = top + row_h * len(rows) + bottom
    values = [v for r in rows for v in list(r.samples) + [r.value, r.bound] if isinstance(v, (int, float)) and v > 0]
    lo = 10 ** math.floor(math.log10(min(values))) if values else 0.01
    hi = 10 ** math.ceil(math.log10(max(values))) if values else 1.0
    if hi <= lo:
        hi = lo * 10
    left, pw = label_width, width - label_width - right

    def px(v):
        return left + (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * pw

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="4" y="15" class="title">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{row_h * len(rows)}" class="plot"/>',
    ]
    decade = lo
    while decade <= hi * 1.0001:
        for m in (1, 2, 5):
            t = decade * m
            if lo <= t <= hi * 1.0001:
                x = px(t)
                out.append(
                    f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{top}" y2="{top + row_h * len(rows)}" '
                    'class="grid"/>'
                    f'<text x="{_num(x)}" y="{top + row_h * len(rows) + 12}" class="tick" '
                    f'text-anchor="middle">{_fmt(t)}</text>'
                )
        decade *= 10
    out.append(
        f'<text x="{left + pw / 2:.0f}" y="{top + row_h * len(rows) + 25}" class="axis" '
        f'text-anchor="middle">{escape(unit)} (log scale)</text>'
    )
    for i, r in enumerate(rows):
        y = top + i * row_h + row_h / 2
        out.append(f'<text x="{left - 6}" y="{_num(y + 4)}" class="label" text-anchor="end">{escape(r.label)}</text>')
        if isinstance(r.value, (int, float)):
            colour = OK_COLOUR if r.ok else BAD_COLOUR
            out.append(
                f'<rect x="{left}" y="{_num(y - 4)}" width="{_num(max(px(r.value) - left, 1))}" height="8" '
                f'fill="{colour}" fill-opacity="0.35" class="value" data-value="{_exact(r.value)}">'
                f"<title>{escape(f'{r.label}: checked {r.value:.4g} {unit}, bound {r.bound:g}')}</title></rect>"
            )
        for s in r.samples:
            out.append(
                f'<circle cx="{_num(px(s))}" cy="{_num(y)}" r="2.6" class="sample">'
                f"<title>{escape(f'{r.label}: {s:.4g} {unit}')}</title></circle>"
            )
        if isinstance(r.bound, (int, float)):
            x = px(r.bound)
            out.append(
                f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{_num(y - 7)}" y2="{_num(y + 7)}" class="bound" '
                f'data-bound="{_exact(r.bound)}"><title>{escape(f"bound {r.bound:g} {unit}")}</title></line>'
            )
    out.append(_strip_legend(left, height - 6))
    out.append("</svg>")
    return "\n".join(out)


def _strip_legend(x, y) -> str:
    return (
        f'<circle cx="{x + 4}" cy="{y - 3}" r="2.6" class="sample"/>'
        f'<text x="{x + 10}" y="{y}" class="tick">sample</text>'
        f'<rect x="{x + 60}" y="{y - 7}" width="14" height="8" fill="{OK_COLOUR}" fill-opacity="0.35"/>'
        f'<text x="{x + 78}" y="{y}" class="tick">checked value (median; red: over its bound)</text>'
        f'<line x1="{x + 340}" x2="{x + 340}" y1="{y - 9}" y2="{y + 1}" class="bound"/>'
        f'<text x="{x + 345}" y="{y}" class="tick">bound</text>'
    )


# Fresh and warm machines' runs, each its own series: a fresh machine pays vLLM's first import and cold
# caches, so the two are compared apart.
STATE_COLOURS = {"fresh": PALETTE[1], "warm": PALETTE[0]}
MAX_RUN_LABELS = 30  # commits named under the x axis at most; hover names every run


def history_chart(points: list[HistoryPoint], *, title: str, width: int = 760, height: int = 250) -> str:
    """The main job's elapsed time per run, from zero, in the history's order: a line through the fresh
    machines' runs and one through the warm machines', each run a dot of its series' colour, a red run
    ringed red; the runs' commits under the x axis."""
    left, right, top, bottom = 56, 16, 22, 78
    pw, ph = width - left - right, height - top - bottom
    y_hi = max([p.elapsed_s for p in points] + [0.0]) * 1.08 or 1.0
    n = max(1, len(points))

    def px(index):
        return left + (index - 0.5) / n * pw

    def py(v):
        return top + ph - v / y_hi * ph

    out = _frame(title, "s", width, height, left, top, pw, ph, 0.0, y_hi, css="chart history")
    step = math.ceil(n / MAX_RUN_LABELS)
    for p in points[::step]:
        x, y = px(p.index), top + ph + 10
        out.append(
            f'<text x="{_num(x)}" y="{y}" class="tick" text-anchor="end" '
            f'transform="rotate(-45 {_num(x)} {y})">{escape(p.commit)}</text>'
        )
    for state, colour in STATE_COLOURS.items():
        mine = [p for p in points if p.state == state]
        if len(mine) > 1:
            line = " ".join(f"{_num(px(p.index))},{_num(py(p.elapsed_s))}" for p in mine)
            out.append(
                f'<polyline class="series" data-series="{state}" fill="none" stroke="{colour}" '
                f'stroke-width="1.5" points="{line}"/>'
            )
    for p in points:
        red = p.status != "green"
        ring = f' stroke="{BAD_COLOUR}" stroke-width="2"' if red else ""
        out.append(
            f'<circle cx="{_num(px(p.index))}" cy="{_num(py(p.elapsed_s))}" r="{4.5 if red else 3.2}" '
            f'fill="{STATE_COLOURS.get(p.state, REFERENCE_COLOUR)}"{ring} class="run {escape(p.status)}" '
            f'data-commit="{escape(p.commit)}" data-state="{escape(p.state)}" data-status="{escape(p.status)}" '
            f'data-elapsed="{_exact(p.elapsed_s)}"><title>{escape(p.title)}</title></circle>'
        )
    x, y = left, height - 8
    legend = []
    for state, colour in STATE_COLOURS.items():
        legend.append(
            f'<line x1="{x}" x2="{x + 14}" y1="{y - 3}" y2="{y - 3}" stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{x + 7}" cy="{y - 3}" r="3.2" fill="{colour}"/>'
            f'<text x="{x + 17}" y="{y}" class="tick">{state} machine</text>'
        )
        x += 110
    legend.append(
        f'<circle cx="{x + 7}" cy="{y - 3}" r="4.5" fill="#fff" stroke="{BAD_COLOUR}" stroke-width="2"/>'
        f'<text x="{x + 17}" y="{y}" class="tick">red run</text>'
    )
    out.append("".join(legend))
    out.append("</svg>")
    return "\n".join(out)
