"""The healthy extremes behind the bounds: for each threshold, the largest value (the smallest for a lower
bound) that the oracles measured, per per_cell key, over the measurements.jsonl files of one or more runs
of a healthy vLLM (the matrix, not the mutants): a reading a provisional bound failed is noise too.

    python3 -m tests.core.noise_floor TESTLOGS [TESTLOGS ...]

prints one line per threshold: its bound, the extreme measured, the factor and the number of readings.

    python3 -m tests.core.noise_floor --merge --run ID --what TEXT TESTLOGS

records the run in noise.json (thresholds.NOISE_FILE): each mechanism bound's record, and a contract bound's
where it has one (its factor decides whether it needs a mutant: tests/mutants/unit/catalogue_unit_test.py),
keeps the extreme over its runs (and names the run that set it), adds the run's id, its readings and a
history line with this run's own extreme; a contract bound without a record (a hang detector) gets none.
The run itself (date, GPUs and vLLM release from the logs, what ran) joins the file's runs.
Then `python3 -m tests.core.bounds_doc > docs/thresholds.md`. No code changes: a bound that
moves is a change of its own, reviewed against the 4x rule (unit:thresholds_unit_test).
"""

import argparse
import datetime
import glob
import json
import os
import re
import sys

from tests.core import releases, thresholds
from tests.core.cells import EXECUTION_MODES, RUNNERS
from tools.results import testlogs

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class MergeError(ValueError):
    """The run cannot be recorded as asked; the message says what to change."""


def entries(roots) -> list[dict]:
    """Every line of the GPU cells' measurements files under the roots: each result dir (one test.xml)
    read as the report reads it, zipped outputs included."""
    out = []
    for root in roots:
        for xml in sorted(glob.glob(os.path.join(root, "**", "test.xml"), recursive=True)):
            result_dir = os.path.dirname(xml)
            if testlogs.healthy_gpu_result(os.path.abspath(result_dir)):
                text = testlogs.read_output(result_dir, testlogs.MEASUREMENTS_FILE) or ""
                out += [json.loads(line) for line in text.splitlines() if line.strip()]
    return out


def readings(roots) -> list[dict]:
    """Every oracle reading (an entry with `oracle` and `ok`) of the GPU cells under the roots."""
    return [e for e in entries(roots) if "oracle" in e and "ok" in e]


def extremes(readings_) -> dict:
    """(threshold, per_cell key) -> (extreme, readings, cells), over every reading (passing or not)."""
    out: dict[tuple, tuple] = {}
    for e in readings_:
        t = thresholds.TABLE.get(e["key"])
        if t is None:
            continue
        k = (t.name, t.cell_key(e.get("cell")))
        best, n, cells = out.get(k, (None, 0, set()))
        value = e["value"]
        pick = min if t.relation == ">=" else max
        out[k] = (value if best is None else pick(best, value), n + 1, cells | {e.get("cell")})
    return out


def _gpus(identity: str) -> str | None:
    """ "2 x H200" from an identity's "gpus: 0, NVIDIA H200, <driver>, <MiB>; 1, ..." line."""
    m = re.search(r"^gpus: (.+)$", identity, re.MULTILINE)
    if not m:
        return None
    names = [g.split(",")[1].strip().removeprefix("NVIDIA ") for g in m.group(1).split(";") if "," in g]
    return f"{len(names)} x {', '.join(sorted(set(names)))}" if names else None


def run_facts(all_entries, release: str | None = None, gpus: str | None = None, date: str | None = None) -> dict:
    """The run's date, GPUs and vLLM release, read off its servers' identities and its readings' times;
    the arguments fill what the logs do not say and must agree with what they do."""
    identities = {e["vllm_identity"] for e in all_entries if e.get("vllm_identity")}
    found = {releases.public(v) for v in map(releases.from_identity, identities) if v}
    if len(found) > 1:
        raise MergeError(
            f"the logs hold servers of vLLM {', '.join(sorted(found))}: one run is one release; "
            "merge each release's test logs as a run of its own"
        )
    if release and found and releases.public(release) not in found:
        raise MergeError(f"--release {release} but the logs' servers ran vLLM {found.pop()}")
    release = releases.public(release) if release else (found.pop() if found else None)
    gpus = gpus or next(filter(None, map(_gpus, sorted(identities))), None)
    times = [e["time"] for e in all_entries if isinstance(e.get("time"), (int, float))]
    date = date or (
        datetime.datetime.fromtimestamp(max(times), datetime.timezone.utc).date().isoformat() if times else None
    )
    missing = [flag for flag, v in (("--release", release), ("--gpus", gpus), ("--date", date)) if not v]
    if missing:
        raise MergeError(
            f"the logs do not say the run's {', '.join(f[2:] for f in missing)} (no server identity "
            f"or reading times): pass {' '.join(missing)}"
        )
    return {"date": date, "gpus": gpus, "release": release}


def _number(value) -> str:
    """A reading as the history keeps it: bytes whole, fractions and seconds to six digits."""
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _cells(cells) -> str:
    every = {f"{r}-{m}".lower() for r in RUNNERS for m in EXECUTION_MODES}
    return "every cell" if every <= {c.lower() for c in cells if c} else f"{len(cells)} cells"


