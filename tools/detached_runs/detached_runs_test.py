"""start.sh, collect.sh and save.sh, with fakes of tools/setup.sh and tools/run_matrix.sh in a scratch
workspace: each fake writes a record and a test.xml naming its run, and exits as its arguments say."""

import os
import shutil
import subprocess
import sys
import time

import pytest

from tools.launcher import zygote_host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ("start.sh", "runs.sh", "save.sh", "collect.sh")
# A fake main job: `NAME EXIT [WAIT_FOR_FILE]`; it waits for that file when given, so a test can hold a
# run going for as long as it needs, and leaves what run_matrix.sh leaves.
FAKE = """#!/bin/bash
name=$1 code=$2
if [[ -n "${3:-}" ]]; then until [[ -e $3 ]]; do sleep 0.1; done; fi
echo "fake run $name"
echo "{\\"run\\": \\"$name\\"}" > sleepwake-run.json
mkdir -p out/tests/sleep_wake/cell && echo "<testsuites name=\\"$name\\"/>" > out/tests/sleep_wake/cell/test.xml
echo "log of $name" > out/tests/sleep_wake/cell/test.log
ln -sfn out bazel-testlogs
exit $code
"""


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "tools" / "detached_runs").mkdir(parents=True)
    for name in SCRIPTS:
        shutil.copy2(os.path.join(HERE, name), ws / "tools" / "detached_runs" / name)
    for name in ("setup.sh", "run_matrix.sh"):
        (ws / "tools" / name).write_text(FAKE)
        (ws / "tools" / name).chmod(0o755)
    return ws


def _env(workspace, **more):
    env = dict(
        os.environ,
        SLEEPWAKE_RUNS_DIR=str(workspace.parent / "runs"),
        SLEEPWAKE_LOCK_DIR=str(workspace.parent / "locks"),
        OUT=str(workspace.parent / "out"),
    )
    env.update(more)
    return env


def _script(workspace, name, *args, **env):
    proc = subprocess.run(
        ["bash", str(workspace / "tools" / "detached_runs" / name), *args],
        env=_env(workspace, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _untar(path, member):
    return subprocess.run(["tar", "xzOf", str(path), member], capture_output=True, text=True, check=True).stdout


def test_runs_one_after_another_each_saved_before_the_next_overwrites_it(workspace):
    code, out = _script(workspace, "start.sh", "first setup first 0", "second matrix second 3")
    assert code == 0, out
    code, out = _script(workspace, "collect.sh", "second", "50")
    assert code == 0, out
    assert "collect.sh: second exit 3" in out
    code, out = _script(workspace, "collect.sh", "first", "5")
    assert code == 0 and "collect.sh: first exit 0" in out, out
    got = workspace.parent / "out"
    assert (got / "first" / "run.json").read_text().strip() == '{"run": "first"}'
    assert (got / "second" / "run.json").read_text().strip() == '{"run": "second"}'
    assert (got / "second" / "rc").read_text().strip() == "3"
    assert 'name="first"' in _untar(got / "first" / "xml.tgz", "tests/sleep_wake/cell/test.xml")
    assert "log of second" in _untar(got / "second" / "logs.tgz", "tests/sleep_wake/cell/test.log")
    assert "fake run first" in (got / "first" / "console.log").read_text()
    for run in ("first", "second"):
        assert len(os.listdir(got / run)) <= 8, "a device call brings back at most 8 files"


def test_collect_says_at_once_when_no_run_is_there(workspace):
    began = time.monotonic()
    code, out = _script(workspace, "collect.sh", "never", "300")
    assert code == 3, out
    assert "none running" in out
    assert time.monotonic() - began < 30, "it must not wait the SECS out on a machine without the run"


def test_collect_of_a_run_still_going_fails_until_it_ends(workspace):
    go = workspace.parent / "go"
    code, out = _script(workspace, "start.sh", f"slow matrix slow 0 {go}")
    assert code == 0, out
    code, out = _script(workspace, "collect.sh", "slow", "1")
    assert code == 1 and "still runs" in out, out
    go.touch()
    code, out = _script(workspace, "collect.sh", "slow", "50")
    assert code == 0 and "collect.sh: slow exit 0" in out, out


def test_start_refuses_an_unknown_mode_and_starts_nothing(workspace):
    code, out = _script(workspace, "start.sh", "a matrix", "b bench")
    assert code == 2 and '"b bench"' in out, out
    assert not (workspace.parent / "runs" / "a").exists()


def _python_first(tmp_path):
    """A folder whose python3 is this test's interpreter, which has what tools.launcher imports."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (shim / "python3").chmod(0o755)
    return shim


def test_release_waits_for_its_parts_then_installs_them(workspace, tmp_path):
    staged = tmp_path / "stage-devcarry99"
    staged.mkdir()
    (staged / "part-00").write_text("wheels")
    parts = tmp_path / "parts"
    installer = workspace / ".devcarry99" / "bin" / "install.sh"
    installer.parent.mkdir(parents=True)
    installer.write_text(f'#!/bin/bash\nls "{parts}" > "{tmp_path}/installed"\n')
    env = {
        "SLEEPWAKE_STAGE_ROOT": str(tmp_path),
        "SLEEPWAKE_INSTALL_PARTS_DIR": str(parts),
        "PYTHONPATH": ROOT,  # tools.launcher, which ends the parked servers and the zygote host
        "PATH": f"{_python_first(tmp_path)}:{os.environ['PATH']}",
    }
    lock_dir = str(workspace.parent / "locks")
    host = subprocess.Popen(
        [sys.executable, "-m", "tools.launcher.zygote_host", "--lock_dir", lock_dir, "--idle_s", "0"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": ROOT},
        cwd="/",
    )
    try:
        assert zygote_host.await_host(lock_dir, 30), "the zygote host did not come up"
        code, out = _script(workspace, "start.sh", "rel release .devcarry99", "after matrix after 0", **env)
        assert code == 0, out
        code, out = _script(workspace, "collect.sh", "rel", "1", **env)
        assert code == 1, "it waits for the READY mark, not for the parts alone: " + out
        (staged / "READY").touch()
        code, out = _script(workspace, "collect.sh", "after", "50", **env)
        assert code == 0 and "collect.sh: after exit 0" in out, out
        code, out = _script(workspace, "collect.sh", "rel", "5", **env)
        assert code == 0 and "collect.sh: rel exit 0" in out, out
        assert (tmp_path / "installed").read_text().split() == ["part-00"]
        assert host.wait(timeout=30) == 0, "the old release's zygote host must be stopped before the install"
    finally:
        if host.poll() is None:
            host.kill()
