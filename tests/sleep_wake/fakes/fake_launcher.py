"""Pytest plugin that swaps the launcher for FakeVllm: runs the GPU test classes on a CPU.

Use: python -m pytest -p tests.sleep_wake.fakes.fake_launcher tests/sleep_wake/test_*.py
(with SLEEPWAKE_RUNNER / SLEEPWAKE_EXECUTION_MODE set). It checks the test classes' own logic against
vLLM 0.26.0's sleep semantics as fake_vllm models them; it proves nothing about vLLM itself.
The conftest imports the launcher inside its fixtures, so registering these modules here wins.
SLEEPWAKE_FAKE_BUGS (comma-separated, see fake_vllm.FakeVllm) re-creates known vLLM defects;
SLEEPWAKE_FAKE_TOKEN_DELAY_S sets the streaming decode pace.
"""

import dataclasses
import os
import sys
import types

from tests.sleep_wake.fakes.fake_vllm import FakeVllm


def _new_fake() -> FakeVllm:
    bugs = [b for b in os.environ.get("SLEEPWAKE_FAKE_BUGS", "").split(",") if b]
    # Streams decode at a visible pace so a sleep can land mid-stream (race and abort tests).
    delay = float(os.environ.get("SLEEPWAKE_FAKE_TOKEN_DELAY_S", "0.002"))
    return FakeVllm(token_delay_s=delay, bugs=bugs).start()


@dataclasses.dataclass
class FakeServerConfig:
    runner: str
    execution_mode: str
    log_dir: str

    @classmethod
    def from_env(cls, log_dir: str) -> "FakeServerConfig":
        return cls(os.environ["SLEEPWAKE_RUNNER"], os.environ["SLEEPWAKE_EXECUTION_MODE"], log_dir)


class FakeVllmServer:
    def __init__(self, config, lease: bool = True):
        self.config = config
        self.log_path = os.path.join(config.log_dir, "server.log")
        self.command = ["fake_vllm"]
        self._fake = None

    def __enter__(self):
        self._fake = _new_fake()
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(f"fake vLLM at {self._fake.url}\n")
        return self

    def __exit__(self, *exc):
        self._fake.stop()

    @property
    def url(self) -> str:
        return self._fake.url

    @property
    def fake(self) -> FakeVllm:
        return self._fake

    def pids(self) -> list[int]:
        return [os.getpid()]

    def gpu_bytes(self) -> int:
        return self._fake.gpu_bytes()

    def device_used_bytes(self) -> int:
        return self._fake.gpu_bytes()

    def restart(self) -> None:
        self._fake.stop()
        self._fake = _new_fake()


class ServerStartError(RuntimeError):
    pass


class ServerReleaseError(RuntimeError):
    pass


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


sys.modules["tools.launcher.config"] = _module("tools.launcher.config", ServerConfig=FakeServerConfig)
sys.modules["tools.launcher.server"] = _module(
    "tools.launcher.server", VllmServer=FakeVllmServer, ServerStartError=ServerStartError,
    ServerReleaseError=ServerReleaseError)
