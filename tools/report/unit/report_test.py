"""The report page rendered from recorded test outputs (testdata/testlogs: a matrix and mutant run as
Bazel leaves it) and read back: grid states, failure messages, a polyline per cycle series, phase bars,
bounds,
escaping, links, identity, the mutation table and the command's errors."""

import html
import html.parser
import json
import os
import pathlib
import re
import shutil
import urllib.parse
import zipfile

import pytest

from tools import matrix
from tools.matrix import SLEEP_WAKE_CLASSES, shard_count
from tools.report import cli, render, svg, text, view
from tools.results import mutation_table, testlogs, walk_gate
from tools.results.unit.testlogs_testing import write_bep, write_xml

FIXTURE = pathlib.Path(__file__).parent / "testdata" / "testlogs"
MATRIX = pathlib.Path("tests", "sleep_wake")
ZIPPED = "memory_leak_cycle_mrv2_graph"  # its outputs are zipped, as Bazel does by default
DOOR = "flags_async_llm_mrv2_graph"  # a cell through an in-process door: its own column of the grid
STALE = "error_paths_mrv2_eager"  # left out of the build events
WALK_SHARDS = shard_count("state_walk", "eager", "http")  # the spec's for _walk_cell's cell, which the report expects
STATES = {
    "memory_leak_cycle_mrv1_eager": view.PASSED,
    "physical_memory_mrv1_eager": view.PASSED,
    "latency_mrv1_eager": view.PASSED,
    "memory_leak_cycle_mrv2_graph": view.FAILED,
    "latency_mrv2_graph": view.FAILED,
    "flags_mrv1_eager": view.FAILED,
    "scheduler_gate_mrv1_graph": view.NO_CASES,  # zero test cases
    "abort_parallel_sampling_mrv2_graph": view.NO_CASES,  # pytest_main's skipped case: a filter selected none
    "concurrent_race_mrv1_eager": view.UNREADABLE,
    STALE: view.STALE,
    DOOR: view.PASSED,
}
# Every class on every HTTP runner x mode and on each in-process door's cells (tools/matrix.bzl).
GRID_CELLS = len(SLEEP_WAKE_CLASSES) * len(matrix.door_cells())
IDENTITY = "gpus: 0, NVIDIA H200, 570.133.20, 143771 MiB; 1, NVIDIA H200, 570.133.20, 143771 MiB"


class Elements(html.parser.HTMLParser):
    """Every start tag as (tag, attrs, index of the enclosing figure or None)."""

    def __init__(self, text):
        super().__init__()
        self.found, self.figure = [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "figure":
            self.figure = len(self.found)
        self.found.append((tag, dict(attrs), self.figure))

    def handle_endtag(self, tag):
        if tag == "figure":
            self.figure = None

    def all(self, tag, **attrs):
        return [a for t, a, _ in self.found if t == tag and all(a.get(k) == v for k, v in attrs.items())]

    def inside(self, figure_attrs, tag):
        """(tag attrs) of `tag` elements inside each figure matching figure_attrs."""
        out = []
        for i, (t, a, _) in enumerate(self.found):
            if t == "figure" and all(a.get(k) == v for k, v in figure_attrs.items()):
                out.append([x for t2, x, fig in self.found if fig == i and t2 == tag])
        return out


def _found(pattern: str, text: str, group: int = 1, flags: int = re.S) -> str:
    """The group of pattern's first match in text; the test fails where there is none."""
    match = re.search(pattern, text, flags)
    assert match, f"no {pattern!r} in {text[:300]!r}"
    return match.group(group)


def _grid(page):
    """(class, column heading) -> (data-cell, data-state, the cell's text) of the GPU grid's cells."""
    section = _found(r'<section id="grid">(.*?)</section>', page)
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)
    heads = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", rows[0])][1:]
    out = {}
    for row in rows[1:]:
        test_class = _found(r'<th class="class">(.*?)</th>', row, flags=0)
        tds = re.findall(r'<td [^>]*data-cell="([^"]*)" data-state="([^"]*)"[^>]*>(.*?)</td>', row, re.S)
        assert len(tds) == len(heads), test_class
        for head, (cell, state, inner) in zip(heads, tds):
            out[(test_class, head)] = (cell, state, html.unescape(re.sub(r"<[^>]+>", " ", inner)))
    return out


def _bazel_layout(tmp_path, bep_skip=(STALE,)):
    """The fixture as Bazel leaves it: under <output base>/execroot/.../testlogs, the GPU identity file
    in <output base>/external, one cell's outputs zipped, and build events naming every test.xml but
    those of bep_skip. Returns (testlogs, bep)."""
    base = tmp_path / "output_base"
    logs = base / "execroot" / "sleepwake" / "bazel-out" / "k8-fastbuild" / "testlogs"
    shutil.copytree(FIXTURE, logs)
    identity = base / "external" / "sleepwake_gpu" / "identity.txt"
    identity.parent.mkdir(parents=True)
    identity.write_text("python: 3.12.3 /opt/sleepwake/gpu-python\nvllm: 0.26.0 record-sha256=abc\n" + IDENTITY + "\n")
    outputs = logs / MATRIX / ZIPPED / "test.outputs"
    files = [p for p in sorted(outputs.rglob("*")) if p.is_file()]
    with zipfile.ZipFile(outputs / "outputs.zip", "w") as z:
        for p in files:
            z.write(p, p.relative_to(outputs).as_posix())
    shutil.rmtree(outputs / "TestMemoryLeakCycle")
    (outputs / "measurements.jsonl").unlink()
    events = [
        {"id": {"started": {}}, "started": {"command": "test"}},
        {"id": {"pattern": {"pattern": ["//tests/sleep_wake/..."]}}},
    ]
    for xml in sorted(logs.rglob("test.xml")):
        if xml.parent.name not in bep_skip:
            events.append(
                {
                    "id": {
                        "testResult": {
                            "label": f"//tests/sleep_wake:{xml.parent.name}",
                            "run": 1,
                            "shard": 1,
                            "attempt": 1,
                        }
                    },
                    "testResult": {"testActionOutput": [{"name": "test.xml", "uri": xml.as_uri()}], "status": "PASSED"},
                }
            )
    bep = tmp_path / "bep.json"
    bep.write_text("".join(json.dumps(e) + "\n" for e in events))
    return logs, bep


def _render(tmp_path, *extra, logs=None):
    out = tmp_path / "page" / "report.html"
    argv = ["tools.report", str(logs), "--out", str(out)] + [str(e) for e in extra]
    assert cli.main(argv) == 0
    return out.read_text(encoding="utf-8")


@pytest.fixture
def run(tmp_path):
    logs, bep = _bazel_layout(tmp_path)
    page = _render(tmp_path, "--bep", bep, logs=logs)
    return logs, page, Elements(page), tmp_path / "page"


