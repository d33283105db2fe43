"""The inner run's stop-on-kill plugin: a sound expected oracle stops it, and so does an expected liveness
oracle, fired or met as no answer (its kill stands once the class's control is clean); nothing else does."""

import os
import subprocess
import sys

from tests.mutants import stop_on_kill

HELD = "requests.held_until_resident"
EXPECTED = {HELD, "api.status"}  # resume_on_partial_wake's, in scheduler_gate

# In order: a liveness oracle fails (the stop), then the sound one and a test, both spared; the oracle ids as
# oracle.py records them.
TESTS = """
import pytest


@pytest.mark.parametrize("oracle", ["api.status", "requests.held_until_resident", ""])
def test_fires(oracle, record_property):
    if oracle:
        record_property("oracle", oracle)
        assert False, oracle
"""


def test_a_sound_expected_oracle_stops():
    assert stop_on_kill.stops(True, {HELD}, False, EXPECTED)
    assert stop_on_kill.stops(True, {HELD, "api.status"}, False, EXPECTED)


def test_an_expected_liveness_oracle_stops_fired_or_met_as_no_answer():
    """A hang's no answer is an errored case with the liveness mark api.answers: it stops the run (it did
    not, so a fake hang ran every shard into its 60 s timeout and the target past its bound)."""
    for liveness in ("api.status", "api.answers", "server.healthy"):
        assert stop_on_kill.stops(True, {liveness}, False, EXPECTED | {liveness}), liveness
        assert stop_on_kill.stops(True, set(), True, EXPECTED | {liveness}, {liveness}), liveness


def test_neither_does_a_pass_an_errored_case_or_another_oracle():
    assert not stop_on_kill.stops(False, {HELD}, False, EXPECTED)
    assert not stop_on_kill.stops(True, {HELD}, True, EXPECTED)
    assert not stop_on_kill.stops(True, {"flags.gauge"}, False, EXPECTED)
    assert not stop_on_kill.stops(True, set(), True, {HELD}, {"api.answers"})  # no answer, no hang listed


def test_the_inner_run_stops_at_the_first_kill(tmp_path):
    """As the inner pytest loads it (-p, a fresh process): it imports there and stops at the first kill."""
    (tmp_path / "test_inner.py").write_text(TESTS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    env[stop_on_kill.ENV] = ",".join(sorted(EXPECTED))
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "test_inner.py", "-p", "tests.mutants.stop_on_kill", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "1 failed" in run.stdout and "passed" not in run.stdout, run.stdout + run.stderr
    assert "killed by api.status: the rest need not run" in run.stdout, run.stdout
