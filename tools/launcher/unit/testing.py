"""Helpers for the launcher's CPU tests: the stub server's command and process-survival checks."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from typing import Any

from tools.launcher import process_tree
from tools.launcher.config import ServerConfig

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
STUB_SERVER = os.path.join(TESTDATA, "stub_api_server.py")
DRIVER = os.path.join(TESTDATA, "driver.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


STUB_MODULE = "stub_api_server"  # testdata/stub_api_server.py as a module, with TESTDATA on PYTHONPATH


def stub_command(
    mode: str = "ok",
    runner_line: str = "env",
    pid_file: str | None = None,
    fixed_port: int | None = None,
    as_module: bool = False,
    module: str = STUB_MODULE,
):
    """A command_factory running testdata/stub_api_server.py; fixed_port ignores the port it is given.
    as_module: `python -m module` (what a zygote can fork; needs module_environ, whose site holds module:
    stub_api_server or a copy)."""

    def factory(config: ServerConfig, port: int) -> list[str]:
        program = ["-m", module] if as_module else [STUB_SERVER]
        argv = (
            [sys.executable]
            + program
            + ["--host", config.host, "--port", str(fixed_port or port), "--mode", mode, "--runner_line", runner_line]
        )
        return argv + (["--pid_file", pid_file] if pid_file else [])

    return factory


def fake_site(tmp_path) -> str:
    """A copy of the stub server module, its heavy import and its preload, which a test may rewrite."""
    site = os.path.join(str(tmp_path), "fake_site")
    os.makedirs(site, exist_ok=True)
    for name in ("stub_api_server.py", "fake_heavy.py", "fake_preload.py"):
        shutil.copy(os.path.join(TESTDATA, name), os.path.join(site, name))
    return site


def module_environ(site: str = TESTDATA, test_tmpdir: str | None = None, **extra) -> dict:
    """A server base environment in which `python -m stub_api_server` imports from site, without
    CUDA_VISIBLE_DEVICES (the fake NVML has one GPU). test_tmpdir: as inside a Bazel test (where the
    launcher must not start a zygote host, and PYTHONPATH entries under it are per-server); None: as
    outside one."""
    env = {k: v for k, v in python_env().items() if k not in ("CUDA_VISIBLE_DEVICES", "TEST_TMPDIR")}
    env["PYTHONPATH"] = os.pathsep.join([site, env["PYTHONPATH"]])
    if test_tmpdir is not None:
        env["TEST_TMPDIR"] = test_tmpdir
    env.update(extra)
    return env


_PLUGIN_SOURCE = """import os


def register():
    print("fake plugin %s in %d: SLEEPWAKE_MUTANT=%s CUDA_VISIBLE_DEVICES=%s" % (
        __name__, os.getpid(), os.environ.get("SLEEPWAKE_MUTANT"), os.environ.get("CUDA_VISIBLE_DEVICES")),
        flush=True)
"""


def plugin_site(path: str, name: str = "fake_plugin") -> str:
    """A site dir whose `vllm.general_plugins` entry point prints the variables a server applies for
    itself, as the mutant plugin's site dir (tests/mutants/site_dir.py) carries sleepwake_mutants."""
    os.makedirs(os.path.join(path, "%s-0.1.dist-info" % name))
    with open(os.path.join(path, name + ".py"), "w") as f:
        f.write(_PLUGIN_SOURCE)
    for file_name, text in (
        ("METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: 0.1\n" % name),
        ("entry_points.txt", "[vllm.general_plugins]\n%s = %s:register\n" % (name, name)),
    ):
        with open(os.path.join(path, "%s-0.1.dist-info" % name, file_name), "w") as f:
            f.write(text)
    return path


def imports(log_path: str) -> list[int]:
    """PIDs of the processes that imported fake_heavy (STUB_SERVER_IMPORT_LOG)."""
    try:
        with open(log_path) as f:
            return [int(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def fast_config(tmp_path, **overrides) -> ServerConfig:
    """A config whose every wait is short, with its dirs under tmp_path."""
    model = os.path.join(str(tmp_path), "model")
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w") as f:
        f.write("{}")  # a checkpoint dir is one holding config.json
    values: dict[str, Any] = dict(
        model=model,
        log_dir=os.path.join(str(tmp_path), "logs"),
        cache_dir=os.path.join(str(tmp_path), "cache"),
        lock_dir=os.path.join(str(tmp_path), "locks"),
        grace_s=0.5,
        startup_timeout_s=20.0,
        release_timeout_s=1.0,
        lease_timeout_s=5.0,
    )
    values.update(overrides)
    return ServerConfig(**values)


def recorded_pids(pid_file: str) -> dict[int, float]:
    """pid -> start time of every process the stub server created."""
    try:
        with open(pid_file) as f:
            return {int(pid): float(start) for pid, start in (line.split() for line in f if line.strip())}
    except FileNotFoundError:
        return {}


def python_env() -> dict:
    """The environment for a child Python that imports tools.launcher."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def survivors_after(snap: dict, timeout_s: float = 10.0) -> list[int]:
    """PIDs of snap (pid -> start time) still alive after timeout_s; they are SIGKILLed so that a
    failing test leaves nothing behind."""
    left = process_tree.wait_gone(snap, timeout_s)
    process_tree.signal_all(left, signal.SIGKILL)
    return sorted(left)
