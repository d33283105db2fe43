"""The run history (tools/bench/history.py): the committed file is good, a bad line is refused with its
number, a line is made from a run record, appended, and summed up for the README."""

import json
import os
from typing import Any

import pytest

from tools.bench import history

MACHINE: dict[str, Any] = {"gpu": "NVIDIA H200", "gpus": 1, "cores": 16, "cpu": "AMD EPYC 9654 96-Core Processor"}
GOOD = {
    "commit": "84c86bc",
    "date": "2026-12-05",
    "vllm": "0.26.0",
    "machine": MACHINE,
    "machine_state": "fresh",
    "elapsed_s": 579.6,
    "waves_s": [366.3, 213.3],
    "server_starts": 172,
    "wait_share": 0.487,
    "cells": 93,
    "cases": 1022,
    "status": "green",
}


def _text(*entries) -> str:
    return "".join(json.dumps(e) + "\n" for e in entries)


def test_the_committed_history_is_good_and_in_order():
    entries = history.read()
    assert entries, "tools/bench/runs.jsonl holds no run"
    dates = [e["date"] for e in entries]
    assert dates == sorted(dates), "runs.jsonl's lines go in the order the runs ended"
    with open(history.HISTORY_FILE, encoding="utf-8") as f:
        assert f.read() == "".join(history.render(e) + "\n" for e in entries), "a line not as render() writes it"


def test_a_good_line_has_no_problem():
    assert history.problems(GOOD) == []
    assert history.parse(_text(GOOD, {**GOOD, "machine_state": "warm", "status": "red"}), "h") == [
        GOOD,
        {**GOOD, "machine_state": "warm", "status": "red"},
    ]


def test_a_malformed_line_is_refused_with_its_number():
    with pytest.raises(history.HistoryError, match=r"^h:2: not JSON"):
        history.parse(_text(GOOD) + '{"commit": "84c86bc",\n', "h")
    with pytest.raises(history.HistoryError, match=r"^h:2: an empty line"):
        history.parse(_text(GOOD) + "\n" + _text(GOOD), "h")
    with pytest.raises(history.HistoryError, match=r"^h:1: a line is a JSON object, not list"):
        history.parse("[1, 2]\n", "h")


@pytest.mark.parametrize("key", history.KEYS)
def test_a_line_missing_a_key_is_refused(key):
    line = {k: v for k, v in GOOD.items() if k != key}
    with pytest.raises(history.HistoryError, match=rf"^h:2: missing key '{key}'$"):
        history.parse(_text(GOOD, line), "h")


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"extra": 1}, "unknown key 'extra'"),
        ({"commit": "HEAD"}, "commit 'HEAD': 7 to 40 lower-case hex digits"),
        ({"date": "2026-13-01"}, "date '2026-13-01': YYYY-MM-DD"),
        ({"vllm": "latest"}, "vllm 'latest': a release"),
        ({"machine": {"gpu": "NVIDIA H200", "gpus": 1}}, "machine {'gpu': 'NVIDIA H200', 'gpus': 1}: an object of"),
        ({"machine": {**MACHINE, "gpu": "", "gpus": 0}}, "machine.gpu '': the GPU's name; machine.gpus 0"),
        ({"machine": {**MACHINE, "cpu": " "}}, "machine.cpu ' ': the CPU's model, or null"),
        ({"machine_state": "cold"}, "machine_state 'cold': one of fresh, warm"),
        ({"status": "passed"}, "status 'passed': one of green, partial, red"),
        ({"elapsed_s": 600.0}, "elapsed_s 600.0 is not the sum of waves_s [366.3, 213.3]"),
        ({"waves_s": []}, "waves_s []: each wave's seconds"),
        ({"elapsed_s": -1.0, "waves_s": [-1.0]}, "elapsed_s -1.0: Bazel's seconds, not negative"),
        ({"server_starts": 1.5}, "server_starts 1.5: a whole number, or null"),
        ({"wait_share": 48.7}, "wait_share 48.7: a share from 0 to 1"),
        ({"cells": 0}, "cells 0: the GPU cells that ran"),
        ({"cases": True}, "cases True: a whole number"),
    ],
)
def test_a_wrong_value_is_refused(change, problem):
    assert problem in "; ".join(history.problems({**GOOD, **change}))


