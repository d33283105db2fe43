"""tools/results/mutation_table.py on sample rows, as mutant_test.py writes them (plain and zipped)."""

import json
import os
import zipfile

from tools.results import mutation_table


def _row(mutant, verdicts, passed=None, problems=()):
    passed = (
        all(v == ("passed" if mutant == "none" else "killed") for v in verdicts.values()) if passed is None else passed
    )
    return {
        "mutant": mutant,
        "issue": "#1" if mutant != "none" else "",
        "cell": "MRV2-eager",
        "passed": passed and not problems,
        "activated": mutant != "none",
        "problems": list(problems),
        "bound": ["wake_s_max"] if mutant == "b" else [],
        "size": "2x" if mutant == "b" else "",
        "classes": {
            c: {
                "verdict": v,
                "failed_tests": [],
                "messages": [],
                "oracles": [["latency.wake"]] if v in ("killed", "other oracle") else [],
                "expected": ["latency.wake"] if v != "other oracle" else ["latency.sleep"],
                "fired": ["latency.wake"] if v == "killed" else [],
            }
            for c, v in verdicts.items()
        },
    }


def _write(root, target, row, zipped=False):
    outputs = root / target / "test.outputs"
    outputs.mkdir(parents=True)
    if zipped:
        with zipfile.ZipFile(outputs / "outputs.zip", "w") as z:
            z.writestr("mutation_row.json", json.dumps(row))
            z.writestr("inner/junit.xml", "<testsuites/>")
    else:
        (outputs / "mutation_row.json").write_text(json.dumps(row))


def test_all_killed(tmp_path, capsys):
    _write(tmp_path, "mutant_a", _row("a", {"flags": "killed"}))
    _write(tmp_path, "mutant_b", _row("b", {"latency": "killed", "flags": "killed"}), zipped=True)
    _write(tmp_path, "mutant_control_flags", _row("none", {"flags": "passed", "latency": "passed"}))
    (tmp_path / "mutant_c").mkdir()  # a target that wrote no row (e.g. not run) is skipped
    out = tmp_path / "table.md"
    assert mutation_table.main(["x", str(tmp_path), "--out", str(out), "--catalogue", ""]) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text
    lines = text.splitlines()
    assert lines[0] == "| mutant | issue | bound | size | cell | flags | latency | verdict |"
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    assert lines[2] == "| a | #1 | exact oracle |  | MRV2-eager | killed (latency.wake) |  | killed |"
    assert lines[3] == (
        "| b | #1 | wake_s_max | 2x | MRV2-eager | killed (latency.wake) | killed (latency.wake) | killed |"
    )
    assert lines[4] == "| (control) |  |  |  | MRV2-eager | pass | pass | control passed |"
    assert "- flags: 2 (a, b)" in lines and "- latency: 1 (b)" in lines
    assert "every mutant killed: yes (2/2)" in text
    assert "every class killed at least one mutant: yes" in text


def test_survivor_and_idle_class_fail(tmp_path, capsys):
    _write(tmp_path, "mutant_a", _row("a", {"flags": "survived"}))
    _write(tmp_path, "mutant_b", _row("b", {"latency": "other oracle"}))
    _write(tmp_path, "mutant_c", _row("c", {"latency": "errored"}))
    _write(tmp_path, "mutant_control_flags", _row("none", {"flags": "passed", "latency": "passed"}))
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", ""]) == 1
    text = capsys.readouterr().out
    assert "| a | #1 | exact oracle |  | MRV2-eager | survived |  | NOT KILLED |" in text
    assert "| b | #1 | wake_s_max | 2x | MRV2-eager |  | other oracle (latency.wake) | NOT KILLED |" in text
    assert "| c | #1 | exact oracle |  | MRV2-eager |  | errored | NOT KILLED |" in text
    # The outcomes per class, counted over the mutants.
    assert "| class | killed | other oracle | errored | survived |" in text
    assert "| latency | 0 | 1 | 1 | 0 |" in text and "| flags | 0 | 0 | 0 | 1 |" in text
    assert "every mutant killed: no (0/3; not killed: a, b, c)" in text
    assert "none killed by: flags, latency" in text


def test_missing_activation_is_not_a_kill(tmp_path, capsys):
    _write(tmp_path, "mutant_a", _row("a", {"flags": "killed"}, problems=["never applied"]))
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", ""]) == 1
    assert "NOT KILLED (never applied)" in capsys.readouterr().out


def test_a_failed_control_fails_the_table(tmp_path, capsys):
    _write(tmp_path, "mutant_a", _row("a", {"flags": "killed"}))
    _write(tmp_path, "mutant_control_flags", _row("none", {"flags": "other-failure"}))
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", ""]) == 1
    assert "control: FAILED" in capsys.readouterr().out


def test_no_rows_explains(tmp_path, capsys):
    assert mutation_table.main(["x", str(tmp_path / "absent"), "--catalogue", ""]) == 1
    assert "run the mutants first" in capsys.readouterr().out


CATALOGUE = """
import collections

M = collections.namedtuple("M", "name issue kills bound size")
MUTANTS = {
    "a": M("a", "#1", {"flags": ("latency.wake",)}, (), ""),
    "b": M("b", "#2", {"flags": ("flags.gauge",), "latency": ("latency.wake",)}, ("wake_s_max",), "2x"),
}
"""


