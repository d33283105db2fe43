"""A fix of a pinned divergence shows: with the fake's gauge_tracks_tags (the gauge keeps the sleep level
until every tag is awake, i.e. gauge_awake_while_partially_asleep fixed), the classes that pin the
divergence fail, naming it. Judged like a mutant (tests/core/verdict.py): each class must fail for
that reason, not for any other.

Runs the classes against the fake server in a pytest subprocess; the cell, checkpoint and server module
come from the environment (the BUILD target sets them as for the fake tier).
"""

import os
import subprocess
import sys

import sleepwake_mutants

from tests.core import verdict

SUITE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/sleep_wake
CLASS_FILES = {
    "flags": os.path.join(SUITE, "test_sleep_wake_flags.py"),
    "staged_wake_cycles": os.path.join(SUITE, "test_staged_wake_cycles.py"),
}
# The pinned gauge is what the fixed divergence breaks: its oracle must be the one that fires.
EXPECTED = ("flags.gauge",)


def test_a_fixed_gauge_fails_the_pins(tmp_path):
    junit = tmp_path / "junit.xml"
    env = dict(os.environ, TEST_UNDECLARED_OUTPUTS_DIR=str(tmp_path / "outputs"))
    env[sleepwake_mutants.ENV] = "gauge_tracks_tags"
    for key in ("PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST", "TESTBRIDGE_TEST_ONLY", "XML_OUTPUT_FILE"):
        env.pop(key, None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *CLASS_FILES.values(),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit2",
        f"--rootdir={os.getcwd()}",
        f"--basetemp={tmp_path / 'inner'}",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert junit.exists(), proc.stdout + proc.stderr
    results = verdict.judge_classes(
        verdict.parse_junit(str(junit)), list(CLASS_FILES), CLASS_FILES, {c: EXPECTED for c in CLASS_FILES}
    )
    report = {c: (r.verdict, r.failed_tests, r.messages) for c, r in results.items()}
    assert all(r.verdict == verdict.KILLED for r in results.values()), f"{report}\n{proc.stdout[-3000:]}"
