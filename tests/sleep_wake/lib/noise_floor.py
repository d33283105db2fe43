"""The healthy extremes behind the bounds: for each threshold, the largest value (the smallest for a lower
bound) that the oracles measured, per per_cell key, over the measurements.jsonl files of one or more runs
of a healthy vLLM (the matrix, not the mutants): a reading a provisional bound failed is noise too.

    python3 -m tests.sleep_wake.lib.noise_floor TESTLOGS [TESTLOGS ...]

prints one line per threshold: its bound, the extreme measured, the factor and the number of readings,
which is what thresholds.py's Noise entries are written from.
"""

import argparse
import glob
import json
import os
import sys
import zipfile

from tests.sleep_wake.lib import thresholds


def _gpu_cell(path: str) -> bool:
    """A reading of a healthy vLLM on the GPU: not the fake tier's (<class>_fake_<cell>), whose bytes and
    times are the fake's model, nor a mutant's."""
    return "_fake_" not in path and "/mutants/" not in path


def readings(roots) -> list[dict]:
    """Every oracle reading (an entry with `oracle` and `ok`) of the GPU cells under the roots, zipped
    outputs included."""
    out = []
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "measurements.jsonl"), recursive=True):
            if not _gpu_cell(path):
                continue
            with open(path, encoding="utf-8") as f:
                out += [json.loads(line) for line in f if line.strip()]
        for path in glob.glob(os.path.join(root, "**", "outputs.zip"), recursive=True):
            if not _gpu_cell(path):
                continue
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    if name.endswith("measurements.jsonl"):
                        out += [json.loads(line) for line in z.read(name).decode().splitlines() if line.strip()]
    return [e for e in out if "oracle" in e and "ok" in e]


def _key(t: thresholds.Threshold, cell: str | None) -> str | None:
    """The per_cell key a cell's reading is bounded by (None: the default value)."""
    if not cell:
        return None
    key = cell.lower()
    runner, _, mode = key.partition("-")
    return next((k for k in (key, mode, runner) if k in t.per_cell), None)


def extremes(entries) -> dict:
    """(threshold, per_cell key) -> (extreme, readings, cells), over every reading (passing or not)."""
    out = {}
    for e in entries:
        t = thresholds.TABLE.get(e["key"])
        if t is None:
            continue
        k = (t.name, _key(t, e.get("cell")))
        best, n, cells = out.get(k, (None, 0, set()))
        value = e["value"]
        pick = min if t.relation == ">=" else max
        out[k] = (value if best is None else pick(best, value), n + 1, cells | {e.get("cell")})
    return out


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", help="bazel-testlogs directories (or any tree of test outputs)")
    args = parser.parse_args(argv[1:])
    found = extremes(readings(args.roots))
    if not found:
        print(f"no oracle readings under {args.roots}: run the GPU matrix first", file=sys.stderr)
        return 1
    for (name, key), (value, n, cells) in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        t = thresholds.TABLE[name]
        bound = t.per_cell.get(key, t.value) if key else t.value
        factor = (value / bound if t.relation == ">=" else bound / value) if value else float("inf")
        print(f"{name}{f' ({key})' if key else ''}: bound {t.relation} {bound:g}, healthy extreme {value:g} "
              f"({factor:.2f}x), {n} readings in {len(cells)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