def test_grid_has_every_cell_in_its_state(run):
    _, _, doc, _ = run
    cells = {a["data-cell"]: a["data-state"] for a in doc.all("td") if "data-cell" in a}
    assert len(cells) == GRID_CELLS
    assert {c: s for c, s in cells.items() if s not in view.ABSENT} == STATES
    excluded = {
        f"{test_class}_{door}_{cell}"
        for door, classes in matrix.DOOR_EXCLUDED.items()
        for test_class in classes
        for cell in matrix.DOOR_CELLS[door]
    }
    assert {c for c, s in cells.items() if s == view.EXCLUDED} == excluded


def test_a_door_cell_lands_in_its_own_column(run):
    """flags through AsyncLLM on MRV2-graph is a cell of its own: its result in the async_llm column, the
    HTTP cells of the class in theirs; a door cell the spec makes that did not run is "not run"."""
    _, page, _, _ = run
    grid = _grid(page)
    heads = list(dict.fromkeys(head for _, head in grid))
    assert heads[:4] == ["HTTP · MRV1-eager", "HTTP · MRV1-graph", "HTTP · MRV2-eager", "HTTP · MRV2-graph"]
    assert "async_llm · MRV2-graph" in heads[4:] and "llm · MRV2-graph" in heads[4:]
    assert grid[("flags", "async_llm · MRV2-graph")][:2] == (DOOR, view.PASSED)
    assert grid[("flags", "HTTP · MRV2-graph")][:2] == ("flags_mrv2_graph", view.NOT_RUN)
    assert grid[("flags", "HTTP · MRV1-eager")][:2] == ("flags_mrv1_eager", view.FAILED)
    assert grid[("flags", "llm · MRV2-graph")][:2] == ("flags_llm_mrv2_graph", view.NOT_RUN)


def test_a_class_a_door_cannot_run_is_excluded_with_its_reason_not_missing(tmp_path, monkeypatch, capsys):
    why = "pushes weights through collective_rpc, which the door does not offer"
    # The spec's exclusions replaced by these (the report reads the same dict).
    monkeypatch.setitem(matrix.DOOR_EXCLUDED, "async_llm", {"weight_sync": why})
    monkeypatch.setitem(
        matrix.DOOR_EXCLUDED, "llm", {"host_memory": "reads the server's own process", "weight_sync": why}
    )
    monkeypatch.setitem(matrix.DOOR_EXCLUDED, "llm_colocate", {})
    logs, bep = _bazel_layout(tmp_path)
    page = _render(tmp_path, "--bep", bep, logs=logs)
    grid = _grid(page)
    cell, state, shown = grid[("weight_sync", "llm · MRV2-graph")]
    assert (cell, state) == ("weight_sync_llm_mrv2_graph", view.EXCLUDED) and why in shown
    assert grid[("host_memory", "async_llm · MRV2-graph")][1] == view.NOT_RUN  # excluded from llm only
    assert grid[("weight_sync", "HTTP · MRV1-eager")][1] == view.NOT_RUN  # HTTP runs every class
    # Nothing is missing there: the headline and the failing cells are the same as without exclusions.
    run = view.load_run(str(logs), str(tmp_path), [str(bep)])
    assert run.headline()[0].startswith("4/10 GPU cells passed")
    assert view.EXCLUDED not in {c.state for c in run.failing()}
    assert len(run.generated()) == GRID_CELLS - 3 and "and 3 excluded by the spec" in page
    capsys.readouterr()
    assert cli.main(["tools.report", str(logs), "--bep", str(bep), "--text"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if view.EXCLUDED in line]
    assert listed == [
        "excluded by tools/matrix.bzl: host_memory through llm (reads the server's own process)",
        f"excluded by tools/matrix.bzl: weight_sync through async_llm, llm ({why})",
    ]


def test_a_cell_that_ran_nothing_says_why(run):
    _, page, _, _ = run
    cell = _found(r'<td [^>]*data-cell="abort_parallel_sampling_mrv2_graph".*?</td>', page, group=0)
    assert "--test_filter 'TestSleepWakeFlags' matched no test in this target." in html.unescape(cell)


def test_each_failed_cell_shows_its_failure_messages(run):
    _, page, _, _ = run
    articles = dict(re.findall(r'<article class="failure" id="fail-([^"]+)">(.*?)</article>', page, re.S))
    assert set(articles) == {c for c, s in STATES.items() if s == view.FAILED}
    leak = html.unescape(articles["memory_leak_cycle_mrv2_graph"])
    assert "test_bytes_flat_over_ten_cycles[MRV2-graph]" in leak
    assert (
        "measured 1.67772e+08 bytes (spread or growth over the cycles), expected <= 6.71089e+07 "
        "(threshold 'cycle_bytes_flat_max'"
    ) in leak
    assert "threshold 'wake_s_max'" in html.unescape(articles["latency_mrv2_graph"])
    assert 'href="#fail-latency_mrv2_graph"' in page  # the grid links its red cell to the message


def test_a_hostile_message_is_escaped(run):
    _, page, doc, _ = run
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert not doc.all("script") and not doc.all("img")
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page


def test_a_polyline_per_cell_series(run):
    _, _, doc, _ = run
    expected = {
        ("memory_leak_cycle_mrv1_eager", "gpu"): {"asleep_bytes", "awake_bytes"},
        ("memory_leak_cycle_mrv1_eager", "host"): {"host_asleep_bytes", "host_awake_bytes"},
        (ZIPPED, "gpu"): {"asleep_bytes", "awake_bytes"},  # read from outputs.zip
        ("physical_memory_mrv1_eager", "gpu"): {"bytes"},
    }
    figures = {(a["data-cell"], a["data-kind"]) for a in doc.all("figure")}
    assert figures == set(expected)
    for (cell, kind), names in expected.items():
        if not cell.startswith("memory_leak"):
            continue
        for lines in doc.inside({"data-cell": cell, "data-kind": kind}, "polyline"):
            assert {p["data-series"] for p in lines} == names, (cell, kind)
            assert all(len(p["points"].split()) == 10 for p in lines), cell  # one point per cycle


def test_phases_are_bars_from_zero(run):
    """A phase panel holds separate quantities (awake, asleep, woken): bars from zero, never a line."""
    _, _, doc, _ = run
    figures = doc.inside({"data-cell": "physical_memory_mrv1_eager"}, "rect")
    assert len(figures) == 4 and not any(doc.inside({"data-cell": "physical_memory_mrv1_eager"}, "polyline")[0])
    for rects in figures:
        bars = [r for r in rects if r.get("class") == "bar"]
        assert len(bars) in (3, 4), bars  # awake, asleep(, weights only), woken
        assert bars[0]["data-label"] == "awake" and all(float(b["data-value"]) > 0 for b in bars)
        bottoms = {round(float(b["y"]) + float(b["height"]), 1) for b in bars}
        assert len(bottoms) == 1, "bars do not share the zero line"


def test_bounds_are_drawn(run):
    _, page, doc, _ = run
    bounds = [(a.get("data-bound"), a.get("data-slope")) for a in doc.all("line") if a.get("class") == "bound"]
    assert bounds.count(("420", None)) == 7  # server start, every cell that started one
    assert bounds.count(("0.25", None)) == 3  # wake_s_max in both latency cells, staged_wake_s_max in one
    assert ("1073741824", "0") in bounds  # level1_residue_bytes_max on the phase chart
    titles = re.findall(r'class="bound" data-bound="1073741824"[^>]*><title>([^<]*)</title>', page)
    assert titles and set(titles) == {"level1_residue_bytes_max &lt;= 1.07374e+09 bytes"}, titles  # its relation
    assert ("67108864", "0") in bounds  # cycle_bytes_flat_max on the change-since-cycle-1 chart
    assert ("0", "8388608") in bounds  # leak_bytes_per_cycle_max as a slope
    over = [a for a in doc.all("rect") if a.get("class") == "value" and a.get("fill") == "#d62728"]
    assert [a["data-value"] for a in over] == ["0.553"]  # the one median over its bound


def test_links_point_at_the_cells_files(run):
    logs, _, doc, out_dir = run
    hrefs = [a["href"] for a in doc.all("a") if not a["href"].startswith("#")]
    resolved = {os.path.normpath(out_dir / urllib.parse.unquote(h)) for h in hrefs}
    for path in resolved:
        assert os.path.exists(path), path
    for cell in STATES:
        assert str(logs / MATRIX / cell / "test.log") in resolved, cell
    assert str(logs / MATRIX / ZIPPED / "test.outputs" / "outputs.zip") in resolved
    assert (
        str(
            logs
            / MATRIX
            / "latency_mrv1_eager"
            / "test.outputs"
            / "TestSleepWakeLatency"
            / "vllm-mrv1-eager-k2j3h4.log"
        )
        in resolved
    )
    assert all(not h.startswith("/") for h in hrefs)  # relative: the page moves with the testlogs


def test_identity_of_vllm_and_gpu(run):
    _, page, _, _ = run
    section = html.unescape(_found(r'<section id="identity">(.*?)</section>', page))
    assert "vllm: 0.26.0 record-sha256=6f1c0e8a" in section  # from the server_start_s records
    assert "reported by 7 cell(s)" in section
    assert "output_base/external/sleepwake_gpu/identity.txt" in section and IDENTITY in section


def test_mutation_table_when_mutants_ran(run):
    _, page, _, _ = run
    table = _found(r'<table class="mutants">(.*?)</table>', page)
    assert '<td class="ok">killed</td>' in table and '<td class="bad">survived</td>' in table
    assert '<td class="bad">NOT KILLED</td>' in table and "(control)" in table
    assert "NOT GREEN (a mutant survived" in html.unescape(page)


def test_no_mutation_table_without_mutants(tmp_path):
    logs, bep = _bazel_layout(tmp_path)
    shutil.rmtree(logs / "tests" / "mutants")
    page = _render(tmp_path, "--bep", bep, logs=logs)
    assert '<section id="mutants"' not in page and '<table class="mutants"' not in page
    assert 'data-state="failed"' in page  # the rest of the page is there


def test_without_build_events_stale_cells_are_not_told_apart(tmp_path):
    logs, _ = _bazel_layout(tmp_path)
    doc = Elements(_render(tmp_path, "--no_bep", logs=logs))
    states = {a["data-cell"]: a["data-state"] for a in doc.all("td") if "data-cell" in a}
    assert states[STALE] == view.PASSED
    assert "cannot be told from this run" in html.unescape(_render(tmp_path, "--no_bep", logs=logs))


def test_build_events_of_another_run_are_ignored(tmp_path):
    logs, _ = _bazel_layout(tmp_path)
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            {
                "id": {"testResult": {"label": "//x:x"}},
                "testResult": {
                    "testActionOutput": [{"name": "test.xml", "uri": "file:///elsewhere/testlogs/x/test.xml"}]
                },
            }
        )
        + "\n"
    )
    page = html.unescape(_render(tmp_path, "--bep", other, logs=logs))
    assert 'data-state="stale"' not in page and "describe another run and were ignored" in page


