"""The vllm_server binary with the stub server (testdata/stub_api_server.py) in place of vLLM and a fake NVML.

Takes the binary's flags. STUB_SERVER_MODE picks the stub's mode (ok, never_healthy, ...) and every
process it creates is recorded in STUB_SERVER_PID_FILE; the teardown grace is short.
"""

import os

from tools.launcher import vllm_server
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.server import VllmServer
from tools.launcher.unit import testing


def stub_server(config, lease):
    config.grace_s = 0.5
    return VllmServer(
        config,
        lease=lease,
        nvml=FakeNvml(),
        command_factory=testing.stub_command(
            os.environ["STUB_SERVER_MODE"], pid_file=os.environ["STUB_SERVER_PID_FILE"]
        ),
    )


if __name__ == "__main__":
    vllm_server.run(make_server=stub_server)
