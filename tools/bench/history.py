"""The main job's run history, tools/bench/runs.jsonl: one JSON object a line and run, in the order the runs
ended, made from the run's record (sleepwake-run.json, run_record.py). tools/run_matrix.sh appends the main
job's line after each run; the report (tools/report) draws the file and the README's figures line is made
from it (latest_line).

    python3 -m tools.bench.history append sleepwake-run.json --commit 84c86bc --date 2026-12-05
    python3 -m tools.bench.history check [FILE]
    python3 -m tools.bench.history latest [FILE]
    python3 -m tools.bench.history streak [FILE] [--gpu H200] [--vllm 0.26.0]

A line's keys (KEYS): the commit and date of the run, vLLM's release, the machine (its GPU's name, how many
GPUs the run used, the host's cores and its CPU's model), whether the machine was fresh or warm, Bazel's
elapsed seconds and each wave's, the GPU servers started, the GPU cells' share of their time spent waiting
on neighbours' memory phases, the GPU cells and the test cases that ran (passed or failed, every target of
the run), and the verdict. A figure the record did not measure is null; a key is never left out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HISTORY_FILE = os.path.join(ROOT, "tools", "bench", "runs.jsonl")
KEYS = (
    "commit",
    "date",
    "vllm",
    "machine",
    "machine_state",
    "elapsed_s",
    "waves_s",
    "server_starts",
    "wait_share",
    "cells",
    "cases",
    "status",
)
MACHINE_KEYS = ("gpu", "gpus", "cores", "cpu")
MACHINE_STATES = ("fresh", "warm")
STATUSES = ("green", "partial", "red")  # run_record.py: partial, a state walk cell short of its door
COMMIT = re.compile(r"[0-9a-f]{7,40}")
RELEASE = re.compile(r"\d+\.\d+\.\d+\S*")
# Bazel's elapsed time is the sum of its waves', each rounded to 0.1 s (run_record.py).
ROUNDING_S = 0.1


class HistoryError(ValueError):
    pass


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def problems(entry) -> list[str]:
    """What is wrong with one line's object, a phrase each; [] for a good one."""
    if not isinstance(entry, dict):
        return [f"a line is a JSON object, not {type(entry).__name__}"]
    out = [f"missing key {k!r}" for k in KEYS if k not in entry]
    out += [f"unknown key {k!r}" for k in entry if k not in KEYS]
    if out:
        return out
    e = entry
    if not (isinstance(e["commit"], str) and COMMIT.fullmatch(e["commit"])):
        out.append(f"commit {e['commit']!r}: 7 to 40 lower-case hex digits")
    try:
        datetime.date.fromisoformat(e["date"])
    except (TypeError, ValueError):
        out.append(f"date {e['date']!r}: YYYY-MM-DD")
    if not (isinstance(e["vllm"], str) and RELEASE.fullmatch(e["vllm"])):
        out.append(f"vllm {e['vllm']!r}: a release, e.g. 0.26.0")
    m = e["machine"]
    if not isinstance(m, dict) or set(m) != set(MACHINE_KEYS):
        out.append(f"machine {m!r}: an object of exactly {', '.join(MACHINE_KEYS)}")
    else:
        if not (isinstance(m["gpu"], str) and m["gpu"].strip()):
            out.append(f"machine.gpu {m['gpu']!r}: the GPU's name")
        for k in ("gpus", "cores"):
            if not (_count(m[k]) and m[k] > 0):
                out.append(f"machine.{k} {m[k]!r}: a whole number above 0")
        if m["cpu"] is not None and not (isinstance(m["cpu"], str) and m["cpu"].strip()):
            out.append(f"machine.cpu {m['cpu']!r}: the CPU's model, or null where not recorded")
    if e["machine_state"] not in MACHINE_STATES:
        out.append(f"machine_state {e['machine_state']!r}: one of {', '.join(MACHINE_STATES)}")
    if e["status"] not in STATUSES:
        out.append(f"status {e['status']!r}: one of {', '.join(STATUSES)}")
    waves = e["waves_s"]
    if not (isinstance(waves, list) and waves and all(_number(w) and w >= 0 for w in waves)):
        out.append(f"waves_s {waves!r}: each wave's seconds, at least one")
    if not (_number(e["elapsed_s"]) and e["elapsed_s"] >= 0):
        out.append(f"elapsed_s {e['elapsed_s']!r}: Bazel's seconds, not negative")
    elif isinstance(waves, list) and waves and all(_number(w) for w in waves):
        if abs(sum(waves) - e["elapsed_s"]) > ROUNDING_S * len(waves):
            out.append(f"elapsed_s {e['elapsed_s']} is not the sum of waves_s {waves}")
    if not (_count(e["cells"]) and e["cells"] > 0):
        out.append(f"cells {e['cells']!r}: the GPU cells that ran, above 0")
    for k in ("server_starts", "cases"):
        if e[k] is not None and not _count(e[k]):
            out.append(f"{k} {e[k]!r}: a whole number, or null where not measured")
    if e["wait_share"] is not None and not (_number(e["wait_share"]) and 0 <= e["wait_share"] <= 1):
        out.append(f"wait_share {e['wait_share']!r}: a share from 0 to 1, or null where not measured")
    return out