def _waves(bep, ws, names=(".bazel-bep-wave1.json", ".bazel-bep-wave2.json")):
    """The build events of _bazel_layout as tools/run_matrix.sh leaves them: one file per wave (bazel
    test), the results dealt out between them, each with its own started and pattern events."""
    events = [json.loads(line) for line in bep.read_text().splitlines()]
    head = [e for e in events if "testResult" not in e["id"]]
    results = [e for e in events if "testResult" in e["id"]]
    paths = []
    for i, name in enumerate(names):
        path = ws / name
        path.write_text("".join(json.dumps(e) + "\n" for e in head + results[i :: len(names)]))
        paths.append(path)
    return paths


def _stale_state_and_notes(page):
    states = {a["data-cell"]: a["data-state"] for a in Elements(page).all("td") if "data-cell" in a}
    return states[STALE], "cannot be told from this run" in html.unescape(page)


def test_the_main_jobs_wave_event_files_are_read_by_default(tmp_path, monkeypatch):
    """tools/run_matrix.sh runs two bazel tests (waves) and writes .bazel-bep-wave1.json and -wave2.json,
    not .bazel-bep.json: without --bep the report reads both, so its stale cells are still told apart."""
    logs, bep = _bazel_layout(tmp_path)
    ws = tmp_path / "workspace"
    ws.mkdir()
    _waves(bep, ws)
    monkeypatch.setenv("BUILD_WORKSPACE_DIRECTORY", str(ws))
    page = _render(tmp_path, logs=logs)
    assert _stale_state_and_notes(page) == (view.STALE, False)
    assert "test //tests/sleep_wake/...; bazel test //tests/sleep_wake/..." in html.unescape(page)


def test_each_wave_file_given_counts_and_one_alone_leaves_the_others_cells_stale(tmp_path):
    logs, bep = _bazel_layout(tmp_path)
    one, two = _waves(bep, tmp_path)
    both = Elements(_render(tmp_path, "--bep", one, "--bep", two, logs=logs))
    states = {a["data-cell"]: a["data-state"] for a in both.all("td") if "data-cell" in a}
    assert {c: s for c, s in states.items() if s not in view.ABSENT} == STATES
    alone = Elements(_render(tmp_path, "--bep", one, logs=logs))
    states = {a["data-cell"]: a["data-state"] for a in alone.all("td") if "data-cell" in a}
    assert view.STALE in states.values() and len([s for s in states.values() if s == view.STALE]) > 1


def test_the_default_build_events_are_the_newer_of_the_waves_and_the_single_file(tmp_path):
    ws = tmp_path
    assert cli.default_beps(str(ws)) == []
    single = ws / cli.BEP_FILE
    single.write_text("")
    assert cli.default_beps(str(ws)) == [str(single)]
    waves = _waves(ws / cli.BEP_FILE, ws)  # an empty run's events, written after the single file
    os.utime(single, (1, 1))
    assert cli.default_beps(str(ws)) == [str(w) for w in waves]
    os.utime(single, None)
    for w in waves:  # a later tools/test.sh run (one bazel test) after the main job's waves
        os.utime(w, (1, 1))
    assert cli.default_beps(str(ws)) == [str(single)]


