"""Fixtures of the launcher's CPU tests."""

import pytest

from tools.launcher.unit import testing


@pytest.fixture
def pid_file(tmp_path):
    """The stub servers' PID file (testing.stub_command's pid_file); at the test's end none of them may
    survive."""
    path = str(tmp_path / "pids")
    yield path
    assert testing.survivors_after(testing.recorded_pids(path)) == [], "stub server processes survived"
