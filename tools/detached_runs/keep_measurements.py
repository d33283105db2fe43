"""Copies every GPU cell's measurements file out of a bazel-testlogs tree, unzipped, to the same path
under DEST: a detached run brings back the readings of every cell, which tests/core/noise_floor.py merges
into the noise data, without the server logs that make whole undeclared outputs heavy.

    python3 -m tools.detached_runs.keep_measurements TESTLOGS DEST --newer FILE
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

from tools.results import testlogs


def results_since(testlogs_dir: str, newer_than: float, under: str = "") -> Iterator[tuple[str, str]]:
    """(result dir, its path under testlogs_dir) of each test result under testlogs_dir/under whose test.xml is
    newer than newer_than: this run's, not an earlier run's left in place."""
    for root, _dirs, files in os.walk(os.path.join(testlogs_dir, under), followlinks=True):
        if "test.xml" in files and os.path.getmtime(os.path.join(root, "test.xml")) > newer_than:
            yield root, os.path.relpath(root, testlogs_dir)


def write(dest: str, path: str, data: bytes) -> str:
    """Writes data to DEST/path, making its folders; returns path."""
    os.makedirs(os.path.join(dest, os.path.dirname(path)), exist_ok=True)
    with open(os.path.join(dest, path), "wb") as f:
        f.write(data)
    return path


def kept(testlogs_dir: str, dest: str, newer_than: float) -> list[str]:
    """Writes DEST/<result dir>/test.outputs/measurements.jsonl for each of this run's results
    (results_since) that holds a healthy GPU's readings (testlogs.healthy_gpu_result). Returns the relative
    paths written."""
    written = []
    for root, rel in results_since(testlogs_dir, newer_than):
        if not testlogs.healthy_gpu_result(rel):
            continue
        text = testlogs.read_output(root, testlogs.MEASUREMENTS_FILE)
        if text is not None:
            written.append(write(dest, os.path.join(rel, "test.outputs", testlogs.MEASUREMENTS_FILE), text.encode()))
    return sorted(written)


def command(argv: list[str], doc: str, kept_fn, what: str) -> int:
    """The command line of a keeper: TESTLOGS DEST --newer FILE, kept_fn(testlogs, dest, newer_than) doing it."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("testlogs", help="a bazel-testlogs directory (symlinks followed)")
    parser.add_argument("dest", help=f"where the {what} go, at their paths under testlogs")
    parser.add_argument("--newer", required=True, help="a file: only results written after it are kept")
    args = parser.parse_args(argv)
    paths = kept_fn(args.testlogs, args.dest, os.path.getmtime(args.newer))
    print(f"{os.path.basename(sys.argv[0]).removesuffix('.py')}: {len(paths)} {what} kept in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(command(sys.argv[1:], __doc__, kept, "cells' measurements files"))