def test_a_cut_measurements_line_is_reported_not_fatal(tmp_path):
    logs, bep = _bazel_layout(tmp_path)
    with open(logs / MATRIX / "latency_mrv1_eager" / "test.outputs" / "measurements.jsonl", "a") as f:
        f.write('{"cell": "MRV1-eager", "key": "cycle_s", "val\n')
    page = html.unescape(_render(tmp_path, "--bep", bep, logs=logs))
    assert "latency_mrv1_eager: 1 line(s) of measurements.jsonl are not JSON" in page


def test_the_package_dir_is_accepted_for_the_testlogs_dir(tmp_path):
    logs, bep = _bazel_layout(tmp_path)
    assert _render(tmp_path, "--bep", bep, logs=logs / MATRIX) == _render(tmp_path, "--bep", bep, logs=logs)


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda p: p / "missing", "no directory"),
        (lambda p: p, "holds no tests/sleep_wake or tests/mutants results"),
    ],
)
def test_a_wrong_testlogs_dir_is_one_line(tmp_path, capsys, make, says):
    assert cli.main(["tools.report", str(make(tmp_path)), "--out", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "r.html").exists()


def test_the_fake_tier_is_a_grid_of_its_own_and_the_headline_counts_gpu_cells(tmp_path):
    logs, _ = _bazel_layout(tmp_path)
    # Fake tier targets beside the GPU cells, as Bazel leaves them: <class>_fake_<runner>_<mode>[_<door>].
    shutil.copytree(logs / MATRIX / "flags_mrv1_eager", logs / MATRIX / "flags_fake_mrv1_eager")
    shutil.copytree(logs / MATRIX / DOOR, logs / MATRIX / "flags_fake_mrv2_graph_llm")
    page = _render(tmp_path, logs=logs)
    doc = Elements(page)
    gpu = {a["data-cell"] for t, a, _ in doc.found if t == "td" and "data-cell" in a and "fake" not in a["data-cell"]}
    grids = re.findall(r'<section id="(grid|fake)">(.*?)</section>', page, re.S)
    assert [name for name, _ in grids] == ["grid", "fake"]
    for fake in ("flags_fake_mrv1_eager", "flags_fake_mrv2_graph_llm"):
        assert fake not in grids[0][1] and fake in grids[1][1], fake
    assert len(gpu) == GRID_CELLS  # the GPU grid keeps its cells, no fake row added
    headline = _found(r'<p class="headline">(.*?)</p>', page)
    ran = sum(
        1
        for t, a, _ in doc.found
        if t == "td"
        and a.get("data-state") not in (None, view.STALE, *view.ABSENT)
        and "fake" not in a.get("data-cell", "")
    )
    assert re.search(rf"\d+/{ran} GPU cells passed", headline), headline
    assert re.search(r"fake tier: 1/2 passed", headline) and "vLLM 0.26.0, NVIDIA H200" in headline


def test_cpu_only_targets_run_in_their_own_output_base_are_read_there_and_placed(tmp_path, capsys):
    """run_matrix.sh runs the CPU-only targets beside the GPU waves in an output base of its own: the report
    finds their results through their build events, and says where they ran, counted from those events."""
    logs, gpu_bep = _bazel_layout(tmp_path)
    other = tmp_path / "cpu_base" / "execroot" / "sleepwake" / "bazel-out" / "k8-fastbuild" / "testlogs"
    fake = "//tests/sleep_wake:flags_fake_mrv1_eager"
    xml = write_xml(other / MATRIX / "flags_fake_mrv1_eager" / "test.xml", {"test_flags": "passed"})
    unit = "//tests/sleep_wake/unit:oracle_unit_test"
    unit_xml = write_xml(other / "tests" / "sleep_wake" / "unit" / "oracle_unit_test" / "test.xml", {"t": "passed"})
    cpu_bep = tmp_path / "cpu.json"
    write_bep(
        cpu_bep,
        [(fake, xml, "PASSED"), (unit, unit_xml, "PASSED")],
        tags={fake: ["fake", "flags", "http"], unit: []},
        span=(99.0, 250.0),
    )
    # The GPU wave's events with its targets' tags and times, as Bazel writes them.
    events = [json.loads(line) for line in gpu_bep.read_text().splitlines()]
    events[0]["started"]["startTimeMillis"] = "100000"
    labels = [e["id"]["testResult"]["label"] for e in events if "testResult" in e["id"]]
    events += [{"id": {"targetConfigured": {"label": x}}, "configured": {"tag": ["gpu"]}} for x in labels]
    events.append({"id": {"buildFinished": {}}, "finished": {"finishTimeMillis": "400000"}})
    gpu_bep.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert cli.main(["tools.report", str(logs), "--bep", str(gpu_bep), "--bep", str(cpu_bep), "--text"]) == 0
    out = capsys.readouterr().out
    assert "fake tier: 1/1 passed" in out.splitlines()[0], out.splitlines()[0]
    line = (
        "CPU-only targets: 2 ran (fake tier 1, other 1): 2 in a bazel test of their own beside the GPU waves"
        " (-1.0 to +150.0 s of the GPU waves' 300.0 s): off the GPU job's critical path"
    )
    assert line in out.splitlines()
    page = _render(tmp_path, "--bep", gpu_bep, "--bep", cpu_bep, logs=logs)
    assert html.escape(line) in page


def test_a_fake_target_through_a_door_names_its_door_and_keeps_its_release():
    assert view.split_fake("flags_fake_mrv2_graph_llm") == ("flags", "llm", "mrv2", "graph")
    assert view.split_fake("flags_fake_mrv2_graph_async_llm") == ("flags", "async_llm", "mrv2", "graph")
    assert view.split_fake("flags_fake_mrv1_eager_vllm0.25.0") == ("flags", "http", "mrv1", "eager")
    assert view.split_fake("flags_fake_mrv2_graph_vllm0.25.0_llm") == ("flags", "llm", "mrv2", "graph")
    assert view.split_fake("flags_fake_mrv1_eager") == ("flags", "http", "mrv1", "eager")
    assert view.split_fake("flags_async_llm_mrv2_graph") is None and view.split_fake("x_fake_mrv9_eager") is None
    split = view.split_fake("flags_fake_mrv2_graph_llm")
    assert split is not None
    cell = view.Cell.at(split, target="flags_fake_mrv2_graph_llm")
    assert (cell.name, cell.door, cell.label) == ("flags_fake_mrv2_graph_llm", "llm", "llm · MRV2-graph")


def test_text_mode_says_what_the_page_says(tmp_path, capsys):
    """--text prints the headline, every failing or flagged cell with why, and leaves stale cells'
    measurements out of the spread; it writes no page."""
    logs, bep = _bazel_layout(tmp_path)
    with open(logs / MATRIX / STALE / "test.outputs" / "measurements.jsonl", "a") as f:
        f.write(json.dumps({"key": "server_start_s", "value": 999.0}) + "\n")
    assert cli.main(["tools.report", str(logs), "--bep", str(bep), "--text"]) == 0
    out = capsys.readouterr().out
    # The stale cell is an earlier run's result: counted apart, not as one of this run's cells.
    bad = {c: s for c, s in STATES.items() if s not in (view.PASSED, view.STALE)}
    assert out.startswith("NOT GREEN: 4/10 GPU cells passed, vLLM 0.26.0, NVIDIA H200"), out.splitlines()[0]
    assert "1 earlier result(s) in these testlogs not counted (stale)" in out.splitlines()[0]
    assert "; by door: http 10, async_llm 1); their test cases:" in out  # the stale cell among them
    listed = re.findall(r"^  ([a-z ]+): (\w+)", out, re.M)
    assert {cell: state for state, cell in listed} == bad and len(listed) == len(bad)
    assert "--test_filter 'TestSleepWakeFlags' matched no test in this target." in out
    assert (
        re.search(r"^server starts: \d+; ready for the tests \(GPU slot wait included\) after median", out, re.M)
        and "max 999.0 s" not in out
    )
    assert STALE not in "".join(line for line in out.splitlines() if "(max in" in line)
    assert not (logs.parent / cli.DEFAULT_OUT).exists()


def test_a_run_of_a_few_targets_is_judged_on_those_and_not_on_earlier_results(tmp_path, capsys):
    """run_matrix.sh //tests/sleep_wake:state_walk_mrv1_eager leaves every other cell's earlier result in
    bazel-testlogs: the headline is this run's (green when what ran passed), the rest a count."""
    logs, bep = _bazel_layout(tmp_path)
    matrix = logs / MATRIX
    for name, state in STATES.items():
        if state not in (view.PASSED, view.STALE):
            shutil.rmtree(matrix / name)
    assert cli.main(["tools.report", str(logs), "--bep", str(bep), "--text"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("4/4 GPU cells passed") and "1 earlier result(s)" in first, first


def test_a_rerun_is_judged_on_its_own_results_not_on_an_earlier_runs_per_test(tmp_path, capsys):
    """--runs_per_test=2, then a plain run of the same sharded cell: bazel-testlogs holds both runs' result
    dirs (shard_1_of_N_run_1_of_2/ beside shard_1_of_N/), and the cell is judged on this run's; on the H200
    the whole cell was taken for stale ("NOT GREEN: 0/0 GPU cells passed")."""
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)})
    cell = tmp_path / MATRIX / "state_walk_mrv1_eager"
    current = sorted(cell.glob("shard_*/test.xml"))
    for shard in range(WALK_SHARDS):
        for attempt in (1, 2):  # the earlier invocation's runs, one of them failed: not this run's verdict
            write_xml(
                cell / f"shard_{shard + 1}_of_{WALK_SHARDS}_run_{attempt}_of_2" / "test.xml",
                {f"test_walk_visits_every_pair_of_its_shard[{shard}]": "failed" if attempt == 2 else "passed"},
            )
    bep = tmp_path / "bep.json"
    write_bep(
        bep, [("//tests/sleep_wake:state_walk_mrv1_eager", xml, "PASSED", i + 1) for i, xml in enumerate(current)]
    )
    assert cli.main(["tools.report", str(tmp_path), "--bep", str(bep), "--text"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("1/1 GPU cells passed") and f"{2 * WALK_SHARDS} earlier result(s)" in first, first
    run = view.load_run(str(tmp_path), str(tmp_path), [str(bep)])
    walk = run.cells[("state_walk", "http", "mrv1", "eager")]
    assert (walk.state, len(walk.dirs), len(walk.stale_dirs)) == (view.PASSED, WALK_SHARDS, 2 * WALK_SHARDS)


def test_text_mode_of_a_green_run_has_no_warning(tmp_path, capsys):
    logs, bep = _bazel_layout(tmp_path)
    matrix = logs / MATRIX
    for name, state in STATES.items():
        if state != view.PASSED:
            shutil.rmtree(matrix / name)
    assert cli.main(["tools.report", str(logs), "--no_bep", "--text"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith("4/4 GPU cells passed"), head
    page = tmp_path / "both" / "report.html"  # --out too: the text and the page from one reading
    assert cli.main(["tools.report", str(logs), "--no_bep", "--text", "--out", str(page)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4/4 GPU cells passed") and f"report: {page}" in out and page.is_file()


WALK_PROBES = 2  # the door's terminal probes in _walk_cell's cells: shards 0 and 1 run one each


def _walk_cell(root, shards, states=None, cell="state_walk_mrv1_eager", stopped=(), replayed=()):
    """A state_walk cell as Bazel leaves a sharded target: shard_<i>_of_<n>/, each with its coverage;
    states: per shard, the states its steps visited (none recorded where absent); stopped: the shards a
    failure stopped (their records say completed false, and they ran no probe); replayed: the shards that
    walked a replay. Each shard walked `visited` pairs of its own, of a door with 5 pairs per shard of the
    spec's, the first of which reaches the worker."""
    for shard, (visited, pairs, unvisited) in shards.items():
        extra = {"visited_states": states[shard], "model_states": 40} if states else {}
        if stopped:
            extra["completed"] = shard not in stopped
        extra.update(
            visited_pairs=[f"pair {shard}.{i}" for i in range(visited)],
            worker_visited_pairs=[f"pair {shard}.0"][:visited],
            door_pairs=5 * WALK_SHARDS,
            worker_pairs=WALK_SHARDS,
            door_probes=WALK_PROBES,
            terminal_probes=["probe"] if shard < WALK_PROBES and shard not in stopped else [],
            replay=shard in replayed,
        )
        d = root / MATRIX / cell / f"shard_{shard + 1}_of_{WALK_SHARDS}"
        write_xml(d / "test.xml", {f"test_walk_visits_every_pair_of_its_shard[{shard}]": "passed"})
        (d / "test.outputs").mkdir()
        (d / "test.outputs" / "measurements.jsonl").write_text(
            json.dumps(
                {
                    "key": "walk_coverage",
                    "value": visited,
                    "unit": "pairs",
                    "shard": shard,
                    "shard_pairs": pairs,
                    "steps": 10 * pairs,
                    "walks": 2,
                    "unvisited": unvisited,
                    "test": "t",
                    **extra,
                }
            )
            + "\n"
        )


def test_walk_coverage_sums_the_shards_and_flags_a_gap(tmp_path, capsys):
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)})
    run = view.load_run(str(tmp_path), str(tmp_path), [])
    [w] = run.walk_coverage()
    n = WALK_SHARDS
    assert (w.visited, w.pairs, w.shards, w.steps, w.complete) == (5 * n, 5 * n, n, 50 * n, True)
    page = Elements(render.page(run, str(tmp_path)))
    assert [a["data-walk"] for a in page.all("tr") if "data-walk" in a] == ["state_walk_mrv1_eager"]
    shutil.rmtree(tmp_path / MATRIX)
    _walk_cell(tmp_path, {0: (4, 5, ["wake:kv_cache"]), 1: (5, 5, [])})  # a gap, and the other shards missing
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert (w.visited, w.pairs, w.shards, w.complete, w.unvisited) == (9, 10, 2, False, ["wake:kv_cache"])
    assert (
        cli.main(["tools.report", str(tmp_path), "--no_bep", "--text"]) == walk_gate.PARTIAL_EXIT
    )  # 2 of 21 shards: partial, never 0
    assert (
        f"state walk HTTP · MRV1-eager: 9/10 situation pairs visited, 2/{WALK_SHARDS} shards, 4 walks, "
        "100 steps; unvisited: wake:kv_cache"
    ) in capsys.readouterr().out


def test_a_shard_a_failure_stopped_counts_its_steps_pairs_but_not_as_a_shard(tmp_path, capsys):
    _walk_cell(tmp_path, {0: (3, 5, ["sleep:1", "wake:-"]), 1: (5, 5, [])}, stopped=(0,))
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert (w.visited, w.pairs, w.shards, w.stopped, w.complete) == (8, 10, 1, 1, False)
    assert cli.main(["tools.report", str(tmp_path), "--no_bep", "--text"]) == walk_gate.PARTIAL_EXIT
    assert f"8/10 situation pairs visited, 1/{WALK_SHARDS} shards (1 stopped by a failure)" in (capsys.readouterr().out)
    assert f"<td>1/{WALK_SHARDS} (1 stopped)</td>" in render.page(
        view.load_run(str(tmp_path), str(tmp_path), []), str(tmp_path)
    )


def test_walk_states_are_the_union_of_the_shards_lists_never_a_sum_of_counts(tmp_path, capsys):
    # Two shards that both visit INITIAL: 3 distinct states, not 4.
    _walk_cell(tmp_path, {0: (5, 5, []), 1: (5, 5, [])}, states={0: ["awake", "level 1"], 1: ["awake", "level 2"]})
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert (w.states, w.model_states) == (3, 40)
    assert "<td>3 of 40</td>" in render.page(view.load_run(str(tmp_path), str(tmp_path), []), str(tmp_path))
    assert cli.main(["tools.report", str(tmp_path), "--no_bep", "--text"]) == walk_gate.PARTIAL_EXIT
    assert "100 steps, 3 states of 40 reachable" in capsys.readouterr().out
    shutil.rmtree(tmp_path / MATRIX)
    _walk_cell(tmp_path, {0: (5, 5, [])})  # a shard that recorded no list: no count rather than a guess
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert w.states is None


def _text(tmp_path, capsys, *extra) -> tuple[int, str]:
    code = cli.main(["tools.report", str(tmp_path), "--no_bep", "--text", *extra])
    return code, capsys.readouterr().out


def test_a_cell_is_full_only_when_its_shards_together_walked_every_pair_and_ran_every_probe(tmp_path, capsys):
    """The per-cell gate: every shard of the spec reported, and the union of their walked pairs is the door's
    pairs: exit 0. One shard removed (as a --test_filter or a deselected shard leaves it), every other passed:
    the cell is partial, in the headline and the exit status, never a green full cell."""
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)})
    code, out = _text(tmp_path, capsys)
    door = 5 * WALK_SHARDS
    assert code == 0 and out.startswith("1/1 GPU cells passed"), out
    assert (
        f"the cell: {door}/{door} pairs of its door walked (with its door's cells), {WALK_SHARDS}/{WALK_SHARDS} "
        f"reaching the worker in this cell, {WALK_PROBES}/{WALK_PROBES} probes: full"
    ) in out
    shutil.rmtree(tmp_path / MATRIX / "state_walk_mrv1_eager" / f"shard_{WALK_SHARDS}_of_{WALK_SHARDS}")
    code, out = _text(tmp_path, capsys)
    assert code == walk_gate.PARTIAL_EXIT, out
    assert out.startswith("PARTIAL: 1/1 GPU cells passed; state walk partial in state_walk_mrv1_eager"), out
    assert f"1 of {WALK_SHARDS} shards recorded no coverage" in out and f"{door - 5} of the door's {door} pairs" in out
    page = render.page(view.load_run(str(tmp_path), str(tmp_path), []), str(tmp_path))
    assert 'data-gate="partial"' in page and ">PARTIAL: 1/1 GPU cells passed" in page


