"""Reading a run from bazel-testlogs: each cell's JUnit cases, its measurements and log files, which
results the last `bazel test` produced (its build events), and the GPU identity file.

tools/results/testlogs.py reads outputs, shard result dirs, skip records and build events; what it does not
offer (log files inside test.outputs or outputs.zip, a run's measurements, the identity file) lives here,
and so does reading the main job's run history (tools/bench/runs.jsonl) for the page.
"""

from __future__ import annotations

import dataclasses
import json
import os
import xml.etree.ElementTree as ElementTree
import zipfile

from tools.bench import history
from tools.results import testlogs

MATRIX_DIR = os.path.join("tests", "sleep_wake")
MUTANTS_DIR = os.path.join("tests", "mutants")
# Where @sleepwake_gpu writes the identity of the vLLM build and GPU, under Bazel's output base.
IDENTITY_FILE = os.path.join("external", "sleepwake_gpu", "identity.txt")


@dataclasses.dataclass(frozen=True)
class OutputFile:
    """A file a test wrote: `path` itself, or the member `member` of the zip archive at `path`."""

    path: str
    member: str | None = None

    @property
    def name(self) -> str:
        return self.member or os.path.basename(self.path)


result_dirs = testlogs.result_dirs


def junit_cases(xml_path: str) -> list[testlogs.Case]:
    """The test cases of a JUnit XML file; ValueError (saying which file) when it cannot be parsed."""
    try:
        return testlogs.parse_junit(xml_path)
    except Exception as e:  # ElementTree.ParseError, or an OSError for an unreadable file
        raise ValueError(f"{os.path.basename(xml_path)} is not readable JUnit XML ({e})") from None


def skip_reasons(xml_path: str) -> list[str]:
    """The messages of the skipped cases (pytest_main's one case for a filter or shard that selected
    nothing says why); [] when the file cannot be parsed (junit_cases says so)."""
    try:
        return [m for m in testlogs.skip_reasons(xml_path) if m]
    except (ElementTree.ParseError, OSError):
        return []


def measurements(result_dir: str) -> tuple[list[dict], int]:
    """(the records of measurements.jsonl, how many of its lines were not JSON objects)."""
    text = testlogs.read_output(result_dir, testlogs.MEASUREMENTS_FILE) or ""
    records, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            bad += 1  # a line cut short by a killed test, for one
    return records, bad


def log_files(result_dir: str) -> list[OutputFile]:
    """The *.log files among the undeclared outputs (the vLLM server logs), plain or in outputs.zip."""
    outputs = os.path.join(result_dir, "test.outputs")
    found = []
    for parent, dirs, files in os.walk(outputs):
        dirs.sort()
        found += [OutputFile(os.path.join(parent, f)) for f in sorted(files) if f.endswith(".log")]
    zipped = os.path.join(outputs, "outputs.zip")
    if os.path.isfile(zipped):
        try:
            with zipfile.ZipFile(zipped) as z:
                found += [OutputFile(zipped, n) for n in sorted(z.namelist()) if n.endswith(".log")]
        except zipfile.BadZipFile:
            found.append(OutputFile(zipped, "(not a readable zip archive)"))
    return found


@dataclasses.dataclass
class Invocation:
    """What a run's build event files say: the bazel commands, the test.xml files of their results
    (real paths) and, for those whose events give it, Bazel's seconds of the attempt (TestResult.attempt_s)."""

    command: str
    xmls: set[str]
    attempt_s: dict[str, float] = dataclasses.field(default_factory=dict)
    # The testlogs dirs holding its results: more than one where an invocation ran in another output base
    # (tools/run_matrix.sh runs the CPU-only targets in one of their own, beside the GPU waves).
    roots: list[str] = dataclasses.field(default_factory=list)


def testlogs_root_of(label: str, xml: str) -> str | None:
    """The testlogs dir of a result: its test.xml's path up to <package>/<target>/ (shards below that)."""
    package, _, name = label.lstrip("/").partition(":")
    marker = os.sep + os.path.join(package, name) + os.sep if package else os.sep + name + os.sep
    at = xml.rfind(marker)
    return xml[:at] if at > 0 else None


def read_invocation(bep_paths: list[str]) -> Invocation:
    """The run of one or more BEP JSON files (`--build_event_json_file`), one per `bazel test` (tools/
    run_matrix.sh runs one per wave), cached results included: the commands and every file's results."""
    commands, xmls, attempt_s, roots = [], set(), {}, []
    for path in bep_paths:
        bep = testlogs.read_bep(path)
        commands.append(" ".join(w for w in [bep.command, *bep.patterns] if w))
        for r in bep.results:
            if r.xml:
                xml = os.path.realpath(r.xml)
                xmls.add(xml)
                if r.attempt_s is not None:
                    attempt_s[xml] = r.attempt_s
                root = testlogs_root_of(r.label, xml)
                if root and root not in roots:
                    roots.append(root)
    return Invocation(command="; bazel ".join(c for c in commands if c), xmls=xmls, attempt_s=attempt_s, roots=roots)


def identity_file(testlogs_root: str) -> str | None:
    """The @sleepwake_gpu identity file of the Bazel output base that holds testlogs_root, if any.

    bazel-testlogs resolves to <output base>/execroot/<workspace>/bazel-out/<config>/testlogs.
    """
    parts = os.path.realpath(testlogs_root).split(os.sep)
    if "execroot" not in parts:
        return None
    base = os.sep.join(parts[: len(parts) - 1 - parts[::-1].index("execroot")]) or os.sep
    path = os.path.join(base, IDENTITY_FILE)
    return path if os.path.isfile(path) else None


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


@dataclasses.dataclass(frozen=True)
class RunHistory:
    """The main job's run history as the report shows it: its lines (tools/bench/history.py), or why
    there are none to show."""

    path: str
    entries: tuple = ()
    error: str | None = None


def read_history(path: str) -> RunHistory:
    """The history at path; a file that is missing or bad is told on the page, never a failed report."""
    if not os.path.isfile(path):
        return RunHistory(path, error=f"no run history at {path}")
    try:
        return RunHistory(path, tuple(history.read(path)))
    except (history.HistoryError, OSError) as e:
        return RunHistory(path, error=str(e))
