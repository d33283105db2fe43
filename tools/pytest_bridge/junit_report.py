"""A JUnit XML report of one test case, for outcomes pytest's own report cannot state.

tools/pytest_bridge/pytest_main.py writes one when a target ran no test (a --test_filter or a shard that selected
nothing: one skipped case naming why) or when the test process ended before pytest finished (one
error case naming the test it was in), so bazel-testlogs never shows such a run as passed cases.
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ElementTree

OUTCOMES = ("skipped", "error")


def write_single_case(path: str, suite: str, name: str, outcome: str, message: str) -> None:
    """Writes an xunit2 report holding one test case `name` of suite `suite` with `outcome`."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is not one of {OUTCOMES}")
    root = ElementTree.Element("testsuites")
    testsuite = ElementTree.SubElement(
        root,
        "testsuite",
        {
            "name": suite,
            "tests": "1",
            "failures": "0",
            "errors": "1" if outcome == "error" else "0",
            "skipped": "1" if outcome == "skipped" else "0",
            "time": "0",
            "timestamp": datetime.datetime.now().isoformat(timespec="seconds"),
        },
    )
    case = ElementTree.SubElement(testsuite, "testcase", {"classname": suite, "name": name, "time": "0"})
    detail = ElementTree.SubElement(case, outcome, {"message": message})
    detail.text = message
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