def parse(text: str, source: str = HISTORY_FILE) -> list[dict]:
    """The lines of a history file; HistoryError naming the first bad line."""
    entries = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            raise HistoryError(f"{source}:{n}: an empty line: every line is one run")
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise HistoryError(f"{source}:{n}: not JSON ({e.msg} at column {e.colno})") from None
        found = problems(entry)
        if found:
            raise HistoryError(f"{source}:{n}: " + "; ".join(found))
        entries.append(entry)
    return entries


def read(path: str = HISTORY_FILE) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), path)


def render(entry: dict) -> str:
    """One line, its keys in KEYS' order: the file reads as a table."""
    ordered = {k: entry[k] for k in KEYS}
    ordered["machine"] = {k: entry["machine"][k] for k in MACHINE_KEYS}
    return json.dumps(ordered)


def gpu_name(identity_gpus: str) -> str | None:
    """The GPU's name from identity.txt's `gpus` field ("0, NVIDIA H200, 580.159.04, 143771 MiB; 1, ..."),
    the names joined by " + " where they differ; None where it names none."""
    names = []
    for gpu in identity_gpus.split(";"):
        fields = [f.strip() for f in gpu.split(",")]
        if len(fields) >= 2 and fields[1]:
            names.append(fields[1])
    return " + ".join(dict.fromkeys(names)) or None


def from_record(
    record: dict,
    *,
    commit: str,
    date: str,
    gpu: str | None = None,
    vllm: str | None = None,
    cells: int | None = None,
    cases: int | None = None,
) -> dict:
    """The history line of a run record (run_record.record). The keyword arguments other than commit and
    date stand in for what an older record lacks (its identity, its cells or cases); they never override
    what the record holds. HistoryError when the line would be incomplete or wrong."""
    m, machine = record["matrix"], record["machine"]
    identity = machine.get("identity") or {}
    found_gpu = gpu_name(identity.get("gpus", ""))
    found_vllm = identity.get("vllm", "").split(" ")[0] or None
    by_door = m.get("cells_by_door") or {}
    found_cells = sum(d["cells"] for d in by_door.values()) if by_door else None
    counted = m.get("cases")
    found_cases = sum(counted.get(o, 0) for o in ("passed", "failed")) if counted else None
    for name, found, given in (("gpu", found_gpu, gpu), ("vllm", found_vllm, vllm), ("cells", found_cells, cells)):
        if found is None and given is None:
            raise HistoryError(f"the record names no {name}: give --{name}")
        if found is not None and given is not None and found != given:
            raise HistoryError(f"--{name} {given!r}: the record says {found!r}")
    if found_cases is not None and cases is not None and found_cases != cases:
        raise HistoryError(f"--cases {cases}: the record counts {found_cases}")
    entry = {
        "commit": commit,
        "date": date,
        "vllm": found_vllm or vllm,
        "machine": {
            "gpu": found_gpu or gpu,
            "gpus": machine["gpus"],
            "cores": machine["cores"],
            "cpu": machine.get("cpu"),
        },
        "machine_state": m["machine_state"],
        "elapsed_s": m["elapsed_s"],
        "waves_s": m["waves_s"],
        "server_starts": m.get("server_starts"),
        "wait_share": m.get("wait_share"),
        "cells": found_cells if found_cells is not None else cells,
        "cases": found_cases if found_cases is not None else cases,
        "status": m["status"],
    }
    wrong = problems(entry)
    if wrong:
        raise HistoryError("; ".join(wrong))
    return entry


def append(path: str, entry: dict) -> None:
    """Adds the run's line at the end of the history, which must be good itself (read)."""
    wrong = problems(entry)
    if wrong:
        raise HistoryError("; ".join(wrong))
    if os.path.exists(path):
        read(path)
    with open(path, "a", encoding="utf-8") as f:
        f.write(render(entry) + "\n")


def latest_line(entries: list[dict]) -> str:
    """The README's figures: the last run's commit, machine, vLLM and cells, and its fresh and warm runs'
    elapsed time and verdict (the last of each at that commit)."""
    if not entries:
        return "No main job has been recorded yet."
    last = entries[-1]
    same = [e for e in entries if e["commit"] == last["commit"]]
    runs = []
    for state in MACHINE_STATES:
        mine = [e for e in same if e["machine_state"] == state]
        if mine:
            e = mine[-1]
            runs.append(f"{state} {e['elapsed_s']:.0f} s ({e['status']})")
    m = last["machine"]
    cpu = f" ({m['cpu']})" if m["cpu"] else ""
    return (
        f"The latest main job, at {last['commit']}, on {m['gpus']} × {m['gpu']} with "
        f"{m['cores']} cores{cpu}, vLLM {last['vllm']}, {last['cells']} GPU cells: {', '.join(runs)}."
    )


