"""Test driver: starts a VllmServer running the stub server, prints its PIDs, then waits to be killed.

argv: CONFIG_JSON PID_FILE [module] [linger]. With "module" the stub runs as `python -m stub_api_server`
(so a zygote can fork it; the driver's environment must make it importable, see
testing.module_environ). With "linger" the driver then forks a copy of itself that holds every
descriptor it holds (the control pipe's write end too) and outlives it.
Prints one JSON line {"pids": [...], "supervisor": N, "start_mode": "zygote"|"plain", "linger": N}.
"""

import json
import os
import signal
import sys

from tools.launcher.config import ServerConfig
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.server import VllmServer
from tools.launcher.unit import testing

as_module = "module" in sys.argv[3:]
server = VllmServer(
    ServerConfig(**json.loads(sys.argv[1])),
    nvml=FakeNvml(),
    command_factory=testing.stub_command(pid_file=sys.argv[2], as_module=as_module),
    environ={k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"},
)
server.start()
linger = os.fork() if "linger" in sys.argv[3:] else None
if linger == 0:
    while True:
        signal.pause()
print(
    json.dumps(
        {"pids": server.pids(), "supervisor": server._sup.pid, "start_mode": server.start_mode, "linger": linger}
    ),
    flush=True,
)
while True:
    signal.pause()
