"""Runs a test module of its own under the suite's oracle hook (the conftest imports
oracle.pytest_runtest_makereport), for unit tests of what the JUnit XML records per case."""

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def junit_properties(tmp_path, source: str) -> dict[str, list[tuple[str, str]]]:
    """{test name: [(property name, value), ...]} of the JUnit XML of `source` run as test_inner.py."""
    (tmp_path / "conftest.py").write_text("from tests.core.oracle import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    xml = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
            f"--junitxml={xml}",
            "-o",
            "junit_family=xunit2",
            f"--rootdir={tmp_path}",
        ],
        cwd=WORKSPACE,
        capture_output=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([WORKSPACE, os.environ.get("PYTHONPATH", "")])},
    )
    return {
        tc.attrib["name"]: [(p.attrib["name"], p.attrib["value"]) for p in tc.iter("property")]
        for tc in ET.parse(xml).getroot().iter("testcase")
    }
