"""Helpers for the launcher's CPU tests: the fake server's command and process-survival checks."""

from __future__ import annotations

import os
import signal
import sys

from tools.launcher import process_tree
from tools.launcher.config import ServerConfig

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
FAKE_SERVER = os.path.join(TESTDATA, "fake_server.py")
DRIVER = os.path.join(TESTDATA, "driver.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


FAKE_MODULE = "fake_server"  # testdata/fake_server.py as a module, with TESTDATA on PYTHONPATH


def fake_command(mode: str = "ok", runner_line: str = "env", pid_file: str | None = None,
                 fixed_port: int | None = None, as_module: bool = False):
    """A command_factory running testdata/fake_server.py; fixed_port ignores the port it is given.
    as_module: `python -m fake_server` (what a zygote can fork; needs module_environ)."""
    def factory(config: ServerConfig, port: int) -> list[str]:
        program = ["-m", FAKE_MODULE] if as_module else [FAKE_SERVER]
        argv = [sys.executable] + program + ["--host", config.host, "--port", str(fixed_port or port),
                                             "--mode", mode, "--runner_line", runner_line]
        return argv + (["--pid_file", pid_file] if pid_file else [])
    return factory


def module_environ(inside_bazel_test: bool = False, **extra) -> dict:
    """A server base environment in which `python -m fake_server` imports: TESTDATA on PYTHONPATH, no
    CUDA_VISIBLE_DEVICES (the fake NVML has one GPU). inside_bazel_test decides whether the launcher
    may start a zygote host itself (zygote_client.inside_bazel_test)."""
    env = {k: v for k, v in python_env().items() if k not in ("CUDA_VISIBLE_DEVICES", "TEST_TMPDIR")}
    env["PYTHONPATH"] = os.pathsep.join([TESTDATA, env["PYTHONPATH"]])
    if inside_bazel_test:
        env["TEST_TMPDIR"] = os.environ.get("TEST_TMPDIR") or "/tmp"
    env.update(extra)
    return env


def fast_config(tmp_path, **overrides) -> ServerConfig:
    """A config whose every wait is short, with its dirs under tmp_path."""
    model = os.path.join(str(tmp_path), "model")
    os.makedirs(model, exist_ok=True)
    values = dict(model=model, log_dir=os.path.join(str(tmp_path), "logs"),
                  cache_dir=os.path.join(str(tmp_path), "cache"), lock_dir=os.path.join(str(tmp_path), "locks"),
                  grace_s=0.5, startup_timeout_s=20.0, release_timeout_s=1.0, lease_timeout_s=5.0)
    values.update(overrides)
    return ServerConfig(**values)


def recorded_pids(pid_file: str) -> dict[int, int]:
    """pid -> start time of every process the fake server created."""
    try:
        with open(pid_file) as f:
            return {int(pid): int(start) for pid, start in (line.split() for line in f if line.strip())}
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