def test_a_shard_that_failed_before_its_probe_leaves_the_cell_partial(tmp_path, capsys):
    # Shard 1 walked its share, then failed before its terminal probe: every pair, one probe short.
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)}, stopped=(1,))
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert w.gate.pairs_walked == w.gate.door_pairs and not w.complete
    assert f"1 of the door's {WALK_PROBES} terminal probes ran" in w.gate.reasons
    assert _text(tmp_path, capsys)[0] == walk_gate.PARTIAL_EXIT


def test_a_replayed_shard_leaves_the_cell_partial(tmp_path, capsys):
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)}, replayed=(3,))
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert not w.complete and "1 shard(s) walked SLEEPWAKE_WALK_REPLAY instead of their share" in w.gate.reasons
    assert _text(tmp_path, capsys)[0] == walk_gate.PARTIAL_EXIT


def test_the_gate_judges_the_walk_cells_alone_and_writes_no_page(tmp_path, capsys):
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)})
    assert cli.main(["tools.report", str(tmp_path), "--no_bep", "--gate"]) == 0
    assert "walk gate: state_walk_mrv1_eager: " in capsys.readouterr().out
    assert not (tmp_path.parent / cli.DEFAULT_OUT).exists()
    shutil.rmtree(tmp_path / MATRIX / "state_walk_mrv1_eager" / f"shard_1_of_{WALK_SHARDS}")
    assert cli.main(["tools.report", str(tmp_path), "--no_bep", "--gate"]) == walk_gate.PARTIAL_EXIT
    assert "walk gate: PARTIAL: 1 of 1 state walk cell(s)" in capsys.readouterr().err
    # Testlogs without a walk cell's results: nothing to judge (tools/test.sh of a few targets).
    assert cli.main(["tools.report", str(tmp_path / "none"), "--no_bep", "--gate"]) == 0


