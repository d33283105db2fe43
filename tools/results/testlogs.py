"""Reading test results: bazel-testlogs/<target>/ (JUnit XML, undeclared outputs) and the build
event file that says which of those results belong to the last `bazel test`.

`.bazelrc` makes every `bazel test` write its build events (BEP, JSON lines) to BEP_FILE in the
workspace root. Its testResult events name the test.xml of every test the invocation ran or took from
the cache, per shard and run; directories of bazel-testlogs that no such event names are stale, left by
earlier invocations.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree
import zipfile

from tools import matrix

WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The same path as `test --build_event_json_file` in .bazelrc (Bazel resolves it in the workspace root).
BEP_FILE = os.path.join(WORKSPACE, ".bazel-bep.json")
RAN = ("passed", "failed")  # outcomes of a test case that ran; "skipped" did not


def read_output(target_dir: str, name: str) -> str | None:
    """The text of the undeclared output `name`: from test.outputs/ as the test left it, or from
    test.outputs/outputs.zip where Bazel zipped the outputs; None if the test wrote no such file."""
    outputs = os.path.join(target_dir, "test.outputs")
    path = os.path.join(outputs, name)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    zipped = os.path.join(outputs, "outputs.zip")
    if os.path.exists(zipped):
        with zipfile.ZipFile(zipped) as z:
            if name in z.namelist():
                return z.read(name).decode("utf-8")
    return None


def healthy_gpu_result(result_dir: str) -> bool:
    """Whether a result dir holds readings of a healthy vLLM on the GPU: not the fake tier's
    (<class>_fake_<cell>, whose bytes and times are the fake's model), nor a mutant's (tests/mutants/)."""
    parts = os.path.normpath(result_dir).split(os.sep)
    return not any(matrix.FAKE_INFIX in p for p in parts) and "mutants" not in parts


ORACLE_PROPERTY = "oracle"  # the JUnit property of a failing oracle's id (tests/core/oracle.py writes it)
# A failure on a server not live and answering (tests/core/liveness.py): what happened, and the
# liveness oracle (api.answers, api.status, server.healthy) that observed it.
ERRORED_PROPERTY, LIVENESS_PROPERTY = "errored", "liveness"
MEASUREMENTS_FILE = "measurements.jsonl"  # every number a test measured, among its undeclared outputs
# The key of a timed sample left out, not judged, for a stall of the host (tests/core/stalls.py): the
# report counts them.
STALLED_KEY = "stalled_sample"


@dataclasses.dataclass(frozen=True)
class Case:
    """One JUnit testcase."""

    classname: str  # e.g. tests.sleep_wake.test_scheduler_gate.TestSchedulerGate
    name: str  # e.g. test_weights_first_holds_request_until_kv_cache[MRV2-eager]
    outcome: str  # "passed", "failed" (failure or error) or "skipped"
    message: str = ""  # the first failure/error message attribute (its text when that is empty)
    text: str = ""  # every failure/error message and text (for people; verdicts read `oracles`)
    oracles: tuple = ()  # the ids of the oracles that failed in it, in order
    seconds: float = 0.0  # its JUnit time (set-up, call and teardown)
    errored: tuple = ()  # what made it errored though an oracle may have fired (the server not live)
    liveness: tuple = ()  # the liveness oracles that observed that

    @property
    def test_id(self) -> str:
        return f"{self.classname}::{self.name}" if self.classname else self.name


def parse_junit(path: str) -> list[Case]:
    cases = []
    for tc in ElementTree.parse(path).getroot().iter("testcase"):
        bad = [c for c in tc if c.tag in ("failure", "error")]
        skipped = any(c.tag == "skipped" for c in tc)
        outcome = "failed" if bad else "skipped" if skipped else "passed"
        message = ""
        if bad:
            message = bad[0].get("message") or (bad[0].text or "").strip()
        text = "\n".join(f"{c.get('message', '')}\n{c.text or ''}" for c in bad)
        props = [(p.get("name"), p.get("value", "")) for p in tc.iter("property")]
        cases.append(
            Case(
                tc.get("classname", ""),
                tc.get("name", ""),
                outcome,
                message,
                text,
                tuple(v for n, v in props if n == ORACLE_PROPERTY),
                float(tc.get("time") or 0),
                tuple(v for n, v in props if n == ERRORED_PROPERTY),
                tuple(v for n, v in props if n == LIVENESS_PROPERTY),
            )
        )
    return cases


def junit_outcomes(xml_path: str) -> collections.Counter:
    """passed / failed / skipped counts of the test cases in a JUnit XML file (failed includes errors)."""
    return collections.Counter(case.outcome for case in parse_junit(xml_path))


def skip_reasons(xml_path: str) -> list[str]:
    return [skipped.get("message", "") for skipped in ElementTree.parse(xml_path).getroot().iter("skipped")]


def result_dirs(target_dir: str) -> list[str]:
    """The directories holding one test.xml each: the target's own, or one per shard or run
    (shard_1_of_11/, run_2_of_20/, nested when both)."""
    found = []
    for parent, dirs, files in os.walk(target_dir):
        dirs[:] = sorted(d for d in dirs if d.startswith(("shard_", "run_")))
        if "test.xml" in files:
            found.append(parent)
    return found


@dataclasses.dataclass
class TestResult:
    """One testResult event: a target's shard, run and attempt, and where its test.xml is."""

    label: str
    shard: int
    run: int
    attempt: int
    status: str
    cached: bool
    xml: str | None  # a local path; None if the event names no test.xml or a non-file URI
    # Bazel's time of the attempt (testAttemptDurationMillis): what `bazel test` prints as "PASSED in",
    # the test runner's start included; None where the event gives none.
    attempt_s: float | None = None
    # When the attempt began (testAttemptStartMillisEpoch), seconds since the epoch; None where not given.
    began: float | None = None


def _local_path(uri: str) -> str | None:
    parsed = urllib.parse.urlparse(uri)
    return urllib.request.url2pathname(parsed.path) if parsed.scheme == "file" else None


def _seconds(millis) -> float | None:
    # The BEP's JSON writes int64 fields as strings.
    return int(millis) / 1000 if millis is not None else None


@dataclasses.dataclass
class Invocation:
    """What a BEP file says about one bazel command: its target patterns and its test results, when it
    began and ended (seconds since the epoch; None where the events give none) and each configured
    target's tags (targetConfigured), which tell a GPU cell (`gpu`) from a CPU-only target."""

    command: str
    patterns: list[str]
    results: list[TestResult]
    began: float | None = None
    ended: float | None = None
    tags: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def read_bep(path: str) -> Invocation:
    """The invocation a BEP JSON file describes.

    Only the last attempt of each (label, shard, run) is kept: with --flaky_test_attempts the earlier
    attempts are superseded.
    """
    command, patterns = "", []
    results: dict = {}
    began = ended = None
    tags: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            event = json.loads(line)
            event_id = event.get("id", {})
            if "started" in event_id:
                command = event.get("started", {}).get("command", "")
                began = _seconds(event.get("started", {}).get("startTimeMillis"))
            elif "buildFinished" in event_id:
                ended = _seconds(event.get("finished", {}).get("finishTimeMillis"))
            elif "targetConfigured" in event_id:
                tags[event_id["targetConfigured"].get("label", "")] = list(event.get("configured", {}).get("tag", []))
            elif "pattern" in event_id:
                patterns += event_id["pattern"].get("pattern", [])
            elif "testResult" in event_id and "testResult" in event:
                ident, payload = event_id["testResult"], event["testResult"]
                outputs = {o.get("name"): o.get("uri", "") for o in payload.get("testActionOutput", [])}
                result = TestResult(
                    label=ident["label"],
                    shard=ident.get("shard", 1),
                    run=ident.get("run", 1),
                    attempt=ident.get("attempt", 1),
                    status=payload.get("status", "UNKNOWN"),
                    cached=bool(payload.get("cachedLocally") or payload.get("executionInfo", {}).get("cachedRemotely")),
                    xml=_local_path(outputs["test.xml"]) if "test.xml" in outputs else None,
                    attempt_s=_seconds(payload.get("testAttemptDurationMillis")),
                    began=_seconds(payload.get("testAttemptStartMillisEpoch")),
                )
                key = (result.label, result.shard, result.run)
                if key not in results or results[key].attempt < result.attempt:
                    results[key] = result
    return Invocation(command, patterns, list(results.values()), began, ended, tags)
