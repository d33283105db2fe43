"""Remote execution on a real REAPI engine, end to end, on loopback.

Starts PostgreSQL and BuildGrid with a fresh database, and three stand-in workers: a CPU pool
(gpu=none) and two GPU pools (gpu=nvidia) that differ only in their vLLM build. A probe workspace,
configured with this repository's own .bazelrc (--config=remote), platforms and pool rule, runs a CPU
test and a GPU-tagged test through the engine with a nested Bazel. Each test prints which worker ran
it into its test.log. This proves that exec_properties route actions to the right pool, that results
come back from the engine's cache after `bazel clean --expunge`, that two vLLM builds never share a
result, and that a property the engine does not know is rejected rather than run somewhere.
"""

import os
import pathlib
import re
import shutil
import subprocess
import uuid

import pytest

from tools.nested_bazel import bazel_command, fill, run_bazel, stub_repositories
from tools.remote_exec.engine import buildgrid, processes
from tools.remote_exec.engine.local_engine import local_engine

# Not resolved: the runfiles tree holds the stub repositories beside this workspace (data deps).
HERE = pathlib.Path(__file__).absolute().parent
REPO = HERE.parent.parent.parent

CPU_POOL = {"OSFamily": "Linux", "gpu": "none"}
_GPU = {"OSFamily": "Linux", "gpu": "nvidia", "gpu_model": "Stand-in GPU", "cuda_driver": "0.0-test"}
GPU_POOL_A = {**_GPU, "vllm_build": "0.26.0+build-a"}
GPU_POOL_B = {**_GPU, "vllm_build": "0.26.0+build-b"}
WORKERS = [
    buildgrid.Worker("cpu-pool", CPU_POOL),
    buildgrid.Worker("gpu-a", GPU_POOL_A),
    buildgrid.Worker("gpu-b", GPU_POOL_B),
]