def test_a_catalogued_mutant_without_a_row_is_not_killed(tmp_path, capsys):
    package = tmp_path / "plugin" / "sleepwake_mutants"
    package.mkdir(parents=True)
    (package / "catalogue.py").write_text(CATALOGUE)
    _write(tmp_path / "logs", "mutant_a", _row("a", {"flags": "killed"}))
    assert mutation_table.main(["x", str(tmp_path / "logs"), "--catalogue", str(package)]) == 1
    text = capsys.readouterr().out
    assert "every mutant killed: no (1/2; no result (no mutation_row.json): b)" in text
    # Its row shows it, and each class it lists counts it as no result: neither errored nor not applied.
    assert (
        "| b | #2 | wake_s_max | 2x |  | no result | no result | NOT KILLED "
        f"({mutation_table.NO_ROW}) |" in text.splitlines()
    )
    assert "| class | killed | other oracle | errored | survived | not applied | no result |" in text
    assert "| flags | 1 | 0 | 0 | 0 | 0 | 1 |" in text and "| latency | 0 | 0 | 0 | 0 | 0 | 1 |" in text


def test_the_fakes_rows_are_tabulated_apart(tmp_path, capsys):
    _write(tmp_path, "mutant_a", _row("a", {"flags": "survived"}, passed=False))
    _write(tmp_path, "fake_mutant_a", _row("a", {"flags": "killed"}))
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", "", "--fake"]) == 0
    assert "| a | #1 | exact oracle |  | MRV2-eager | killed (latency.wake) | killed |" in capsys.readouterr().out
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", ""]) == 1
    assert "| a | #1 | exact oracle |  | MRV2-eager | survived | NOT KILLED |" in capsys.readouterr().out


def test_reads_the_real_catalogue_from_its_init_alone():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    names = mutation_table.catalogue_names(os.path.join(root, mutation_table.DEFAULT_CATALOGUE))
    assert len(names) >= 20 and "resume_on_partial_wake" in names and "late_release" in names
    # A real entry gives a missing row what the table shows of it.
    entry = mutation_table.catalogue(os.path.join(root, mutation_table.DEFAULT_CATALOGUE))["resume_on_partial_wake"]
    row = mutation_table.no_result_row(entry)
    assert row["classes"] == {"scheduler_gate": {"verdict": "no result"}} and row["issue"] == entry.issue


def _liveness_kill(mutant, cls, ids, slots="4"):
    """A row whose class is killed by liveness oracles alone (verdict.py's needs_control)."""
    row = _row(mutant, {cls: "killed"})
    row["classes"][cls].update(oracles=[[]], liveness=[list(ids)], fired=list(ids), needs_control=list(ids))
    row["concurrency"] = {"slots_per_gpu": slots}
    return row


def _control(cls, slots="4", liveness=()):
    row = _row("none", {cls: "passed" if not liveness else "errored"})
    row["classes"][cls].update(liveness=[list(liveness)] if liveness else [])
    row["concurrency"] = {"slots_per_gpu": slots}
    return row


def test_a_liveness_kill_stands_against_a_clean_control_under_the_same_concurrency(tmp_path, capsys):
    _write(tmp_path, "mutant_a", _liveness_kill("a", "concurrent_race", ["api.answers"]))
    _write(tmp_path, "mutant_control_concurrent_race", _control("concurrent_race"))
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", ""]) == 0
    assert "| a | #1 | exact oracle |  | MRV2-eager | killed (api.answers) | killed |" in capsys.readouterr().out


def test_a_liveness_kill_without_a_clean_control_alike_is_errored(tmp_path, capsys):
    """A hang the control shows too (an overloaded host), a control run under other concurrency, or none:
    the defect's kill says nothing."""
    other = "({'slots_per_gpu': '1'} against {'slots_per_gpu': '4'})"
    cases = [
        (
            _control("concurrent_race", liveness=["api.answers"]),
            "api.answers: the control of concurrent_race fired it too",
        ),
        (
            _control("concurrent_race", slots="1"),
            f"api.answers alone, and the control of concurrent_race ran under other concurrency {other}",
        ),
        (None, "api.answers alone, and no control of concurrent_race ran"),
    ]
    for i, (control, why) in enumerate(cases):
        root = tmp_path / str(i)
        _write(root, "mutant_a", _liveness_kill("a", "concurrent_race", ["api.answers"]))
        if control is not None:
            _write(root, "mutant_control_concurrent_race", control)
        assert mutation_table.main(["x", str(root), "--catalogue", ""]) == 1
        text = capsys.readouterr().out
        assert f"| a | #1 | exact oracle |  | MRV2-eager | errored ({why}) | NOT KILLED |" in text, text
        assert "| concurrent_race | 0 | 0 | 1 | 0 | 0 | 0 |" in text


def test_a_class_cut_short_says_so(tmp_path, capsys):
    row = _row("a", {"flags": "errored"})
    row["classes"]["flags"]["interrupted"] = True  # verdict.cut_short: the inner run timed out
    _write(tmp_path, "mutant_a", row)
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", ""]) == 1
    text = capsys.readouterr().out
    assert "| a | #1 | exact oracle |  | MRV2-eager | errored (interrupted before the class finished) |" in text


def test_not_applied_is_counted_and_not_killed(tmp_path, capsys):
    _write(tmp_path, "mutant_a", _row("a", {"flags": "not applied"}, problems=["never reached"]))
    assert mutation_table.main(["x", str(tmp_path), "--catalogue", ""]) == 1
    text = capsys.readouterr().out
    assert "| a | #1 | exact oracle |  | MRV2-eager | not applied | NOT KILLED (never reached) |" in text
    assert "| class | killed | other oracle | errored | survived | not applied | no result |" in text
    assert "| flags | 0 | 0 | 0 | 0 | 1 | 0 |" in text
