"""The server dies with the test process, however the test process dies: started plainly (the
supervisor is the test process's child) or forked by a zygote (it is not: it watches the test process
through its control pipe and a pidfd)."""

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from tools.launcher import process_tree, zygote_client
from tools.launcher.unit import testing

START_MODES = ["plain", "zygote"]


@pytest.fixture(params=START_MODES)
def start_mode(request, tmp_path):
    """The start path under test; for "zygote", a host serving the test's lock dir."""
    if request.param == "plain":
        yield "plain"
        return
    with zygote_client.private_host(str(tmp_path / "locks")):
        yield "zygote"


def _start_driver(tmp_path, start_mode, *extra):
    cfg = dataclasses.asdict(testing.fast_config(tmp_path, start_mode=start_mode))
    pid_file = str(tmp_path / "pids")
    zygote = start_mode == "zygote"
    env = testing.module_environ(test_tmpdir=str(tmp_path)) if zygote else testing.python_env()
    argv = [sys.executable, testing.DRIVER, json.dumps(cfg), pid_file] + (["module"] if zygote else []) + list(extra)
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
    assert driver.stdout is not None
    readable, _, _ = select.select([driver.stdout], [], [], 30)
    line = driver.stdout.readline() if readable else b""
    if not line:
        driver.kill()
        driver.wait()
        raise AssertionError("the driver did not start its server; see %s" % (tmp_path / "logs"))
    started = json.loads(line)
    assert started["start_mode"] == start_mode
    recorded = testing.recorded_pids(pid_file)
    assert sorted(recorded) == started["pids"] and len(recorded) == 4
    recorded.update(process_tree.snapshot(started["supervisor"]))  # the supervisor itself too
    return driver, recorded, started


def _log_text(tmp_path):
    logs = tmp_path / "logs"
    return "".join((logs / name).read_text() for name in os.listdir(logs))


def test_sigkill_of_the_test_process_takes_the_server_down(tmp_path, start_mode):
    driver, recorded, _ = _start_driver(tmp_path, start_mode)
    driver.kill()
    driver.wait()
    assert testing.survivors_after(recorded) == []


def test_sigkill_takes_the_server_down_while_a_forked_copy_holds_the_pipe(tmp_path, start_mode):
    """The control pipe stays open in the copy, so the news must come another way: PDEATHSIG in the
    plain path, the pidfd of the test process in the zygote path."""
    driver, recorded, started = _start_driver(tmp_path, start_mode, "linger")
    linger = {started["linger"]: process_tree.start_time(started["linger"])}
    try:
        driver.kill()
        driver.wait()
        assert testing.survivors_after(recorded) == []
        assert process_tree.survivors(linger), "the copy holding the pipe should still be alive"
    finally:
        testing.survivors_after(linger, 0)


def test_sigterm_of_the_test_process_stops_the_server_in_order(tmp_path, start_mode):
    driver, recorded, _ = _start_driver(tmp_path, start_mode)
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(timeout=30) == -signal.SIGTERM
    assert testing.survivors_after(recorded) == []
    assert "stopping the server tree (asked to stop fast)" in _log_text(tmp_path)


def _start_supervisor(tmp_path):
    pid_file = str(tmp_path / "pids")
    argv = testing.stub_command(pid_file=pid_file)(testing.fast_config(tmp_path), 0)
    sup = subprocess.Popen(
        [sys.executable, "-m", "tools.launcher.supervisor"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=testing.python_env(),
    )
    assert sup.stdin is not None and sup.stdout is not None
    spec = {"argv": argv, "env": testing.python_env(), "grace_s": 0.5, "parent_pid": os.getpid()}
    sup.stdin.write((json.dumps(spec) + "\n").encode())
    sup.stdin.flush()
    assert "pid" in json.loads(sup.stdout.readline())
    deadline = time.monotonic() + 30  # the stub records its family before it serves
    while len(testing.recorded_pids(pid_file)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    recorded = testing.recorded_pids(pid_file)
    assert len(recorded) == 4
    return sup, recorded


def test_supervisor_tears_down_when_the_pipe_closes(tmp_path):
    sup, recorded = _start_supervisor(tmp_path)
    sup.stdin.close()  # what the kernel does when the test process dies
    assert sup.wait(timeout=30) == 0
    assert json.loads(sup.stdout.read().splitlines()[-1])["reason"] == "test process gone (pipe closed)"
    assert testing.survivors_after(recorded) == []


def test_supervisor_tears_down_on_sigterm(tmp_path):
    sup, recorded = _start_supervisor(tmp_path)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=30) == 0
    assert json.loads(sup.stdout.read().splitlines()[-1])["reason"] == "got SIGTERM"
    sup.stdin.close()
    assert testing.survivors_after(recorded) == []
