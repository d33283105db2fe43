"""The vllm_server binary with the fake server (testdata/fake_server.py) in place of vLLM and a fake NVML.

Takes the binary's flags. FAKE_SERVER_MODE picks the fake's mode (ok, never_healthy, ...) and every
process it creates is recorded in FAKE_SERVER_PID_FILE; the teardown grace is short.
"""

import os

from tools.launcher import vllm_server
from tools.launcher.nvml import FakeNvml
from tools.launcher.server import VllmServer
from tools.launcher.tests import testing


def fake_server(config, lease):
    config.grace_s = 0.5
    return VllmServer(config, lease=lease, nvml=FakeNvml(),
                      command_factory=testing.fake_command(os.environ["FAKE_SERVER_MODE"],
                                                           pid_file=os.environ["FAKE_SERVER_PID_FILE"]))


if __name__ == "__main__":
    vllm_server.run(make_server=fake_server)
