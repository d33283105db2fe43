"""Copies what each mutant target of a run judged out of a bazel-testlogs tree, unzipped, to the same path
under DEST: its row of the mutation table and, per inner shard, the JUnit report and the inner pytest's
output (which oracle fired, on what value). The inner servers' logs stay behind: they make a mutant's
undeclared outputs heavy, and a verdict is read from the reports. Bazel zips the outputs only where the
host has `zip`; both shapes are read.

    python3 -m tools.detached_runs.keep_mutant_verdicts TESTLOGS DEST --newer FILE
"""

from __future__ import annotations

import os
import sys
import zipfile

from tools.detached_runs.keep_measurements import command, results_since, write

MUTANTS_DIR = os.path.join("tests", "mutants")
# tests/mutants/mutant_test.py writes its row (mutation_row.json, a twin's off_door_row.json) at the top, and
# under inner/ each shard's JUnit report beside the inner pytest's output (tests/core/verdict.py PYTEST_LOG)
# and the servers' logs, which stay behind.
INNER = "inner"
INNER_LOG = "pytest.log"


def _wanted(name: str) -> bool:
    """Whether an undeclared output (its path inside test.outputs) is part of the verdict."""
    parts = name.split("/")
    if len(parts) == 1:
        return parts[0].endswith("_row.json")
    return parts[0] == INNER and (parts[-1].endswith(".xml") or parts[-1] == INNER_LOG)


def _outputs(target_dir: str) -> dict[str, bytes]:
    """{path inside test.outputs: bytes} of a target's verdict files, as the test left them or zipped."""
    outputs = os.path.join(target_dir, "test.outputs")
    found: dict[str, bytes] = {}
    zipped = os.path.join(outputs, "outputs.zip")
    if os.path.exists(zipped):
        with zipfile.ZipFile(zipped) as z:
            found.update({n: z.read(n) for n in z.namelist() if not n.endswith("/") and _wanted(n)})
    for root, _dirs, files in os.walk(outputs):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), outputs).replace(os.sep, "/")
            if _wanted(rel):
                with open(os.path.join(root, f), "rb") as fh:
                    found[rel] = fh.read()
    return found


def kept(testlogs_dir: str, dest: str, newer_than: float) -> list[str]:
    """Writes DEST/<result dir>/test.outputs/<file> for the verdict files of each of this run's mutant
    targets (results_since). Returns the relative paths written."""
    return sorted(
        write(dest, os.path.join(rel, "test.outputs", name), data)
        for root, rel in results_since(testlogs_dir, newer_than, MUTANTS_DIR)
        for name, data in _outputs(root).items()
    )


if __name__ == "__main__":
    sys.exit(command(sys.argv[1:], __doc__, kept, "verdict files of mutant targets"))