def test_a_fake_tier_walk_cell_is_gated_too(tmp_path, capsys):
    """tools/test.sh runs the fake tier's walk cells, one process for every shard: its gate judges them."""
    d = tmp_path / MATRIX / "state_walk_fake_mrv1_eager"
    write_xml(d / "test.xml", {"TestStateWalkShard0.test_walk_visits_every_pair_of_its_shard": "passed"})
    (d / "test.outputs").mkdir()
    row = {
        "key": "walk_coverage",
        "value": 5,
        "shard": 0,
        "visited_pairs": ["a"],
        "worker_visited_pairs": ["a"],
        "door_pairs": 1,
        "worker_pairs": 1,
        "door_probes": 0,
    }
    (d / "test.outputs" / "measurements.jsonl").write_text(json.dumps(row) + "\n")
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert w.label == "state_walk_fake_mrv1_eager" and not w.complete  # one shard of the spec's
    assert cli.main(["tools.report", str(tmp_path), "--no_bep", "--gate"]) == walk_gate.PARTIAL_EXIT


def test_a_doors_cells_are_judged_together_on_the_pairs_above_the_worker(tmp_path, capsys):
    """Two HTTP cells that each walk half the door's pairs above the worker (tests/core/walk/plan.py deal) and
    every pair that reaches it: each full with the other, partial alone."""
    half: dict[int, tuple[int, int, list[str]]] = {s: (3, 3, []) for s in range(WALK_SHARDS)}
    _walk_cell(tmp_path, half)
    [w] = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert not w.complete and w.gate.reasons == (
        f"{3 * WALK_SHARDS} of the door's {5 * WALK_SHARDS} pairs walked by its door's cells together",
    )
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)}, cell="state_walk_mrv2_eager")
    walks = view.load_run(str(tmp_path), str(tmp_path), []).walk_coverage()
    assert [w.complete for w in walks] == [True, True]
    assert walks[0].gate_text().startswith(f"{5 * WALK_SHARDS}/{5 * WALK_SHARDS} pairs of its door walked")
    assert _text(tmp_path, capsys)[0] == 0


