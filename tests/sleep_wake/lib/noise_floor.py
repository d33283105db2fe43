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

from tests.sleep_wake.lib import thresholds
from tools.results import testlogs


def _gpu_cell(result_dir: str) -> bool:
    """A reading of a healthy vLLM on the GPU: not the fake tier's (<class>_fake_<cell>), whose bytes and
    times are the fake's model, nor a mutant's."""
    parts = os.path.normpath(result_dir).split(os.sep)
    return not any("_fake_" in p for p in parts) and "mutants" not in parts


def readings(roots) -> list[dict]:
    """Every oracle reading (an entry with `oracle` and `ok`) of the GPU cells under the roots: each
    result dir (one test.xml) read as the report reads it, zipped outputs included."""
    out = []
    for root in roots:
        for xml in sorted(glob.glob(os.path.join(root, "**", "test.xml"), recursive=True)):
            result_dir = os.path.dirname(xml)
            if _gpu_cell(os.path.abspath(result_dir)):
                text = testlogs.read_output(result_dir, testlogs.MEASUREMENTS_FILE) or ""
                out += [json.loads(line) for line in text.splitlines() if line.strip()]
    return [e for e in out if "oracle" in e and "ok" in e]


def extremes(entries) -> dict:
    """(threshold, per_cell key) -> (extreme, readings, cells), over every reading (passing or not)."""
    out = {}
    for e in entries:
        t = thresholds.TABLE.get(e["key"])
        if t is None:
            continue
        k = (t.name, t.cell_key(e.get("cell")))
        best, n, cells = out.get(k, (None, 0, set()))
        value = e["value"]
        pick = min if t.relation == ">=" else max
        out[k] = (value if best is None else pick(best, value), n + 1, cells | {e.get("cell")})
    return out


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", help="bazel-testlogs directories of matrix runs")
    args = parser.parse_args(argv[1:])
    found = extremes(readings(args.roots))
    if not found:
        print(f"no oracle readings under {args.roots}: run the GPU matrix first", file=sys.stderr)
        return 1
    for (name, key), (value, n, cells) in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        t = thresholds.TABLE[name]
        bound = t.bound_at(key)
        factor = (value / bound if t.relation == ">=" else bound / value) if value else float("inf")
        print(f"{name}{f' ({key})' if key else ''}: bound {t.relation} {bound:g}, healthy extreme {value:g} "
              f"({factor:.2f}x), {n} readings in {len(cells)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
