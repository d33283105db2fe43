"""start.sh, runs.sh, save.sh and collect.sh, with fakes of tools/setup.sh and tools/run_matrix.sh in a
scratch workspace: each fake writes a record and a test.xml naming its run (unless told to fail first),
and exits as its arguments say."""

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile

import pytest

from tools.launcher import zygote_host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ("start.sh", "runs.sh", "save.sh", "collect.sh", "running_chain.sh")
# A fake main job: `NAME EXIT [WAIT_FOR_FILE]`; EXIT "early" fails before writing anything. It waits for
# WAIT_FOR_FILE when given, so a test holds a run going for as long as it needs, and leaves what
# run_matrix.sh leaves.
FAKE = """#!/bin/bash
name=$1 code=$2
if [[ -n "${3:-}" ]]; then until [[ -e $3 ]]; do sleep 0.1; done; fi
echo "fake run $name"
[[ $code == early ]] && exit 7
echo "{\\"run\\": \\"$name\\"}" > sleepwake-run.json
mkdir -p out/tests/sleep_wake/cell && echo "<testsuites name=\\"$name\\"/>" > out/tests/sleep_wake/cell/test.xml
echo "log of $name" > out/tests/sleep_wake/cell/test.log
for cell in state_walk_mrv1_eager state_walk_fake_mrv1_eager; do
  mkdir -p out/tests/sleep_wake/$cell/shard_1_of_2/test.outputs
  echo "{\\"run\\": \\"$name\\"}" > out/tests/sleep_wake/$cell/shard_1_of_2/test.outputs/measurements.jsonl
done
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
    yield ws
    # A test that failed halfway must not leave its chain running.
    pid_file = tmp_path / "runs" / "runs.pid"
    if pid_file.exists():
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


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


def _member(workspace, run, path):
    with tarfile.open(workspace.parent / "out" / f"{run}.tgz") as bundle:
        return bundle.extractfile(f"{run}/{path}").read().decode()


def _members(workspace, run):
    with tarfile.open(workspace.parent / "out" / f"{run}.tgz") as bundle:
        return set(bundle.getnames())


def _bytes_of(workspace, run, path):
    with tarfile.open(workspace.parent / "out" / f"{run}.tgz") as bundle:
        return io.BytesIO(bundle.extractfile(f"{run}/{path}").read())


def test_runs_one_after_another_each_saved_before_the_next_overwrites_it(workspace):
    code, out = _script(workspace, "start.sh", "first setup first 0", "second matrix second 3")
    assert code == 0, out
    code, out = _script(workspace, "collect.sh", "second", "50")
    assert code == 0 and "collect.sh: second exit 3" in out, out
    code, out = _script(workspace, "collect.sh", "first", "5")
    assert code == 0 and "collect.sh: first exit 0" in out, out
    assert _member(workspace, "first", "sleepwake-run.json").strip() == '{"run": "first"}'
    assert _member(workspace, "second", "sleepwake-run.json").strip() == '{"run": "second"}'
    assert _member(workspace, "second", "rc").strip() == "3"
    with tarfile.open(fileobj=_bytes_of(workspace, "first", "xml.tgz")) as xml:
        assert 'name="first"' in xml.extractfile("tests/sleep_wake/cell/test.xml").read().decode()
    assert "fake run first" in _member(workspace, "first", "console.log")
    # A GPU walk shard's measurements (each step's time) come back; the fake tier's do not: not the GPU's.
    with tarfile.open(fileobj=_bytes_of(workspace, "first", "outputs.tgz")) as outputs:
        walk = "tests/sleep_wake/state_walk_mrv1_eager/shard_1_of_2/test.outputs/measurements.jsonl"
        assert outputs.extractfile(walk).read().decode().strip() == '{"run": "first"}'
        assert not [n for n in outputs.getnames() if "_fake_" in n], outputs.getnames()
    assert len(os.listdir(workspace.parent / "out")) <= 8, "a device call brings back at most 8 files"


def test_a_run_that_stops_early_brings_back_nothing_of_the_run_before(workspace):
    code, out = _script(workspace, "start.sh", "good matrix good 0", "bad matrix bad early")
    assert code == 0, out
    code, out = _script(workspace, "collect.sh", "bad", "50")
    assert code == 0 and "collect.sh: bad exit 7" in out, out
    names = _members(workspace, "bad")
    assert "bad/sleepwake-run.json" not in names, "the good run's record passed for the bad run's"
    with tarfile.open(fileobj=_bytes_of(workspace, "bad", "xml.tgz")) as xml:
        assert xml.getnames() == [], "the good run's test.xml passed for the bad run's"


def test_runs_go_in_a_copy_that_a_new_copy_of_the_callers_tree_leaves_alone(workspace):
    """A device call copies the caller's tree over the one it finds; a run analysing meanwhile found files
    missing. The runs use a copy of their own: replacing the workspace's main job under a queued run
    changes nothing, and nothing a run writes lands in the workspace."""
    go = workspace.parent / "go"
    code, out = _script(workspace, "start.sh", f"first matrix first 0 {go}", "second matrix second 0")
    assert code == 0, out
    (workspace / "tools" / "run_matrix.sh").write_text("#!/bin/bash\necho replaced; exit 9\n")
    go.touch()
    code, out = _script(workspace, "collect.sh", "second", "50")
    assert code == 0 and "collect.sh: second exit 0" in out, out
    assert not (workspace / "sleepwake-run.json").exists(), "a run wrote into the caller's tree"


def test_the_next_copy_drops_what_the_tree_lost_and_keeps_what_the_runs_made(workspace):
    """A file deleted from the caller's tree must not linger in the copy (Bazel globs it); what a run made
    there (user.bazelrc, Bazel's outputs) stays for the next chain."""
    extra = workspace / "tools" / "gone_test.py"
    extra.write_text("# deleted before the next chain\n")
    code, out = _script(workspace, "start.sh", "first matrix first 0")
    assert code == 0, out
    code, out = _script(workspace, "collect.sh", "first", "50")
    assert code == 0, out
    tree = workspace.parent / "runs" / ".tree"
    assert (tree / "tools" / "gone_test.py").exists(), out
    (tree / "user.bazelrc").write_text("build:gpu --repo_env=X=1\n")
    extra.unlink()
    code, out = _script(workspace, "start.sh", "second matrix second 0")
    assert code == 0, out
    code, out = _script(workspace, "collect.sh", "second", "50")
    assert code == 0 and "collect.sh: second exit 0" in out, out
    assert not (tree / "tools" / "gone_test.py").exists(), "a file the caller's tree lost is still in the copy"
    assert (tree / "user.bazelrc").exists(), "the copy dropped what an earlier run made there"


def test_start_refuses_a_runs_dir_inside_the_tree_it_copies(workspace):
    code, out = _script(workspace, "start.sh", "x matrix x 0", SLEEPWAKE_RUNS_DIR=str(workspace / "runs"))
    assert code == 2 and "lies in this tree" in out, out
    assert not (workspace / "runs").exists()


def test_collect_says_at_once_when_no_run_is_there(workspace):
    code, out = _script(workspace, "collect.sh", "never", "300")
    assert code == 3 and "none running" in out, out


def test_a_second_chain_is_refused_while_one_runs_and_collect_waits_for_a_run_still_going(workspace):
    go = workspace.parent / "go"
    code, out = _script(workspace, "start.sh", f"slow matrix slow 0 {go}")
    assert code == 0, out
    code, out = _script(workspace, "start.sh", "other matrix other 0")
    assert code == 2 and "still go" in out, out
    code, out = _script(workspace, "collect.sh", "slow", "1")
    assert code == 1 and "still runs" in out, out
    go.touch()
    code, out = _script(workspace, "collect.sh", "slow", "50")
    assert code == 0 and "collect.sh: slow exit 0" in out, out


def test_start_refuses_bad_specs_and_starts_nothing(workspace):
    for specs, says in [
        (["a matrix", "b bench"], '"b bench"'),
        (["../x matrix"], "NAME must be"),
        (["r release .nowhere"], "no .nowhere/bin/install.sh"),
        ([], "no run given"),
    ]:
        code, out = _script(workspace, "start.sh", *specs)
        assert code == 2 and says in out, (specs, out)
    assert not (workspace.parent / "runs" / "runs.pid").exists()


def test_collect_refuses_to_bring_back_more_files_than_a_call_can(workspace):
    code, out = _script(workspace, "start.sh", "big matrix big 0")
    assert code == 0, out
    out_dir = workspace.parent / "out"
    out_dir.mkdir()
    for i in range(8):
        (out_dir / f"earlier{i}").write_text("x")
    code, out = _script(workspace, "collect.sh", "big", "50")
    assert code == 2 and "more than the 8" in out, out


def _python_first(tmp_path):
    """A folder whose python3 is this test's interpreter, which has what tools.launcher imports."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (shim / "python3").chmod(0o755)
    return shim


def test_release_waits_for_its_parts_stops_the_zygote_host_then_installs(workspace, tmp_path):
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
        assert code == 1, out
        assert not (tmp_path / "installed").exists() and host.poll() is None, "it must wait for READY first"
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
