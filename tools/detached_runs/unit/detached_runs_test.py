"""start.sh, runs.sh, save.sh and collect.sh, with fakes of tools/setup.sh and tools/run_matrix.sh in a
scratch workspace: each fake writes a record and a test.xml naming its run and appends its line to the run
history (unless told to fail first), and exits as its arguments say."""

import io
import os
import shutil
import signal
import subprocess
import tarfile

import pytest

SCRIPTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tools/detached_runs
SCRIPTS = ("start.sh", "runs.sh", "save.sh", "collect.sh", "running_chain.sh")
REPO = os.path.dirname(os.path.dirname(SCRIPTS_DIR))
# The Python that save.sh runs (keep_measurements, what it reads with and the spec that names the fake
# tier), at their paths in the repository.
MODULES = (
    "tools/__init__.py",
    "tools/matrix.py",
    "tools/matrix.bzl",
    "tools/results/__init__.py",
    "tools/results/testlogs.py",
    "tools/detached_runs/__init__.py",
    "tools/detached_runs/keep_measurements.py",
    "tools/detached_runs/keep_mutant_verdicts.py",
)
# A fake main job: `NAME EXIT [WAIT_FOR_FILE]`; EXIT "early" fails before writing anything. It waits for
# WAIT_FOR_FILE when given, so a test holds a run going for as long as it needs, and leaves what
# run_matrix.sh leaves.
FAKE = """#!/bin/bash
name=$1 code=$2
if [[ -n "${3:-}" ]]; then until [[ -e $3 ]]; do sleep 0.1; done; fi
echo "fake run $name"
[[ $code == early ]] && exit 7
echo "{\\"run\\": \\"$name\\"}" > sleepwake-run.json
echo "{\\"run\\": \\"$name\\", \\"commit\\": \\"${SLEEPWAKE_COMMIT:-}\\"}" >> tools/bench/runs.jsonl
mkdir -p out/tests/sleep_wake/cell && echo "<testsuites name=\\"$name\\"/>" > out/tests/sleep_wake/cell/test.xml
echo "log of $name" > out/tests/sleep_wake/cell/test.log
# A rest cell's outputs as Bazel zips them, its server log beside its measurements.
mkdir -p out/tests/sleep_wake/cell/test.outputs
python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], 'w')
z.writestr('measurements.jsonl', sys.argv[2]); z.writestr('server.log', 'heavy'); z.close()" \\
  out/tests/sleep_wake/cell/test.outputs/outputs.zip "{\\"cell\\": \\"$name\\"}"
for cell in state_walk_mrv1_eager state_walk_fake_mrv1_eager; do
  mkdir -p out/tests/sleep_wake/$cell/shard_1_of_2/test.outputs
  echo "<testsuites name=\\"$name\\"/>" > out/tests/sleep_wake/$cell/shard_1_of_2/test.xml
  echo "{\\"run\\": \\"$name\\"}" > out/tests/sleep_wake/$cell/shard_1_of_2/test.outputs/measurements.jsonl
done
# A mutant target's outputs left unzipped (a host without `zip`), and one's zipped: each its row, an inner
# shard's report and pytest output beside a server log.
m=out/tests/mutants/mutant_a/test.outputs
mkdir -p $m/inner/shard-0 && echo "<testsuites/>" > out/tests/mutants/mutant_a/test.xml
echo "{\\"row\\": \\"$name\\"}" > $m/mutation_row.json
echo "<testsuites name=\\"inner $name\\"/>" > $m/inner/shard-0/junit.xml
echo "oracle fired" > $m/inner/shard-0/pytest.log && echo "heavy" > $m/inner/shard-0/server-0.log
mkdir -p out/tests/mutants/mutant_b/test.outputs && echo "<testsuites/>" > out/tests/mutants/mutant_b/test.xml
python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], 'w')
z.writestr('off_door_row.json', sys.argv[2]); z.writestr('inner/junit.xml', '<testsuites/>')
z.writestr('inner/server-0.log', 'heavy'); z.close()" \
  out/tests/mutants/mutant_b/test.outputs/outputs.zip "{\\"twin\\": \\"$name\\"}"
ln -sfn out bazel-testlogs
exit $code
"""


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "tools" / "detached_runs").mkdir(parents=True)
    for name in SCRIPTS:
        shutil.copy2(os.path.join(SCRIPTS_DIR, name), ws / "tools" / "detached_runs" / name)
    for path in MODULES:
        (ws / os.path.dirname(path)).mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(REPO, path), ws / path)
    for name in ("setup.sh", "run_matrix.sh"):
        (ws / "tools" / name).write_text(FAKE)
        (ws / "tools" / name).chmod(0o755)
    (ws / "tools" / "bench").mkdir()
    (ws / "tools" / "bench" / "runs.jsonl").write_text('{"run": "an earlier one"}\n')
    (tmp_path / "out").mkdir()
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
        GIT_CEILING_DIRECTORIES=str(workspace.parent),  # the scratch tree is no git checkout unless made one
    )
    env.update(more)
    return env


