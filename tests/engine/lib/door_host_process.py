"""DoorHostProcess: tools/launcher/door_host.py on the engine tier's engines, started and stopped by the launcher
as the GPU tier starts its servers (tools/launcher/server.py VllmServer with ServerConfig.front_door), for a
test to drive over HTTP with the GPU tier's SleepWakeClient.

The door host builds its door through tests/engine/lib/door_host_engines.py (the fake worker, vLLM's real LLM or
AsyncLLM), passed as the server flag --engine_factory; `start` returns once GET /health answers 200, or
raises the launcher's error with the tail of the log. The launcher's supervisor tears down the door host
and what it forked (AsyncLLM's engine process) at `stop`, as it does a vLLM server's tree.

The door hosts are forked from a zygote (DoorZygote), as the GPU tier's servers are, through a host that the
test process starts for itself and that dies with it.
"""

import os
import sys

from tests.core import client as http_client
from tests.core import thresholds
from tools.launcher import config as launcher_config
from tools.launcher import zygote_client
from tools.launcher.config import ServerConfig
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.server import VllmServer, log_tail

FACTORY = "tests.engine.lib.door_host_engines:build"
# Importing vLLM and building the engine in the child: seconds on an idle host, much longer on a loaded one.
START_S = 300.0
LOG_TAIL_LINES = 60
# What a zygote for the door hosts imports after tools.launcher.door_host: the engine tier's platform pin
# first (before any of vLLM), then what the GPU tier's door host preloads. Not the factory: it imports absl
# (through tools/checkpoints), whose import reads TEST_TMPDIR, a per-test variable the zygote refuses.
ZYGOTE_PRELOADS = ("tests.engine.lib.cpu_vllm",) + launcher_config.VLLM_PRELOAD + launcher_config.DOOR_PRELOAD


class DoorZygote:
    """A zygote host private to this test process (zygote_client.private_host), whose zygote imports vLLM
    once for every door host the process starts, where a plain start imports it anew (docs/design.md).
    The door hosts share its cache dir, which the zygote is keyed on with the rest of their environment."""

    def __init__(self, root: str) -> None:
        self.lock_dir = os.path.join(root, "locks")
        self.cache_dir = os.path.join(root, "cache")
        self._host = zygote_client.private_host(self.lock_dir)

    def __enter__(self) -> "DoorZygote":
        self._host.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._host.__exit__(*exc)


class DoorHostProcess:
    def __init__(self, door: str, model_dir: str, log_dir: str, zygote: DoorZygote) -> None:
        self.door = door
        self.config = ServerConfig(
            model=model_dir,
            front_door=door,
            server_args=["--engine_factory", FACTORY],
            # zygote, not auto: a door host that cannot be forked is an error with the zygote's reason.
            start_mode="zygote",
            lock_dir=zygote.lock_dir,
            zygote_preload=",".join(ZYGOTE_PRELOADS),
            startup_timeout_s=START_S,
            log_dir=log_dir,
            cache_dir=zygote.cache_dir,
        )
        self.server: VllmServer | None = None
        self.client: http_client.SleepWakeClient | None = None

    @property
    def url(self) -> str:
        return self.server.url if self.server else ""

    @property
    def log_path(self) -> str:
        return self.server.log_path if self.server else ""

    def start(self) -> "DoorHostProcess":
        # The door host imports this checkout's tools/ and tests/ (and a release's overlay) as this process does.
        # The engine tier hides CUDA with an empty CUDA_VISIBLE_DEVICES, which the launcher reads as a GPU
        # cell given no GPU; its fake NVML has one, and the factory pins vLLM's CPU platform before vLLM loads.
        environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.server = VllmServer(self.config, nvml=FakeNvml(), environ=environ)
        self.server.start()
        self.client = http_client.SleepWakeClient(self.url, timeout_s=thresholds.get("request_completion_s_max"))
        return self

    def log_tail(self) -> str:
        return log_tail(self.log_path, LOG_TAIL_LINES) if self.log_path else ""

    def stop(self) -> None:
        """The launcher's stop: SIGTERM to the door host (uvicorn's shutdown, then the door's), SIGKILL to
        what is left of its tree after the grace."""
        if self.server is not None:
            self.server.stop()
