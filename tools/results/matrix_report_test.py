"""tools/results/matrix_report.py on fake testlogs: which cells count, which are flagged."""

import json

from tools.results import matrix_report
from tools.results.testlogs_testing import write_bep, write_xml


def _cell(root, name, outcomes, measurements=()):
    xml = write_xml(root / name / "test.xml", outcomes, "--test_filter 'x' matched no test in this target.")
    outputs = root / name / "test.outputs"
    outputs.mkdir(exist_ok=True)
    (outputs / "measurements.jsonl").write_text("".join(json.dumps(m) + "\n" for m in measurements))
    return xml


def test_cells_of_the_invocation_count_and_bad_ones_are_flagged(tmp_path, capsys):
    root = tmp_path / "tests" / "sleep_wake"
    ours = [
        _cell(root, "flags_mrv1_eager", {"test_a": "passed", "test_b": "passed"},
              [{"key": "server_start_s", "value": 20.0}]),
        _cell(root, "latency_mrv1_eager", {"test_c": "failed"}),
        _cell(root, "gate_mrv1_eager", {}),  # an empty report
        _cell(root, "race_mrv1_eager", {"no test selected": "skipped"}),  # a filter matched nothing
        _cell(root, "sharded_mrv2_graph/shard_1_of_2", {"test_d": "passed"}),
        _cell(root, "sharded_mrv2_graph/shard_2_of_2", {"test_e": "passed"}),
    ]
    # Left by an earlier invocation: passing, but not a result of this one.
    _cell(root, "flags_mrv2_graph", {"test_a": "passed"}, [{"key": "server_start_s", "value": 99.0}])
    (root / "unit").mkdir()  # not a cell
    write_bep(tmp_path / "bep.json", [(f"//x:{i}", xml, "PASSED") for i, xml in enumerate(ours)])
    assert matrix_report.main(["matrix_report", str(root), "--bep", str(tmp_path / "bep.json")]) == 1
    out = capsys.readouterr().out
    assert "cells: 6 (3 passed, 1 failed, 2 ran no test case); instances: {'passed': 4, 'failed': 1," \
           " 'skipped': 1}" in out
    assert "  failed: latency_mrv1_eager" in out
    assert "  no test case ran: gate_mrv1_eager" in out and "  no test case ran: race_mrv1_eager" in out
    assert "stale, not counted: 1 cell(s)" in out and "  stale: flags_mrv2_graph" in out
    assert "server starts: 1; median 20.0 s" in out  # the stale cell's measurements are left out


def test_a_clean_run_passes_and_without_build_events_every_cell_counts(tmp_path, capsys):
    root = tmp_path / "sleep_wake"
    xml = _cell(root, "flags_mrv1_eager", {"test_a": "passed"})
    _cell(root, "flags_mrv2_eager", {"test_a": "passed"})
    write_bep(tmp_path / "bep.json", [("//x", xml, "PASSED")])
    assert matrix_report.main(["matrix_report", str(root), "--bep", str(tmp_path / "bep.json")]) == 0
    assert "cells: 1 (1 passed, 0 failed, 0 ran no test case)" in capsys.readouterr().out
    assert matrix_report.main(["matrix_report", str(root), "--no_bep"]) == 0
    out = capsys.readouterr().out
    assert "cells: 2 (2 passed" in out and "stale ones cannot be told apart" in out


def test_no_counted_cell_fails(tmp_path, capsys):
    root = tmp_path / "sleep_wake"
    _cell(root, "flags_mrv1_eager", {"test_a": "passed"})
    write_bep(tmp_path / "bep.json", [("//tools:x", write_xml(tmp_path / "x.xml", {"t": "passed"}), "PASSED")])
    assert matrix_report.main(["matrix_report", str(root), "--bep", str(tmp_path / "bep.json")]) == 1
    assert "cells: 0" in capsys.readouterr().out
