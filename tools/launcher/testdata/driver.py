"""Test driver: starts a VllmServer running the fake server, prints its PIDs, then waits to be killed.

argv: CONFIG_JSON PID_FILE. Prints one JSON line {"pids": [...], "supervisor": N}.
"""

import json
import signal
import sys

from tools.launcher import testing
from tools.launcher.config import ServerConfig
from tools.launcher.nvml import FakeNvml
from tools.launcher.server import VllmServer

server = VllmServer(ServerConfig(**json.loads(sys.argv[1])), nvml=FakeNvml(),
                    command_factory=testing.fake_command(pid_file=sys.argv[2]))
server.start()
print(json.dumps({"pids": server.pids(), "supervisor": server._sup.pid}), flush=True)
while True:
    signal.pause()