CPU_PROBE, GPU_PROBE = "//:cpu_probe_test", "//:gpu_probe_test"
# Copied from this repository into the probe workspace: what --config=remote really is.
_COPIED = [
    ".bazelrc",
    "platforms/BUILD.bazel",
    "platforms/exec_properties.bzl",
    "third_party/remote_exec/pool.bzl",
    "third_party/remote_exec/BUILD.bazel",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("engine")
    # Under Bazel the service logs land in the test's outputs.zip (engine/...).
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    log_dir = pathlib.Path(outputs) / "engine" if outputs else workdir / "logs"
    try:
        with local_engine(workdir, WORKERS, log_dir) as url:
            yield url
    except processes.ServiceError as e:
        pytest.fail(str(e), pytrace=False)


class Probe:
    """The probe workspace and its nested Bazel, pointed at the engine through user.bazelrc."""

    def __init__(self, ws: pathlib.Path, output_root: pathlib.Path):
        self.ws, self.output_root = ws, output_root

    def bazel(self, *args: str):
        return run_bazel(self.ws, self.output_root, *args)

    def test(self, salt: str, gpu_pool: dict, *targets: str):
        """`bazel test --config=remote` as the GPU pool's client; salt makes the actions new to the engine."""
        pool = ",".join(f"{k}={v}" for k, v in gpu_pool.items() if k not in ("OSFamily", "gpu"))
        return self.bazel(
            "test",
            "--config=remote",
            "--test_tag_filters=",
            "--color=no",
            "--curses=no",
            "--test_output=errors",
            f"--test_env=PROBE_SALT={salt}",
            f"--repo_env=SLEEPWAKE_GPU_POOL_PROPERTIES={pool}",
            *targets,
        )

    def executor(self, target: str) -> str:
        """Which worker ran target's test, from the line probe_test.py printed into its test.log."""
        log = self.ws / "bazel-testlogs" / target.replace("//", "").replace(":", "/").lstrip("/") / "test.log"
        found = re.search(r"^executor: (.*)$", log.read_text(), re.M)
        assert found, f"{log} has no executor line:\n{log.read_text()[-2000:]}"
        return found.group(1)


@pytest.fixture(scope="module")
def probe(request, tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    src = HERE / "testdata" / "workspace"
    (ws / "WORKSPACE").write_text(fill(src / "WORKSPACE.in", STUBS=stub_repositories(REPO)))
    (ws / "BUILD").write_text((src / "BUILD.in").read_text())
    shutil.copy(src / "probe_test.py", ws / "probe_test.py")
    for path in _COPIED:
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, ws / path)
    (ws / ".bazelversion").write_text("4\n")
    probe = Probe(ws, tmp_path_factory.mktemp("bazel_root"))
    # The nested Bazel server starts while the engine does; neither needs the other yet.
    warm_up = subprocess.Popen(
        bazel_command(probe.output_root, "info", "release"),
        cwd=ws,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        engine = request.getfixturevalue("engine")
        warm_up.wait(timeout=600)
        # As docs/remote.md tells a CI machine to: the executor and instance in the git-ignored user.bazelrc.
        (ws / "user.bazelrc").write_text(
            f"build:remote --remote_executor={engine}\nbuild:remote --remote_instance_name={buildgrid.INSTANCE}\n"
        )
        yield probe
    finally:
        warm_up.wait(timeout=600)
        probe.bazel("shutdown")


@pytest.fixture(scope="module")
def first_run(probe):
    """The CPU and GPU probes run once on the engine (pool A), with actions it has never seen."""
    salt = uuid.uuid4().hex
    return salt, _ok(probe.test(salt, GPU_POOL_A, CPU_PROBE, GPU_PROBE), "first remote run")


def _ok(result, what):
    assert result.returncode == 0, f"{what} failed (exit {result.returncode}):\n{result.stdout[-5000:]}"
    return result.stdout


def _executed_remotely(output: str) -> int:
    """Processes the engine executed in this build, from Bazel's `N processes: ...` line."""
    found = re.search(r"\b(\d+) remote[,.]", output)
    return int(found.group(1)) if found else 0


def _ran_here(output: str) -> list[str]:
    return re.findall(r"\b\d+ (?:local|linux-sandbox|processwrapper-sandbox|worker)\b", output)


def test_cpu_and_gpu_actions_run_on_the_pools_their_properties_name(probe, first_run):
    _, out = first_run
    assert probe.executor(CPU_PROBE) == "cpu-pool"
    assert probe.executor(GPU_PROBE) == "gpu-a"
    # Two test actions, and the two test.xml actions after them.
    assert _executed_remotely(out) >= 2, f"expected the tests to run remotely:\n{out[-3000:]}"
    assert not _ran_here(out), f"some spawns ran on the client: {_ran_here(out)}\n{out[-3000:]}"


def test_results_come_back_from_the_engine_after_expunge(probe, first_run):
    salt, _ = first_run
    _ok(probe.bazel("clean", "--expunge"), "bazel clean --expunge")
    out = _ok(probe.test(salt, GPU_POOL_A, CPU_PROBE, GPU_PROBE), "run after expunge")
    for target in (CPU_PROBE, GPU_PROBE):
        assert re.search(re.escape(target) + r"\s+\(cached\) PASSED", out), (
            f"{target} was not served from the engine's cache after expunge:\n{out[-3000:]}"
        )
    hits = re.search(r"(\d+) remote cache hit", out)
    assert hits and int(hits.group(1)) >= 2, f"expected >= 2 remote cache hits:\n{out[-3000:]}"
    assert _executed_remotely(out) == 0, f"nothing should have executed again:\n{out[-3000:]}"
    # The cached logs are the ones the pools wrote.
    assert (probe.executor(CPU_PROBE), probe.executor(GPU_PROBE)) == ("cpu-pool", "gpu-a")


def test_another_vllm_build_executes_again_and_never_shares_a_result(probe):
    salt = uuid.uuid4().hex
    _ok(probe.test(salt, GPU_POOL_A, GPU_PROBE), "run on build a")
    assert probe.executor(GPU_PROBE) == "gpu-a"

    out = _ok(probe.test(salt, GPU_POOL_B, GPU_PROBE), "run on build b")
    assert not re.search(r"\(cached\) PASSED", out), f"build b was served build a's result:\n{out[-3000:]}"
    assert _executed_remotely(out) >= 1, f"build b's test did not execute:\n{out[-3000:]}"
    assert probe.executor(GPU_PROBE) == "gpu-b"

    out = _ok(probe.test(salt, GPU_POOL_A, GPU_PROBE), "run on build a again")
    assert re.search(re.escape(GPU_PROBE) + r"\s+\(cached\) PASSED", out), (
        f"build a's result is gone after build b ran:\n{out[-3000:]}"
    )
    assert probe.executor(GPU_PROBE) == "gpu-a"


def test_an_unregistered_property_is_rejected_with_its_name(probe):
    result = probe.test(uuid.uuid4().hex, GPU_POOL_A, "//:unknown_property_probe_test")
    assert result.returncode != 0, f"an action with an unknown property ran:\n{result.stdout[-3000:]}"
    assert re.search(r"FAILED_PRECONDITION: Unregistered platform property \[unknown_key=", result.stdout), (
        f"the rejection does not name the property:\n{result.stdout[-3000:]}"
    )