def test_a_figure_not_measured_is_null():
    not_recorded = {**MACHINE, "cpu": None}
    assert history.problems({**GOOD, "server_starts": None, "wait_share": None, "cases": None}) == []
    assert history.problems({**GOOD, "machine": not_recorded}) == []


IDENTITY = {
    "vllm": "0.26.0 record-sha256=6f3d",
    "gpus": "0, NVIDIA H200, 580.159.04, 143771 MiB; 1, NVIDIA H200, 580.159.04, 143771 MiB",
}
RECORD: dict[str, Any] = {
    "machine": {"gpus": 2, "cores": 32, "cpu": "Intel(R) Xeon(R) Platinum 8480+", "identity": IDENTITY},
    "matrix": {
        "status": "red",
        "rc": 3,
        "elapsed_s": 420.5,
        "waves_s": [300.2, 120.3],
        "server_starts": 150,
        "cells_by_door": {"http": {"cells": 64}, "async_llm": {"cells": 16}, "llm": {"cells": 13}},
        "cases": {"passed": 1000, "failed": 2, "skipped": 5},
        "machine_state": "warm",
        "wait_share": 0.36,
    },
}


def test_a_line_from_a_run_record():
    assert history.from_record(RECORD, commit="0123abc", date="2026-12-06") == {
        "commit": "0123abc",
        "date": "2026-12-06",
        "vllm": "0.26.0",
        "machine": {"gpu": "NVIDIA H200", "gpus": 2, "cores": 32, "cpu": "Intel(R) Xeon(R) Platinum 8480+"},
        "machine_state": "warm",
        "elapsed_s": 420.5,
        "waves_s": [300.2, 120.3],
        "server_starts": 150,
        "wait_share": 0.36,
        "cells": 93,
        "cases": 1002,
        "status": "red",
    }


def test_an_older_record_needs_what_it_lacks_and_never_contradicts_it():
    old = {"machine": {"gpus": 1, "cores": 16}, "matrix": {**RECORD["matrix"]}}
    del old["matrix"]["cells_by_door"], old["matrix"]["cases"], old["matrix"]["wait_share"]
    with pytest.raises(history.HistoryError, match="the record names no gpu: give --gpu"):
        history.from_record(old, commit="0123abc", date="2026-12-03")
    line = history.from_record(old, commit="0123abc", date="2026-12-03", gpu="NVIDIA H200", vllm="0.26.0", cells=64)
    assert (line["machine"]["gpu"], line["cells"], line["cases"], line["wait_share"]) == ("NVIDIA H200", 64, None, None)
    assert line["machine"]["cpu"] is None  # a record from before the CPU was named: not recorded, never guessed
    with pytest.raises(history.HistoryError, match=r"--cells 64: the record says 93"):
        history.from_record(RECORD, commit="0123abc", date="2026-12-06", cells=64)
    with pytest.raises(history.HistoryError, match="commit 'main'"):
        history.from_record(RECORD, commit="main", date="2026-12-06")


def test_append_adds_a_line_after_good_ones_only(tmp_path):
    path = tmp_path / "runs.jsonl"
    history.append(str(path), GOOD)
    history.append(str(path), {**GOOD, "machine_state": "warm"})
    assert [e["machine_state"] for e in history.read(str(path))] == ["fresh", "warm"]
    path.write_text(path.read_text() + "{broken\n")
    with pytest.raises(history.HistoryError, match=r"runs.jsonl:3: not JSON"):
        history.append(str(path), GOOD)
    with pytest.raises(history.HistoryError, match="missing key 'status'"):
        history.append(str(tmp_path / "new.jsonl"), {k: v for k, v in GOOD.items() if k != "status"})
    assert not (tmp_path / "new.jsonl").exists()


def test_the_command_appends_a_record_and_checks_the_file(tmp_path, capsys):
    record, path = tmp_path / "sleepwake-run.json", tmp_path / "runs.jsonl"
    record.write_text(json.dumps(RECORD))
    argv = ["append", str(record), "--commit", "0123abc", "--date", "2026-12-06", "--history", str(path)]
    assert history.main(argv) == 0
    assert history.main(["check", str(path)]) == 0
    assert "1 runs, every line good" in capsys.readouterr().out
    assert history.main(argv + ["--vllm", "0.25.0"]) == 1
    assert "--vllm '0.25.0': the record says '0.26.0'" in capsys.readouterr().err
    path.write_text(path.read_text().replace('"cases": 1002, ', ""))
    assert history.main(["check", str(path)]) == 1
    assert "runs.jsonl:1: missing key 'cases'" in capsys.readouterr().err


