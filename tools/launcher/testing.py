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


def fake_command(mode: str = "ok", runner_line: str = "env", pid_file: str | None = None,
                 fixed_port: int | None = None):
    """A command_factory running testdata/fake_server.py; fixed_port ignores the port it is given."""
    def factory(config: ServerConfig, port: int) -> list[str]:
        argv = [sys.executable, FAKE_SERVER, "--host", config.host, "--port", str(fixed_port or port),
                "--mode", mode, "--runner_line", runner_line]
        return argv + (["--pid_file", pid_file] if pid_file else [])
    return factory


def fast_config(tmp_path, **overrides) -> ServerConfig:
    """A config whose every wait is short, with its dirs under tmp_path."""
    model = os.path.join(str(tmp_path), "model")
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w") as f:
        f.write("{}")  # a checkpoint dir is one holding config.json
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
