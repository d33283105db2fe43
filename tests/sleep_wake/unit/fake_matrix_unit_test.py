"""Runs the five GPU test classes of this package against FakeVllm (tests/sleep_wake/fakes/fake_launcher.py).

This checks the tests' own logic and bounds against vLLM 0.26.0's sleep semantics as the fake models
them, and that re-created defects make the right tests fail. It says nothing about vLLM itself.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/sleep_wake: the class files
ROOT = os.path.dirname(os.path.dirname(HERE))
CLASS_FILES = ["test_sleep_wake_flags.py", "test_error_paths.py", "test_scheduler_gate.py",
               "test_staged_wake_cycles.py", "test_sleep_wake_latency.py"]


def run_classes(tmp_path, files, bugs=""):
    env = dict(os.environ, SLEEPWAKE_RUNNER="mrv1", SLEEPWAKE_EXECUTION_MODE="eager",
               SLEEPWAKE_FAKE_BUGS=bugs, TEST_UNDECLARED_OUTPUTS_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.sleep_wake.fakes.fake_launcher", "-q", "-rf",
           "-p", "no:cacheprovider", *[os.path.join(HERE, f) for f in files]]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    return proc.returncode, proc.stdout + proc.stderr


def test_all_classes_pass_on_the_fake(tmp_path):
    rc, out = run_classes(tmp_path, CLASS_FILES)
    assert rc == 0 and "15 passed" in out, out
    assert (tmp_path / "measurements.jsonl").exists()


@pytest.mark.parametrize("bug,must_fail", [
    ("resume_on_partial_wake", ["test_weights_first_holds_request_until_kv_cache",
                                "test_kv_cache_first_holds_request_until_weights",
                                "test_held_requests_complete_and_server_stays_healthy"]),
    ("gauge_tracks_tags", ["test_partial_wakes_keep_sleeping_flag", "test_level2_flags_and_recovery",
                           "test_staged_cycles_are_golden"]),
])
def test_recreated_defects_are_caught(tmp_path, bug, must_fail):
    files = ["test_scheduler_gate.py"] if bug == "resume_on_partial_wake" else [
        "test_sleep_wake_flags.py", "test_staged_wake_cycles.py"]
    rc, out = run_classes(tmp_path, files, bugs=bug)
    assert rc == 1, out
    failed = [line for line in out.splitlines() if line.startswith("FAILED ")]
    for name in must_fail:
        assert any(f"::{name}[MRV1-eager]" in line for line in failed), f"{bug} not caught by {name}:\n{out}"