def machine_chains(entries: list[dict]) -> list[list[dict]]:
    """The runs each machine made one after another: a fresh run and the warm runs that follow it with the
    same GPU, cores and vLLM (a warm run is one on a host an earlier main job ran on: run_matrix.sh). A warm
    run with no such fresh run before it (its machine's first line lost) starts a chain of its own."""

    def machine(e: dict) -> tuple:
        return e["vllm"], e["machine"]["gpu"], e["machine"]["gpus"], e["machine"]["cores"]

    chains: list[list[dict]] = []
    for e in entries:
        if e["machine_state"] == "warm" and chains and machine(chains[-1][-1]) == machine(e):
            chains[-1].append(e)
        else:
            chains.append([e])
    return chains


def green_in_a_row(chain: list[dict]) -> int:
    """The most runs of one machine's chain green one after another."""
    best = run = 0
    for e in chain:
        run = run + 1 if e["status"] == "green" else 0
        best = max(best, run)
    return best


def streak_line(entries: list[dict], gpu: str | None = None, vllm: str | None = None) -> str:
    """How many main jobs ran green in a row on one machine, counted from the history, not claimed: the
    newest machine's and the most any machine ran, among the runs whose GPU name holds `gpu` and whose
    vLLM is `vllm` (each when given)."""
    chosen = [e for e in entries if (gpu is None or gpu in e["machine"]["gpu"]) and (vllm is None or e["vllm"] == vllm)]
    what = " ".join(x for x in (gpu and f"on {gpu}", vllm and f"with vLLM {vllm}") if x) or "in the history"
    if not chosen:
        return f"No main job {what}."

    def named(chain: list[dict]) -> str:
        runs = ", ".join(f"{e['commit']} {e['machine_state']} {e['elapsed_s']:.0f} s {e['status']}" for e in chain)
        return f"{green_in_a_row(chain)} on {chain[0]['machine']['gpu']} ({runs})"

    chains = machine_chains(chosen)
    best = max(chains, key=green_in_a_row)  # the first of the longest
    return (
        f"Main jobs green in a row on one machine {what}: the newest machine {named(chains[-1])}; "
        f"the most, {named(best)}."
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("append", help="append a run record's line to the history")
    add.add_argument("record", help="the run's record, sleepwake-run.json")
    add.add_argument("--commit", required=True, help="the commit the run ran (7 to 40 hex digits)")
    add.add_argument("--date", required=True, help="the day the run ended, YYYY-MM-DD")
    add.add_argument("--history", default=HISTORY_FILE, help="the history file (default: %(default)s)")
    add.add_argument("--gpu", help="the GPU's name, for a record without vLLM's identity")
    add.add_argument("--vllm", help="vLLM's release, for a record without vLLM's identity")
    add.add_argument("--cells", type=int, help="the GPU cells that ran, for a record that does not count them")
    add.add_argument("--cases", type=int, help="the test cases that ran, for a record that does not count them")
    commands = (
        ("check", "validate every line"),
        ("latest", "print the README's figures line"),
        ("streak", "print how many main jobs ran green in a row on one machine"),
    )
    for name, help_text in commands:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("history", nargs="?", default=HISTORY_FILE, help="the history file (default: %(default)s)")
        if name == "streak":
            p.add_argument("--gpu", help="only runs whose GPU's name holds this, e.g. H200")
            p.add_argument("--vllm", help="only runs of this vLLM release, e.g. 0.26.0")
    args = parser.parse_args(argv)
    try:
        if args.command == "append":
            with open(args.record, encoding="utf-8") as f:
                record = json.load(f)
            entry = from_record(
                record,
                commit=args.commit,
                date=args.date,
                gpu=args.gpu,
                vllm=args.vllm,
                cells=args.cells,
                cases=args.cases,
            )
            append(args.history, entry)
            print(f"history: {args.history} += {entry['commit']} {entry['machine_state']} {entry['elapsed_s']} s")
        elif args.command == "check":
            print(f"history: {args.history}: {len(read(args.history))} runs, every line good")
        elif args.command == "streak":
            print(streak_line(read(args.history), args.gpu, args.vllm))
        else:
            print(latest_line(read(args.history)))
    except (HistoryError, OSError, json.JSONDecodeError, KeyError) as e:
        what = f"the record lacks {e}" if isinstance(e, KeyError) else str(e)
        print(f"history: {what}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