def test_the_latest_line_names_the_last_commits_fresh_and_warm_runs():
    earlier = {**GOOD, "commit": "8a06f55", "elapsed_s": 613.2, "waves_s": [613.2]}
    warm = {**GOOD, "machine_state": "warm", "elapsed_s": 549.9, "waves_s": [397.1, 152.8]}
    assert history.latest_line([earlier, GOOD, warm]) == (
        "The latest main job, at 84c86bc, on 1 × NVIDIA H200 with 16 cores (AMD EPYC 9654 96-Core Processor), "
        "vLLM 0.26.0, 93 GPU cells: fresh 580 s (green), warm 550 s (green)."
    )
    unnamed = {**warm, "machine": {**MACHINE, "cpu": None}}
    assert "with 16 cores, vLLM 0.26.0" in history.latest_line([unnamed])
    assert history.latest_line([earlier, warm]).endswith("93 GPU cells: warm 550 s (green).")
    assert history.latest_line([]) == "No main job has been recorded yet."


def test_the_readmes_figures_come_from_the_history():
    """The README's figures line is latest_line of the history up to one of its runs: it never says what the
    history does not hold, and a run appended since (run_matrix.sh on a runner) leaves it true."""
    with open(os.path.join(history.ROOT, "README.md"), encoding="utf-8") as f:
        said = [line for line in f.read().splitlines() if line.startswith("The latest main job")]
    assert len(said) == 1, "README.md: one line of the history's figures (python3 -m tools.bench.history latest)"
    entries = history.read()
    assert said[0] in {history.latest_line(entries[:k]) for k in range(1, len(entries) + 1)}, (
        "README.md's figures are not the history's: replace the line with `python3 -m tools.bench.history latest`"
    )


def _run(commit, state, status, gpu="NVIDIA H200", vllm="0.26.0"):
    return {
        **GOOD,
        "commit": commit,
        "machine_state": state,
        "status": status,
        "vllm": vllm,
        "machine": {**MACHINE, "gpu": gpu},
    }


def test_a_streak_counts_one_machines_green_runs_in_a_row():
    entries = [
        _run("a000001", "fresh", "green"),
        _run("a000001", "warm", "green"),
        _run("a000001", "warm", "green"),  # three green on one machine
        _run("b000002", "fresh", "green"),  # a new machine: its count starts again
        _run("b000002", "warm", "red"),
        _run("b000002", "warm", "green"),
        _run("c000003", "fresh", "green", gpu="NVIDIA H100 80GB HBM3"),
        _run("c000003", "warm", "green", vllm="0.24.0"),  # another release: not the H100's warm run
    ]
    chains = history.machine_chains(entries)
    assert [[e["commit"] for e in c] for c in chains] == [
        ["a000001"] * 3,
        ["b000002"] * 3,
        ["c000003"],
        ["c000003"],
    ]
    assert [history.green_in_a_row(c) for c in chains] == [3, 1, 1, 1]
    line = history.streak_line(entries, gpu="H200", vllm="0.26.0")
    assert "the newest machine 1 on NVIDIA H200 (b000002 fresh 580 s green, b000002 warm 580 s red" in line, line
    assert "the most, 3 on NVIDIA H200 (a000001 fresh" in line, line
    # Greens on separate machines are never one streak: three fresh green runs count 1.
    fresh = [_run(f"d00000{i}", "fresh", "green") for i in range(3)]
    assert "the most, 1 on" in history.streak_line(fresh)
    assert history.streak_line(entries, gpu="B200") == "No main job on B200."


def test_the_streak_command_reads_the_history(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    path.write_text(_text(_run("a000001", "fresh", "green"), _run("a000001", "warm", "green")))
    assert history.main(["streak", str(path), "--gpu", "H200"]) == 0
    assert "the newest machine 2 on NVIDIA H200" in capsys.readouterr().out
