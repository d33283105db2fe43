"""The HTML page of a run: summary, the front door x runner x mode x class grid, failures, vLLM/GPU
identity, memory charts, timings against bounds, the walk's coverage, the main job's run history and the
mutation table. Self-contained: inline CSS and SVG, no script, no network. Everything read from logs goes
through escape(); links are relative to the page."""

from __future__ import annotations

import os
import re
import urllib.parse
from html import escape

from tools.bench import history as run_history
from tools.report import series, svg, time_spent, view, weight_updates
from tools.report.reading import OutputFile, RunHistory
from tools.results import placement

GB, MiB = 1e9, float(1 << 20)
MESSAGE_PREVIEW = 160  # characters of a failure message shown in the grid

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:20px 28px;color:#222;max-width:1380px}
h1{font-size:22px;margin:0 0 6px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px} code,pre{font:12px/1.35 ui-monospace,monospace}
pre{background:#f6f6f6;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-word;margin:4px 0}
table.grid{border-collapse:collapse;table-layout:fixed;width:100%} .grid col.class{width:215px}
.grid th,.grid td{border:1px solid #ccc;padding:5px 7px;vertical-align:top}
.grid td.cell{font-size:12px;overflow-wrap:anywhere} .grid th.class{text-align:left;white-space:nowrap}
td.passed{background:#e6f4e6} td.failed{background:#fbe3e3} td.not-run{background:#f2f2f2;color:#777}
td.excluded{background:#fafafa;color:#777;font-style:italic}
td.no-cases,td.stale,td.unreadable{background:#fff3cd}
.state{font-weight:600;font-size:13px} .msg{color:#8b1a1a;margin:3px 0} .note{color:#7a5b00;margin:3px 0}
.links a{margin-right:6px} .summary span{margin-right:14px} .bad{color:#b00020;font-weight:600}
.headline{font-size:17px;margin:4px 0 8px} .grid.fake col.class{width:330px}
.ok{color:#1b7a1b;font-weight:600} .muted{color:#777} .notes li{color:#7a5b00}
.panels{display:flex;flex-wrap:wrap;gap:8px} figure.panel{margin:0;border:1px solid #e2e2e2;padding:4px}
figure.panel figcaption{font-size:12px;font-weight:600}
article.failure{border-left:4px solid #d62728;padding-left:10px;margin:10px 0}
table.mutants{border-collapse:collapse;font-size:12px} .mutants th,.mutants td{border:1px solid #ccc;padding:3px 6px}
.mutants td.ok{background:#e6f4e6;font-weight:400} .mutants td.bad{background:#fbe3e3;font-weight:400}
svg .title{font-size:12px;font-weight:600} svg .tick{font-size:10px;fill:#555} svg .axis{font-size:10px;fill:#333}
svg .label{font-size:11px;fill:#222} svg .plot{fill:#fff;stroke:#bbb} svg .grid{stroke:#eee}
svg .bound{stroke:#d62728;stroke-width:1.6;stroke-dasharray:5 3} svg .reference{stroke:#888;stroke-dasharray:2 3}
svg .sample{fill:#1f77b4;fill-opacity:.8} li.sub{margin-left:22px;list-style:circle}
"""


class Page:
    """Renders one run; `out_dir` is where the page is written, for relative links; `history` the main
    job's run history, drawn beside it (None: no history section)."""

    def __init__(self, run: view.Run, out_dir: str, history: RunHistory | None = None):
        self.run, self.out_dir, self.history = run, out_dir, history

    def href(self, path: str) -> str:
        return urllib.parse.quote(os.path.relpath(path, self.out_dir).replace(os.sep, "/"))

    def link(self, path: str, text: str, title: str = "") -> str:
        t = f' title="{escape(title)}"' if title else ""
        return f'<a href="{self.href(path)}"{t}>{escape(text)}</a>'

    def html(self) -> str:
        body = [
            self.header(),
            self.time_spent(),
            self.grid(),
            self.fake_grid(),
            self.failures(),
            self.identity(),
            self.memory(series.GPU, "GPU memory"),
            self.memory(series.HOST, "Host memory"),
            self.timings(),
            self.walk(),
            self.weight_updates(),
            self.run_history(),
            self.mutants(),
        ]
        return (
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            "<title>sleepwake matrix report</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n"
        )

    # --- summary and grid ----------------------------------------------------------------------
    def headline(self) -> str:
        text, ok, fake_text = self.run.headline()
        prefix = view.VERDICT_PREFIX[view.PARTIAL] if self.run.verdict() == view.PARTIAL else ""
        return (
            f'<p class="headline"><span class="{"ok" if ok else "bad"}">{escape(prefix + text)}</span>'
            f"{escape(fake_text)}</p>"
        )

    def header(self) -> str:
        run, states = self.run, self.run.states(self.run.generated())
        cases = [c for cell in run.ordered() for c in cell.cases]
        parts = [
            f'<span class="{"bad" if s == view.FAILED else ""}">{escape(s)}: {n}</span>'
            for s, n in sorted(states.items())
        ]
        excluded = len(run.ordered()) - len(run.generated())
        if excluded:
            parts.append(f'<span class="muted">and {excluded} excluded by the spec (tools/matrix.bzl)</span>')
        outcome = {o: sum(c.outcome == o for c in cases) for o in ("passed", "failed", "skipped")}
        source = (
            f"the results of <code>bazel {escape(run.invocation)}</code>"
            if run.invocation
            else "every result found there (no build events)"
        )
        notes = "".join(f"<li>{escape(n)}</li>" for n in run.notes)
        where = f'<p class="cpu-only">{escape(placement.text(run.cpu_placement))}</p>' if run.cpu_placement else ""
        failing = run.failing()
        first = (
            (
                "<p>first, the cells that failed or prove nothing: "
                + ", ".join(
                    f'<a href="#fail-{escape(c.name)}">{escape(c.name)}</a> ({escape(c.state)})' for c in failing
                )
                + "</p>"
            )
            if failing
            else ""
        )
        return (
            f"<header><h1>sleepwake matrix</h1>{self.headline()}{first}"
            f'<p class="summary"><b>{len(run.generated())} GPU cells</b> {"".join(parts)}</p>'
            f"<p>test cases of the GPU cells: {outcome['passed']} passed, {outcome['failed']} failed, "
            f"{outcome['skipped']} skipped. Read from {self.link(run.testlogs, run.testlogs)}: {source}.</p>"
            + where
            + (f'<ul class="notes">{notes}</ul>' if notes else "")
            + "</header>"
        )

    def grid(self) -> str:
        run = self.run
        head = "<tr><th>class</th>" + "".join(f"<th>{escape(view.column_label(c))}</th>" for c in run.columns) + "</tr>"
        rows = []
        for c in run.classes:
            tds = "".join(self.grid_cell(run.cells[(c, door, runner, mode)]) for door, runner, mode in run.columns)
            rows.append(f'<tr><th class="class">{escape(c)}</th>{tds}</tr>')
        return (
            '<section id="grid"><h2>Cells: front door &times; runner &times; mode &times; class</h2>'
            f'<table class="grid"><col class="class">{head}{"".join(rows)}</table></section>'
        )

    def grid_cell(self, cell: view.Cell) -> str:
        css = cell.state.replace(" ", "-")
        ran = cell.count("passed") + cell.count("failed")
        counts = f" {cell.count('passed')}/{ran}" if ran else ""
        inner = [f'<div class="state">{escape(cell.state)}{counts}</div>']
        if cell.seconds:
            start = f", server start {cell.server_start_s:.1f} s" if cell.server_start_s is not None else ""
            inner.append(f'<div class="muted">{cell.seconds:.0f} s{start}</div>')
        if cell.state == view.FAILED:
            first = cell.failures[0].message.strip().splitlines() or [""]
            preview = first[0][:MESSAGE_PREVIEW] + ("…" if len(first[0]) > MESSAGE_PREVIEW or len(first) > 1 else "")
            inner.append(f'<div class="msg">{escape(preview)} <a href="#fail-{escape(cell.name)}">details</a></div>')
        if cell.note:
            inner.append(f'<div class="note">{escape(cell.note)}</div>')
        inner.append(f'<div class="links">{self.cell_links(cell)}</div>')
        return (
            f'<td class="cell {css}" data-cell="{escape(cell.name)}" data-state="{escape(cell.state)}" '
            f'title="{escape(cell.name)}">{"".join(inner)}</td>'
        )

    def fake_grid(self) -> str:
        """The fake tier's targets, a grid of their own: they run the classes against the fake server on a
        CPU, on the cells tools/matrix.bzl names, so they are no row of the GPU grid."""
        fake = self.run.fake
        if not fake:
            return ""
        states = self.run.states(fake.values())
        counts = " ".join(f"<span>{escape(s)}: {n}</span>" for s, n in sorted(states.items()))
        rows = "".join(
            f'<tr><th class="class">{escape(name)}</th>{self.grid_cell(cell)}</tr>'
            for name, cell in sorted(fake.items())
        )
        return (
            '<section id="fake"><h2>Fake tier (CPU, the fake server)</h2>'
            f'<p class="summary"><b>{len(fake)} targets</b> {counts}</p>'
            f'<table class="grid fake"><col class="class">{rows}</table></section>'
        )

    def cell_links(self, cell: view.Cell) -> str:
        links = []
        for i, d in enumerate(cell.dirs):
            shard = f" {i + 1}" if len(cell.dirs) > 1 else ""
            for name, text in (("test.log", "log"), ("test.xml", "xml")):
                if os.path.exists(os.path.join(d, name)):
                    links.append(self.link(os.path.join(d, name), text + shard, name))
        for i, f in enumerate(cell.logs):
            links.append(self.output_link(f, "server log" + (f" {i + 1}" if len(cell.logs) > 1 else "")))
        return " ".join(links)

    def output_link(self, f: OutputFile, text: str) -> str:
        if f.member is None:
            return self.link(f.path, text, f.name)
        return self.link(f.path, text + " (zip)", f"{f.member} in {os.path.basename(f.path)}")

    # --- where the time went ----------------------------------------------------------------------
    def time_spent(self) -> str:
        t = self.run.time_spent
        if t is None:
            return ""
        items = "".join(f"<li>{escape(line)}</li>" for line in time_spent.lines(t))
        return (
            '<section id="time-spent"><h2>Where the run\'s time went</h2>'
            '<p class="muted">From the run record: each GPU wave as wide as its seconds, split by what its slot time'
            " went to; the CPU-only targets' own bazel test beside the waves; the host's busy cores.</p>"
            f"{time_spent.svg(t)}<ul>{items}</ul></section>"
        )

    # --- failures --------------------------------------------------------------------------------
    def failures(self) -> str:
        failed = [c for c in self.run.ordered() + list(self.run.fake.values()) if c.state == view.FAILED]
        if not failed:
            return '<section id="failures"><h2>Failures</h2><p class="ok">no cell failed</p></section>'
        articles = []
        for cell in failed:
            cases = "".join(
                f'<div class="case"><code>{escape(case.test_id)}</code>'
                f'<pre class="message">{escape(case.message)}</pre>'
                f"<details><summary>full failure text</summary><pre>{escape(case.text)}</pre></details></div>"
                for case in cell.failures
            )
            articles.append(
                f'<article class="failure" id="fail-{escape(cell.name)}">'
                f'<h3>{escape(cell.name)} <span class="muted">({escape(cell.label)})</span></h3>'
                f'<div class="links">{self.cell_links(cell)}</div>{cases}</article>'
            )
        return f'<section id="failures"><h2>Failures</h2>{"".join(articles)}</section>'

    # --- identity --------------------------------------------------------------------------------
    def identity(self) -> str:
        run, parts = self.run, []
        if len(run.identities) > 1:
            parts.append(f'<p class="bad">the cells report {len(run.identities)} different vLLM/GPU identities</p>')
        for text, cells in run.identities.items():
            parts.append(
                f'<pre>{escape(text)}</pre><p class="muted">reported by {len(cells)} cell(s) at '
                f"server start: {escape(', '.join(cells))}</p>"
            )
        if run.identity_file:
            path, text = run.identity_file
            parts.append(
                f"<h3>@sleepwake_gpu identity file</h3><p>{self.link(path, path)}</p><pre>{escape(text)}</pre>"
            )
        if not parts:
            parts.append(
                '<p class="muted">no server start recorded a vLLM identity, and no @sleepwake_gpu '
                "identity file was found beside the testlogs</p>"
            )
        return f'<section id="identity"><h2>vLLM and GPU</h2>{"".join(parts)}</section>'

    # --- memory ----------------------------------------------------------------------------------
    def memory(self, kind: str, heading: str) -> str:
        rows: dict[str, list] = {}  # test id without the cell suffix -> [(cell, panel)], in run order
        for cell in self.run.ordered():
            for p in series.memory_panels(cell.records):
                if p.kind == kind:
                    rows.setdefault(re.sub(r"\[[^\]]*\]$", "", p.test), []).append((cell, p))
        if not rows:
            return ""
        out = [
            f'<section id="{kind}-memory"><h2>{escape(heading)}</h2>'
            '<p class="muted">Bytes the tests read per cycle or per phase, per cell. Dashed red: a bound '
            "checked on these bytes; dotted grey: a reference reading. Hover a point for its value.</p>"
        ]
        for test, panels in rows.items():
            figures = "".join(self.panel(cell, p) for cell, p in panels)
            out.append(f'<h3><code>{escape(test)}</code></h3><div class="panels">{figures}</div>')
        return "".join(out) + "</section>"

    def panel(self, cell: view.Cell, p: series.Panel) -> str:
        if p.by_cycle:
            charts = svg.line_chart(
                p.series, title="bytes", guides=p.guides, scale=GB, unit="GB", x_name="cycle", min_span=0.1
            ) + svg.line_chart(
                p.series,
                title="change since cycle 1",
                guides=p.change_guides,
                scale=MiB,
                unit="MiB",
                x_name="cycle",
                baseline=True,
                min_span=8,
            )
        else:
            bars = [(lab.replace("_bytes", ""), y) for s in p.series for (_, y), lab in zip(s.points, s.labels)]
            charts = svg.bar_chart(bars, title="bytes per phase", guides=p.guides, scale=GB, unit="GB")
        return (
            f'<figure class="panel" data-cell="{escape(cell.name)}" data-test="{escape(p.test)}" '
            f'data-kind="{escape(p.kind)}"><figcaption>{escape(cell.label)}</figcaption>{charts}</figure>'
        )

    # --- timings ---------------------------------------------------------------------------------
    def timings(self) -> str:
        starts: list = []
        checks: dict = {}
        for cell in self.run.ordered():
            t = series.starts(cell.records, cell.name)
            if t:
                starts.append(t)
            for key, timing in series.timing_checks(cell.records, cell.name).items():
                checks.setdefault(key, []).append(timing)
        if not starts and not checks:
            return ""
        out = ['<section id="timings"><h2>Timings against their bounds</h2>']
        if starts:
            out.append(
                svg.strip_chart(
                    [svg.StripRow(t.cell, t.samples, None, t.bound, t.ok) for t in starts],
                    title="server start (s): asking the launcher for a server until it "
                    "answers, GPU-lease wait included",
                )
            )
            out.append(
                f'<p class="muted">bound: the launcher\'s start-up timeout, {series.START_BOUND:g} s '
                "(ServerConfig.startup_timeout_s; SLEEPWAKE_STARTUP_TIMEOUT_S overrides it)</p>"
            )
        order = list(series.SAMPLES_OF)  # sleep, wake, staged wake, cycle; then any other, by name
        for key, rows in sorted(checks.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0])):
            sample = series.SAMPLES_OF.get(key)
            title = f"{key}: the checked median" + (f" of the {sample} samples" if sample else "")
            out.append(
                svg.strip_chart([svg.StripRow(t.cell, t.samples, t.value, t.bound, t.ok) for t in rows], title=title)
            )
        return "".join(out) + "</section>"

    # --- the state walk ------------------------------------------------------------------------------
    def walk(self) -> str:
        """The state walk's coverage per cell: which situation pairs its shards' walks visited."""
        rows = []
        for w in self.run.walk_coverage():
            css = "ok" if w.complete else "bad"
            stopped = f" ({w.stopped} stopped)" if w.stopped else ""
            rows.append(
                f'<tr data-walk="{escape(w.cell.name)}"><td>{escape(w.label)}</td>'
                f'<td class="{css}">{w.visited}/{w.pairs}</td><td>{w.shards}/{w.expected_shards}{stopped}</td>'
                f"<td>{w.walks}</td><td>{w.steps}</td><td>{_of(w.states, w.model_states)}</td>"
                f"<td>{escape(', '.join(w.unvisited[:10]) or '-')}</td>"
                f'<td class="{css}" data-gate="{"full" if w.complete else "partial"}">{escape(w.gate_text())}</td></tr>'
            )
        if not rows:
            return ""
        return (
            '<section id="walk"><h2>State walk coverage</h2><p>situation pairs of the model the walks '
            "visited, counted from the steps that ran, summed over the shards that reported, those a failure stopped "
            "included; shards: those that walked their share to the end (tests/core/walk). The cell: the union of "
            "its shards' walked pairs against every pair of its door, and its terminal probes; a cell short of "
            "either is partial (tools/results/walk_gate.py), and so is the run.</p>"
            '<table class="walk"><tr><th>cell</th><th>pairs visited</th><th>shards</th><th>walks</th>'
            f"<th>steps</th><th>states visited</th><th>unvisited</th><th>the cell</th></tr>{''.join(rows)}"
            "</table></section>"
        )

    def weight_updates(self) -> str:
        """Each RL framework's recipe and each push way, with its verdict per cell that ran it."""
        cells = self.run.ran()
        sections = []
        for title, rows, what in (
            ("RL recipes", weight_updates.recipes(cells), "each framework's weight-update sequence (rl_recipes)"),
            ("Push ways", weight_updates.push_ways(cells), "weight_sync's tests, once per way of pushing weights"),
            (
                "Walk operations",
                weight_updates.walk_operations(cells),
                "each operation of the state walk (pushes, /pause, /resume, sleeps, wakes, reloads, requests): "
                "the pairs its executed steps walked in each walk cell, or the steps a failure named it at",
            ),
        ):
            if not rows:
                continue
            labels = sorted({label for row in rows for label in row.by_cell})
            head = "".join(f"<th>{escape(label)}</th>" for label in labels)
            body = "".join(
                f'<tr data-row="{escape(row.name)}"><td>{escape(row.name)}</td>'
                f'<td class="{"ok" if row.outcome == "passed" else "bad"}">{escape(row.outcome)}</td>'
                + "".join(f"<td>{escape(row.by_cell.get(label, '-'))}</td>" for label in labels)
                + "</tr>"
                for row in rows
            )
            sections.append(
                f"<h3>{title}</h3><p>{escape(what)}, counted from the test cases that ran.</p>"
                f'<table class="walk"><tr><th>name</th><th>verdict</th>{head}</tr>{body}</table>'
            )
        if not sections:
            return ""
        return '<section id="weight-updates"><h2>Weight updates</h2>' + "".join(sections) + "</section>"

    # --- the run history -------------------------------------------------------------------------
    def run_history(self) -> str:
        """The main job's runs, one dot each (tools/bench/runs.jsonl): how its time moved, fresh and warm."""
        h = self.history
        if h is None:
            return ""
        head = '<section id="history"><h2>Main job history</h2>'
        if h.error:
            return f'{head}<p class="bad">{escape(h.error)}</p></section>'
        red = sum(e["status"] != "green" for e in h.entries)
        summary = (
            f"<p>{len(h.entries)} runs in {self.link(h.path, os.path.basename(h.path))}, "
            f'<span class="{"bad" if red else "ok"}">{red} red</span>. '
            f"{escape(run_history.latest_line(list(h.entries)))}</p>"
        )
        chart = svg.history_chart(
            series.history_points(h.entries),
            title="the main job: Bazel's elapsed time per run, oldest first (hover a run for its record)",
        )
        return head + summary + chart + "</section>"

    # --- mutants ---------------------------------------------------------------------------------
    def mutants(self) -> str:
        m = self.run.mutation
        if m is None:
            return ""
        table, rest = markdown_table(m.table)
        verdict = f'<p class="{"ok" if m.ok else "bad"}">{escape(m.verdict())}</p>'
        items = "".join(
            f'<li class="sub">{escape(line[2:])}</li>' if line.startswith("- ") else f"<li>{escape(line)}</li>"
            for line in rest
            if line.strip()
        )
        return f'<section id="mutants"><h2>Mutants</h2>{verdict}{table}<ul>{items}</ul></section>'


BAD_WORDS = ("survived", "other", "not applied", "no result", "NOT KILLED", "CONTROL FAILED")
OK_WORDS = ("killed", "pass", "control passed")


def _of(n: int | None, total: int | None) -> str:
    """ "n of total" where both were recorded."""
    if n is None:
        return "-"
    return f"{n} of {total}" if total else str(n)


def markdown_table(text: str) -> tuple[str, list[str]]:
    """(an HTML table of the leading markdown table in `text` (tools/results/mutation_table.py's), the lines after)."""
    lines = text.splitlines()
    rows = []
    while lines and lines[0].startswith("|"):
        rows.append(lines.pop(0))
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows if not set(r) <= set("|-")]
    if not cells:
        return "", lines
    width = len(cells[0])
    out = ["<tr>" + "".join(f"<th>{escape(c)}</th>" for c in cells[0]) + "</tr>"]
    for row in cells[1:]:
        row = row[: width - 1] + [" | ".join(row[width - 1 :])]  # a "|" inside the verdict text
        tds = []
        for c in row:
            css = "bad" if any(w in c for w in BAD_WORDS) else "ok" if c.startswith(OK_WORDS) else ""
            tds.append(f'<td class="{css}">{escape(c)}</td>' if css else f"<td>{escape(c)}</td>")
        out.append("<tr>" + "".join(tds) + "</tr>")
    return f'<table class="mutants">{"".join(out)}</table>', lines


def page(run: view.Run, out_dir: str, history: RunHistory | None = None) -> str:
    return Page(run, out_dir, history).html()