def test_walk_coverage_is_per_cell_through_each_door(tmp_path):
    door = "state_walk_llm_mrv2_graph"
    _walk_cell(tmp_path, {s: (5, 5, []) for s in range(WALK_SHARDS)})
    _walk_cell(tmp_path, {0: (4, 5, ["wake:kv_cache"])}, cell=door)
    run = view.load_run(str(tmp_path), str(tmp_path), [])
    walks = {w.cell.name: w for w in run.walk_coverage()}
    assert list(walks) == ["state_walk_mrv1_eager", door]
    assert walks["state_walk_mrv1_eager"].complete
    assert (walks[door].visited, walks[door].pairs, walks[door].shards, walks[door].complete) == (4, 5, 1, False)
    page = render.page(run, str(tmp_path))
    assert [a["data-walk"] for a in Elements(page).all("tr") if "data-walk" in a] == list(walks)
    assert "<td>llm · MRV2-graph</td>" in page
    lines = [line for line in text.summary(run).splitlines() if line.startswith("state walk")]
    assert [line.split(":")[0] for line in lines] == [
        "state walk HTTP · MRV1-eager",
        "state walk llm · MRV2-graph",
    ]
    assert shard_count("state_walk", "graph", "llm") != WALK_SHARDS  # else this tells no count from another
    assert lines[1].startswith(
        # the door's cell expects its door's shards, not the HTTP cell's (tools/matrix.bzl SHARD_COUNTS)
        f"state walk llm · MRV2-graph: 4/5 situation pairs visited, 1/{shard_count('state_walk', 'graph', 'llm')} "
    )