def _script(workspace, name, *args, **env):
    proc = subprocess.run(
        ["bash", str(workspace / "tools" / "detached_runs" / name), *args],
        env=_env(workspace, **env),
        cwd=workspace.parent / "out",  # collect.sh packs into the current directory by default
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _read(bundle: tarfile.TarFile, name: str) -> bytes:
    """The bytes of the regular file `name` in bundle."""
    member = bundle.extractfile(name)
    assert member is not None, f"{name} in the bundle is no regular file"
    return member.read()


def _member(workspace, run, path):
    with tarfile.open(workspace.parent / "out" / f"{run}.tgz") as bundle:
        return _read(bundle, f"{run}/{path}").decode()


def _members(workspace, run):
    with tarfile.open(workspace.parent / "out" / f"{run}.tgz") as bundle:
        return set(bundle.getnames())


def _bytes_of(workspace, run, path):
    with tarfile.open(workspace.parent / "out" / f"{run}.tgz") as bundle:
        return io.BytesIO(_read(bundle, f"{run}/{path}"))


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
        assert 'name="first"' in _read(xml, "tests/sleep_wake/cell/test.xml").decode()
    assert "fake run first" in _member(workspace, "first", "console.log")
    # A GPU walk shard's measurements (each step's time) come back; the fake tier's do not: not the GPU's.
    with tarfile.open(fileobj=_bytes_of(workspace, "first", "outputs.tgz")) as outputs:
        walk = "tests/sleep_wake/state_walk_mrv1_eager/shard_1_of_2/test.outputs/measurements.jsonl"
        assert _read(outputs, walk).decode().strip() == '{"run": "first"}'
        assert not [n for n in outputs.getnames() if "_fake_" in n], outputs.getnames()
    # Every GPU cell's measurements come back unzipped, where noise_floor reads them; not its server log,
    # nor the fake tier's.
    with tarfile.open(fileobj=_bytes_of(workspace, "first", "measurements.tgz")) as kept:
        files = sorted(n for n in kept.getnames() if kept.getmember(n).isfile())
        assert files == [
            "./tests/sleep_wake/cell/test.outputs/measurements.jsonl",
            "./tests/sleep_wake/state_walk_mrv1_eager/shard_1_of_2/test.outputs/measurements.jsonl",
        ], files
        assert _read(kept, files[0]).decode() == '{"cell": "first"}'
    # Each mutant target's verdict comes back unzipped, zipped by Bazel or not: its row, its inner reports and
    # pytest output; not its servers' logs.
    with tarfile.open(fileobj=_bytes_of(workspace, "first", "mutants.tgz")) as kept:
        files = sorted(n for n in kept.getnames() if kept.getmember(n).isfile())
        assert files == [
            "./tests/mutants/mutant_a/test.outputs/inner/shard-0/junit.xml",
            "./tests/mutants/mutant_a/test.outputs/inner/shard-0/pytest.log",
            "./tests/mutants/mutant_a/test.outputs/mutation_row.json",
            "./tests/mutants/mutant_b/test.outputs/inner/junit.xml",
            "./tests/mutants/mutant_b/test.outputs/off_door_row.json",
        ], files
        assert _read(kept, files[2]).decode().strip() == '{"row": "first"}'
        assert _read(kept, files[4]).decode() == '{"twin": "first"}'
    # Each run's own line of the run history comes back beside it, not the earlier lines.
    assert _member(workspace, "first", "runs.jsonl") == '{"run": "first", "commit": ""}\n'
    assert _member(workspace, "second", "runs.jsonl") == '{"run": "second", "commit": ""}\n'


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
        (["r release .staged"], "the mode is setup or matrix"),
        ([], "no run given"),
    ]:
        code, out = _script(workspace, "start.sh", *specs)
        assert code == 2 and says in out, (specs, out)
    assert not (workspace.parent / "runs" / "runs.pid").exists()


def test_the_runs_name_the_callers_commit_for_the_history_line(workspace):
    """The copy the runs go in is no git checkout: start.sh names its own tree's commit (SLEEPWAKE_COMMIT),
    which run_matrix.sh writes into the main job's line; a commit given by the caller wins."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(workspace)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    head = subprocess.run(git + ["rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    code, out = _script(workspace, "start.sh", "one matrix one 0", GIT_CEILING_DIRECTORIES="")
    assert code == 0, out
    assert _script(workspace, "collect.sh", "one", "50")[0] == 0
    assert _member(workspace, "one", "runs.jsonl") == f'{{"run": "one", "commit": "{head}"}}\n'
    code, out = _script(workspace, "start.sh", "two matrix two 0", SLEEPWAKE_COMMIT="0123abc")
    assert code == 0 and _script(workspace, "collect.sh", "two", "50")[0] == 0, out
    assert _member(workspace, "two", "runs.jsonl") == '{"run": "two", "commit": "0123abc"}\n'


def test_collect_splits_the_bundle_for_a_transfer_that_limits_a_files_size(workspace):
    code, out = _script(workspace, "start.sh", "big matrix big 0")
    assert code == 0, out
    code, out = _script(workspace, "collect.sh", "big", "50", SLEEPWAKE_COLLECT_PART_BYTES="ten")
    assert code == 2 and "is not a number of bytes" in out, out
    code, out = _script(workspace, "collect.sh", "big", "50", SLEEPWAKE_COLLECT_PART_BYTES="500")
    assert code == 0, out
    out_dir = workspace.parent / "out"
    parts = sorted(out_dir.glob("big.tgz.*"), key=lambda p: int(p.suffix[1:]))
    assert len(parts) > 1 and not (out_dir / "big.tgz").exists() and all(p.stat().st_size <= 500 for p in parts)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as bundle:
        assert _read(bundle, "big/rc").decode().strip() == "0"
