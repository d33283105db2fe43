"""HostedDoor: tools/launcher/door_host.py in a child process on the engine tier's engines, for a test to
drive over HTTP with the GPU tier's SleepWakeClient.

The child builds its door through tests/engine/lib/door_engines.py (the fake worker, vLLM's real LLM or
AsyncLLM) and serves on a loopback port; `start` returns once GET /health answers 200, or raises with the
tail of the child's log. The child runs in a session of its own so that `stop` ends it and whatever it
forked (AsyncLLM's engine process) even when it does not shut down cleanly.
"""

import os
import signal
import socket
import subprocess
import sys
import time

from tests.sleep_wake.lib import client as http_client
from tests.sleep_wake.lib import thresholds

FACTORY = "tests.engine.lib.door_engines:build"
# Importing vLLM and building the engine in the child: seconds on an idle host, much longer on a loaded one.
START_S = 300.0
STOP_S = 30.0
POLL_S = 0.1
LOG_TAIL = 4000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HostedDoor:
    def __init__(self, door: str, model_dir: str, log_path: str) -> None:
        self.door = door
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.argv = [
            sys.executable,
            "-m",
            "tools.launcher.door_host",
            "--door",
            door,
            "--engine_factory",
            FACTORY,
            # The GPU cells' server flags that the door host reads itself, and a model on disk.
            "--model",
            model_dir,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enable-sleep-mode",
            "--enable-prompt-tokens-details",
        ]
        self.proc: subprocess.Popen | None = None
        self.client = http_client.SleepWakeClient(self.url, timeout_s=thresholds.get("request_completion_s_max"))

    def start(self) -> "HostedDoor":
        # The child imports this checkout's tools/ and tests/ (and a release's overlay) as this process does.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + START_S
        while not self.client.health():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the {self.door} door host exited with {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {self.door} door host did not answer /health within {START_S:g} s: {self.log_tail()}"
                )
            time.sleep(POLL_S)
        return self

    def log_tail(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read()[-LOG_TAIL:].decode(errors="replace")

    def stop(self) -> None:
        """SIGTERM (uvicorn's shutdown, then the door's), and SIGKILL to the child's session if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session this child leads: it and what it forked
        except ProcessLookupError:
            pass
        self.proc.wait(STOP_S)