def merge(data: dict, found: dict, run_id: str, run: dict) -> list[str]:
    """Adds the run's extremes (extremes()'s result) to data, in place; returns what changed, a line each."""
    if not RUN_ID.fullmatch(run_id):
        raise MergeError(f"run id {run_id!r}: letters, digits, '.', '_' and '-' only")
    if run_id in data["runs"]:
        raise MergeError(
            f"run {run_id!r} is already in the noise records ({data['runs'][run_id]['what']}): "
            "a run is merged once; give another run its own --run"
        )
    by_threshold: dict[str, dict] = {}
    for (name, key), reading in found.items():
        by_threshold.setdefault(name, {})[key] = reading
    notes = []
    for name, by_key in sorted(by_threshold.items()):
        t = thresholds.TABLE[name]
        # A contract bound's record is kept up to date like a mechanism bound's: an extreme left behind by
        # later runs would understate how far the bound is from its noise. One without a record is a hang
        # detector or an exact state, whose readings say nothing about its size.
        if t.layer != thresholds.MECHANISM and not t.record:
            notes.append(f"{name}: not recorded ({t.layer} bound without a noise record)")
            continue
        ref = t.record or name
        record = data["records"].setdefault(ref, {"history": []})
        if "value" not in record:
            record.update(
                cells=_cells(set().union(*(c for _, _, c in by_key.values()))),
                n=0,
                per_cell={},
                run=None,
                runs=[],
                value=None,
            )
        pick = min if t.relation == ">=" else max
        parts = []
        for key, (value, n, cells) in sorted(by_key.items(), key=lambda kv: kv[0] or ""):
            slot = record["per_cell"].setdefault(key, {"run": None, "value": None}) if key else record
            if slot["value"] is None or pick(slot["value"], value) != slot["value"]:
                was = "none" if slot["value"] is None else f"{slot['value']:g}"
                slot["value"], slot["run"] = value, run_id
                notes.append(f"{name}{f' ({key})' if key else ''}: healthy extreme {value:g} (was {was})")
                bound = t.bound_at(key)
                fails = {">=": value < bound, "<=": value > bound, "<": value >= bound}[t.relation]
                if fails:
                    notes.append(
                        f"{name}{f' ({key})' if key else ''}: the bound {t.relation} {bound:g} fails this "
                        "healthy extreme: thresholds_unit_test will fail until the bound moves (a change "
                        "of its own, with its reason)"
                    )
            parts.append(
                f"{f'{key}: ' if key else ''}{_number(value)} over {_count(n, 'reading')} in "
                f"{_count(len(cells), 'cell')}"
            )
        record["runs"].append(run_id)
        if record["n"] is not None:
            record["n"] += sum(n for _, n, _ in by_key.values())
        record["history"].append({"runs": [run_id], "text": "this run's extreme " + "; ".join(parts)})
        if not t.record:
            notes.append(f"{name}: new record {ref!r}: add record={ref!r} to its entry in thresholds.py")
    data["runs"][run_id] = run
    return notes


def write(data: dict, path: str) -> None:
    """The file's one layout (thresholds_unit_test checks it), so a run shows as a small diff."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(path + ".tmp", path)


def _print_extremes(found) -> None:
    for (name, key), (value, n, cells) in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        t = thresholds.TABLE[name]
        bound = t.bound_at(key)
        factor = (value / bound if t.relation == ">=" else bound / value) if value else float("inf")
        print(
            f"{name}{f' ({key})' if key else ''}: bound {t.relation} {bound:g}, healthy extreme {value:g} "
            f"({factor:.2f}x), {n} readings in {len(cells)} cells"
        )


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", help="bazel-testlogs directories of matrix runs")
    parser.add_argument("--merge", action="store_true", help="record the run in the noise records (--data)")
    parser.add_argument("--run", help="the run's id in the noise records (with --merge)")
    parser.add_argument("--what", help="what ran: the job, its settings (with --merge)")
    parser.add_argument("--release", help="the vLLM release, where the logs hold no server identity")
    parser.add_argument("--gpus", help='the GPUs ("1 x H200"), where the logs hold no server identity')
    parser.add_argument("--date", help="the run's date (YYYY-MM-DD), where the readings carry no time")
    parser.add_argument("--data", default=thresholds.NOISE_FILE, help="the noise records (default: %(default)s)")
    args = parser.parse_args(argv[1:])
    all_entries = entries(args.roots)
    found = extremes(e for e in all_entries if "oracle" in e and "ok" in e)
    if not found:
        print(f"no oracle readings under {args.roots}: run the GPU matrix first", file=sys.stderr)
        return 1
    if not args.merge:
        _print_extremes(found)
        return 0
    try:
        missing = [f"--{a}" for a in ("run", "what") if not getattr(args, a)]
        if missing:
            raise MergeError(f"--merge needs {' '.join(missing)}: the run's id and what ran")
        run = {**run_facts(all_entries, args.release, args.gpus, args.date), "what": args.what}
        with open(args.data, encoding="utf-8") as f:
            data = json.load(f)
        notes = merge(data, found, args.run, run)
    except MergeError as e:
        print(f"noise_floor --merge: {e}", file=sys.stderr)
        return 2
    write(data, args.data)
    print(
        "\n".join(
            notes
            + [
                f"recorded run {args.run} in {args.data}; now regenerate the page: "
                "python3 -m tests.core.bounds_doc > docs/thresholds.md"
            ]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