RECORD = {
    "machine": {"gpus": 1, "cores": 4, "cpu": "AMD EPYC 9654 96-Core Processor"},
    "matrix": {
        "elapsed_s": 150.0,
        "walk_cpu_per_step": {"units": 2, "steps": 40, "servers_ms": 127.1, "tests_ms": 36.1, "children_ms": 29.9},
    },
    "replay": {
        "fields": ["unit", "wave", "gpu", "seconds", "memory_wait_s", "began_s", "start_s", "stop_s", "slot_wait_s"],
        "units": [
            ["state_walk_mrv1_eager/shard_1_of_2", "walk", 1, 80.0, 20.0, 0.0, 10.0, 2.0, 0.0],
            ["state_walk_mrv1_eager/shard_2_of_2", "walk", 1, 60.0, 10.0, 0.0, 10.0, 0.0, 0.0],
            ["flags_mrv1_eager", "rest", 1, 40.0, 5.0, 0.0, 8.0, 1.0, 6.0],
            ["flags_fake_mrv1_eager", "cpu", 0, 30.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ],
        "waves": [
            {"name": "walk", "seconds": 100.0, "lead_s": 0.0, "at_once": 2},
            {"name": "rest", "seconds": 50.0, "lead_s": 0.0, "at_once": 4},
            {"name": "cpu", "seconds": 90.0, "lead_s": 0.0, "at_once": None},
        ],
        "slots_per_gpu": 4,
        "host_cpu_s": 300.0,
    },
    "predicted": [
        {"gpus": 1, "cores": 16, "seconds": 150.0, "bound": "walk: x; rest: y", "floors": {"CPU": 75.0}},
        {
            "gpus": 8,
            "cores": 128,
            "seconds": 61.0,
            "bound": "walk: the GPU unit state_walk_mrv1_eager/shard_1_of_2 (80 s from +0 s)",
            "floors": {"CPU": 2.3, "longest units": 50.0},
        },
    ],
}


def test_where_the_runs_time_went_is_drawn_from_its_record(tmp_path, capsys):
    """Per wave its slot time (the units at once times its seconds) split into own work, starts, memory-phase
    waits, stops and idle slots, as the record's units add up; the host's busy cores; the replay on 8 GPUs."""
    logs, bep = _bazel_layout(tmp_path)
    record = tmp_path / "sleepwake-run.json"
    record.write_text(json.dumps(RECORD))
    page = _render(tmp_path, "--bep", bep, "--record", record, logs=logs)
    section = _found(r'<section id="time-spent">(.*?)</section>', page)
    parts = {
        (a["data-wave"], a["data-part"]): (float(a["data-seconds"]), float(a["height"]))
        for t, a, _ in Elements(section).found
        if t == "rect" and "data-wave" in a
    }
    # walk: 2 x 100 = 200 slot-seconds; held 140: starts 20, waits 30, stops 2, own 88; idle 60.
    walk = {part: seconds for (wave, part), (seconds, _) in parts.items() if wave == "walk"}
    assert walk == {"own": 88.0, "starts": 20.0, "waits": 30.0, "stops": 2.0, "idle": 60.0}
    # The column is 110 px high: each part's height is its share of the wave's slot time.
    assert parts[("walk", "own")][1] == pytest.approx(110 * 88 / 200, abs=0.1)
    rest = {part: seconds for (wave, part), (seconds, _) in parts.items() if wave == "rest"}
    assert rest == {"own": 26.0, "starts": 8.0, "waits": 5.0, "stops": 1.0, "idle": 160.0}
    cores = {a["data-part"]: float(a["data-seconds"]) for t, a, _ in Elements(section).found if "data-part" in a}
    assert (cores["busy-cores"], cores["idle-cores"], cores["cpu-only"]) == (300.0, 300.0, 90.0)
    assert cli.main(["tools.report", str(logs), "--bep", str(bep), "--record", str(record), "--text"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        "time spent, wave walk: 100 s x 2 units at once = 200 slot-seconds: own work 44%, server starts 10%,"
        " memory-phase waits 15%, stops 1%, idle slots 30%; its units also waited 0 s for a slot"
    ) in out
    assert (
        "time spent, host CPU: 300 of 600 core-seconds busy (50%), idle cores 50%; AMD EPYC 9654 96-Core Processor"
    ) in out
    assert (
        "time spent, the walk's CPU per step: servers 127.1 ms, test processes 36.1 ms, their trainers 29.9 ms"
        " (40 steps; runs on two hosts compare by this)"
    ) in out
    assert (
        "replay (tools/bench/replay.py, the CPU-only targets beside): on 8 GPUs, 128 cores this run would take 61 s;"
        " bound: walk: the GPU unit state_walk_mrv1_eager/shard_1_of_2 (80 s from +0 s); floors: CPU 2 s,"
        " longest units 50 s"
    ) in out
    # A record without units (an older run's) draws nothing; an unreadable one is a one-line error.
    record.write_text(json.dumps({"machine": {}, "matrix": {}}))
    assert 'id="time-spent"' not in _render(tmp_path, "--bep", bep, "--record", record, logs=logs)
    assert cli.main(["tools.report", str(logs), "--record", str(tmp_path / "none.json"), "--text"]) == 1
    assert "no readable run record" in capsys.readouterr().err


HISTORY = pathlib.Path(__file__).parent / "testdata" / "runs.jsonl"  # four runs: fresh, warm, a red warm, fresh


def test_the_history_chart_draws_every_run_fresh_and_warm_apart_and_rings_a_red_one(tmp_path):
    """The run history's chart: a dot per run in the file's order (x) at its elapsed time (y, from zero),
    a line through the fresh machines' runs and one through the warm ones', a red run ringed red."""
    logs, bep = _bazel_layout(tmp_path)
    page = _render(tmp_path, "--bep", bep, "--history", HISTORY, logs=logs)
    section = _found(r'<section id="history">(.*?)</section>', page)
    assert "4 runs in" in section and '<span class="bad">1 red</span>' in section
    assert "The latest main job, at 3333333, on 1 × NVIDIA H200 with 16 cores (AMD EPYC" in html.unescape(section)
    charts = re.findall(r'<svg [^>]*class="chart history".*?</svg>', section, re.S)
    assert len(charts) == 1
    dots = Elements(charts[0]).all("circle")
    runs = [d for d in dots if "data-commit" in d]
    assert [(d["data-commit"], d["data-state"], d["data-status"], float(d["data-elapsed"])) for d in runs] == [
        ("1111111", "fresh", "green", 523.4),
        ("1111111", "warm", "green", 418.7),
        ("2222222", "warm", "red", 359.1),
        ("3333333", "fresh", "green", 579.6),
    ]
    xs, ys = [float(d["cx"]) for d in runs], [float(d["cy"]) for d in runs]
    assert xs == sorted(xs) and len(set(xs)) == 4  # the file's order, one place each
    assert ys[3] < ys[0] < ys[1] < ys[2]  # longer is higher
    assert runs[2]["class"] == "run red" and runs[2]["stroke"] == svg.BAD_COLOUR
    # A run names its host's CPU where its line recorded one: hosts of one GPU differ (docs/design.md).
    titles = re.findall(r"<title>([^<]*)</title>", charts[0])
    assert [("AMD EPYC" in t) for t in titles if "cells," in t] == [False, False, False, True]
    assert all("stroke" not in d for d in runs if d["data-status"] == "green")
    lines = {p["data-series"]: p["points"].split() for p in Elements(charts[0]).all("polyline")}
    assert sorted(lines) == ["fresh", "warm"]
    assert [float(xy.split(",")[0]) for xy in lines["fresh"]] == [xs[0], xs[3]]
    assert [float(xy.split(",")[0]) for xy in lines["warm"]] == [xs[1], xs[2]]
    assert [t for t in re.findall(r">([0-9a-f]{7})</text>", charts[0])] == [
        "1111111",
        "1111111",
        "2222222",
        "3333333",
    ]


def test_a_bad_or_missing_history_is_told_on_the_page_not_a_failed_report(tmp_path):
    logs, bep = _bazel_layout(tmp_path)
    bad = tmp_path / "runs.jsonl"
    bad.write_text(HISTORY.read_text().splitlines()[0] + "\n" + '{"commit": "4444444"}\n')
    page = _render(tmp_path, "--bep", bep, "--history", bad, logs=logs)
    section = _found(r'<section id="history">(.*?)</section>', page)
    assert "runs.jsonl:2: missing key" in html.unescape(section) and "<svg" not in section
    page = _render(tmp_path, "--bep", bep, "--history", tmp_path / "none.jsonl", logs=logs)
    assert "no run history at" in page
    assert 'id="history"' not in _render(tmp_path, "--bep", bep, "--no_history", logs=logs)


def test_text_mode_lists_the_last_runs_of_the_history(tmp_path, capsys):
    logs, bep = _bazel_layout(tmp_path)
    assert cli.main(["tools.report", str(logs), "--bep", str(bep), "--text", "--history", str(HISTORY)]) == 0
    out = capsys.readouterr().out
    assert f"run history: 4 main-job runs in {HISTORY}, 1 red; the last 5:" in out
    assert "  2222222 2026-12-05 warm    359.1 s  red  93 cells, 160 starts" in out
    assert "The latest main job, at 3333333, on 1 × NVIDIA H200" in out


def test_samples_left_out_for_a_host_stall_are_counted(tmp_path, capsys):
    """A timed sample taken across a stall of the host is left out, not judged (tests/core/stalls.py): the
    report says how many, so a green run that judged few says so."""
    d = tmp_path / MATRIX / "abort_parallel_sampling_mrv1_eager"
    write_xml(d / "test.xml", {"test_abort": "passed"})
    (d / "test.outputs").mkdir()
    row = {"key": testlogs.STALLED_KEY, "value": 12.0, "unit": "s", "oracle": "requests.abort_time", "gap": 3.0}
    (d / "test.outputs" / "measurements.jsonl").write_text((json.dumps(row) + "\n") * 2)
    assert cli.main(["tools.report", str(tmp_path), "--no_bep", "--text"]) == 0
    assert "note: 2 timed sample(s) left out, not judged, for a stall of the host: requests.abort_time 2" in (
        capsys.readouterr().out
    )


_CATALOGUE = """
import types
MUTANTS = {
    name: types.SimpleNamespace(name=name, issue="#1", bound=(), size="all", kills={"weight_sync": ("o",)})
    for name in ("first", "second")
}
"""


def _mutation_of(tmp_path, verdicts: dict):
    """view._mutation over mutant targets that wrote rows with these verdicts, against a two-mutant catalogue."""
    package = tmp_path / "ws" / mutation_table.DEFAULT_CATALOGUE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "catalogue.py").write_text(_CATALOGUE)
    for mutant, verdict in verdicts.items():
        target = tmp_path / "logs" / "tests" / "mutants" / f"mutant_{mutant}" / "test.outputs"
        target.mkdir(parents=True)
        row = {"mutant": mutant, "passed": verdict == "killed", "classes": {"weight_sync": {"verdict": verdict}}}
        (target / mutation_table.ROW_FILE).write_text(json.dumps(row))
    return view._mutation(str(tmp_path / "logs"), str(tmp_path / "ws"))


def test_a_selection_of_the_mutants_that_all_die_is_partial_never_green_nor_failed(tmp_path):
    m = _mutation_of(tmp_path, {"first": "killed"})
    assert not m.ok and m.partial == "1 of 2" and m.verdict().startswith("PARTIAL: 1 of 2 mutants ran")


def test_every_mutant_killed_is_green_and_a_survivor_in_a_selection_is_not_partial(tmp_path):
    assert _mutation_of(tmp_path / "all", {"first": "killed", "second": "killed"}).verdict().startswith("every mutant")
    m = _mutation_of(tmp_path / "survivor", {"first": "survived"})
    assert not m.ok and not m.partial and m.verdict().startswith("NOT GREEN")
