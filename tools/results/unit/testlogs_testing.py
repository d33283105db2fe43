"""Fakes of what `bazel test` leaves behind, for the CPU tests of the readers of test results:
JUnit XML files and a build event (BEP JSON) file naming them."""

from __future__ import annotations

import json
import os
import pathlib
import xml.etree.ElementTree as ElementTree


def write_xml(path, outcomes: dict[str, str], skip_message: str = "") -> str:
    """A JUnit XML file at path with one test case per name -> passed | failed | error | skipped."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = ElementTree.Element("testsuites")
    suite = ElementTree.SubElement(root, "testsuite", {"name": "pytest", "tests": str(len(outcomes))})
    for name, outcome in outcomes.items():
        case = ElementTree.SubElement(suite, "testcase", {"classname": "sample.TestX", "name": name})
        if outcome != "passed":
            ElementTree.SubElement(
                case,
                "failure" if outcome == "failed" else outcome,
                {"message": skip_message if outcome == "skipped" else "boom"},
            )
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return str(path)


def write_bep(
    path,
    results,
    command: str = "test",
    patterns=("//...",),
    attempt_s: dict | None = None,
    tags: dict | None = None,
    span: tuple[float, float] | None = None,
    attempt_began: dict | None = None,
) -> None:
    """A BEP JSON file of one invocation; results are (label, xml path or None, status) or
    (label, xml path, status, shard, run, attempt, cached). attempt_s: xml path -> the seconds Bazel
    took for that result's attempt (testAttemptDurationMillis); a result not in it carries none.
    tags: label -> its tags (a targetConfigured event each); span: (began, ended) of the invocation in
    seconds since the epoch (started, buildFinished); attempt_began: xml path -> when its attempt began."""
    attempt_s, attempt_began = attempt_s or {}, attempt_began or {}
    started = {"command": command, "uuid": "fake"}
    if span:
        started["startTimeMillis"] = str(round(span[0] * 1000))
    events = [
        {"id": {"started": {}}, "started": started},
        {"id": {"pattern": {"pattern": list(patterns)}}, "expanded": {}},
    ]
    events += [
        {"id": {"targetConfigured": {"label": label}}, "configured": {"targetKind": "py_test rule", "tag": list(t)}}
        for label, t in (tags or {}).items()
    ]
    for result in results:
        label, xml, status, shard, run, attempt, cached = (tuple(result) + (1, 1, 1, False))[:7]
        outputs = [{"name": "test.log", "uri": "file://" + os.path.abspath(str(xml or "x")) + ".log"}]
        if xml:
            outputs.append({"name": "test.xml", "uri": "file://" + os.path.abspath(str(xml))})
        payload = {"testActionOutput": outputs, "status": status}
        if xml is not None and str(xml) in attempt_s:
            payload["testAttemptDurationMillis"] = str(round(attempt_s[str(xml)] * 1000))
        if xml is not None and str(xml) in attempt_began:
            payload["testAttemptStartMillisEpoch"] = str(round(attempt_began[str(xml)] * 1000))
        if cached:
            payload["cachedLocally"] = True
        events.append(
            {
                "id": {"testResult": {"label": label, "run": run, "shard": shard, "attempt": attempt}},
                "testResult": payload,
            }
        )
    finished: dict = {"overallSuccess": True}
    if span:
        finished["finishTimeMillis"] = str(round(span[1] * 1000))
    events.append({"id": {"buildFinished": {}}, "finished": finished})
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(event) + "\n" for event in events)
