"""The CPU-use plugin on the CPU: --torch_threads reaches torch in the server's process, --cuda_sync sets
every device's scheduling flag through the driver before the worker's first step creates the context,
and a driver that refuses fails the start with what to do."""

import os
import subprocess
import sys

import pytest

from tools.launcher import config as config_lib
from tools.launcher.phase_plugin import sleepwake_cpu_use as plugin


class FakeDriver:
    """The driver calls the plugin makes, on `devices` devices; refuse: the call that fails. A device's
    flag is what was set last, its context active once init_device made it."""

    def __init__(self, devices=2, refuse=None):
        self.devices, self.refuse, self.calls, self.flags, self.active = devices, refuse, [], {}, False

    def _answer(self, name, *args):
        self.calls.append((name,) + args)
        return 101 if name == self.refuse else 0  # CUDA_ERROR_INVALID_DEVICE

    def cuInit(self, flags):
        return self._answer("cuInit", flags)

    def cuDeviceGetCount(self, count):
        count._obj.value = self.devices
        return self._answer("cuDeviceGetCount")

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = 100 + ordinal
        return self._answer("cuDeviceGet", ordinal)

    def cuDevicePrimaryCtxSetFlags(self, device, flags):
        self.flags[device.value] = flags
        return self._answer("cuDevicePrimaryCtxSetFlags", device.value, flags)

    def cuDevicePrimaryCtxGetState(self, device, flags, active):
        flags._obj.value, active._obj.value = self.flags.get(device.value, 0), int(self.active)
        return 0


def test_each_device_gets_the_flag_after_cuinit():
    driver = FakeDriver(devices=2)
    devices = plugin.set_cuda_sync(plugin.CUDA_SYNC_FLAGS["blocking"], driver)
    assert devices is not None and [d.value for d in devices] == [100, 101]
    assert driver.calls == [
        ("cuInit", 0),
        ("cuDeviceGetCount",),
        ("cuDeviceGet", 0),
        ("cuDevicePrimaryCtxSetFlags", 100, 4),
        ("cuDeviceGet", 1),
        ("cuDevicePrimaryCtxSetFlags", 101, 4),
    ]


def test_a_driver_that_refuses_the_flag_is_logged_and_the_server_keeps_cudas_default(capsys):
    driver = FakeDriver(refuse="cuDevicePrimaryCtxSetFlags")
    assert plugin.set_cuda_sync(plugin.CUDA_SYNC_FLAGS["yield"], driver) is None
    mark = plugin.MARK + '{"cuda_sync": 2, "refused": "cuDevicePrimaryCtxSetFlags", "result": 101'
    assert mark in capsys.readouterr().err


def test_the_flag_is_set_before_the_workers_first_step_and_shown_held_after_it(capsys):
    order = []
    driver = FakeDriver(devices=1)

    class Worker:
        def init_device(self):
            order.append(("init_device", len(driver.calls)))
            driver.active = True
            return "device"

    plugin.wrap_init_device(Worker, plugin.CUDA_SYNC_FLAGS["spin"], driver)
    plugin.wrap_init_device(Worker, plugin.CUDA_SYNC_FLAGS["spin"], driver)  # vLLM loads plugins twice
    assert Worker().init_device() == "device"
    assert order == [("init_device", 4)]  # after cuInit, the count, the device and its flag: once
    assert plugin.MARK + '{"cuda_sync": 1, "devices": [{"sched": 1, "active": true}]' in capsys.readouterr().err


# The two calls of torch's the plugin makes (torch.set_num_threads, torch.get_num_threads).
_FAKE_TORCH = """
_threads = 16
def set_num_threads(n):
    global _threads
    _threads = n
def get_num_threads():
    return _threads
"""


def test_torch_threads_reach_torch_in_the_servers_process(tmp_path):
    (tmp_path / "torch.py").write_text(_FAKE_TORCH)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([os.path.dirname(plugin.__file__), str(tmp_path)]),
        **{plugin.ENV_TORCH_THREADS: "3"},
    )
    code = "import sleepwake_cpu_use as p, torch; p.register(); print(torch.get_num_threads())"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == "3"


def test_without_either_setting_the_plugin_does_nothing():
    env = {k: v for k, v in os.environ.items() if k not in (plugin.ENV_TORCH_THREADS, plugin.ENV_CUDA_SYNC)}
    env["PYTHONPATH"] = os.path.dirname(plugin.__file__)
    code = (
        "import sys, sleepwake_cpu_use as p; from sleepwake_on_import import PatchOnImport; p.register(); "
        "print(any(isinstance(f, PatchOnImport) for f in sys.meta_path), 'torch' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["False", "False"], run.stderr


@pytest.mark.parametrize(
    "threads, sync, want",
    [
        (0, "auto", {}),
        (1, "blocking", {"SLEEPWAKE_TORCH_THREADS": "1", "SLEEPWAKE_CUDA_SYNC": "blocking"}),
    ],
)
def test_the_config_not_the_runners_environment_decides_what_the_plugin_reads(tmp_path, threads, sync, want):
    base = {"SLEEPWAKE_TORCH_THREADS": "7", "SLEEPWAKE_CUDA_SYNC": "spin"}  # left by the runner's shell
    cfg = config_lib.ServerConfig(cache_dir=str(tmp_path), torch_threads=threads, cuda_sync=sync)
    env = config_lib.build_env(cfg, base)
    assert {k: env[k] for k in base if k in env} == want


def test_an_unknown_cuda_sync_is_refused():
    with pytest.raises(config_lib.ConfigError, match="unknown cuda_sync 'sometimes'; use one of auto, spin"):
        config_lib.validate(config_lib.ServerConfig(cuda_sync="sometimes"))


def test_without_a_cuda_driver_the_worker_starts_as_it_would_and_the_log_says_why(monkeypatch, capsys):
    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(plugin.ctypes, "CDLL", no_driver)

    class Worker:
        def init_device(self):
            return "device"

    plugin.wrap_init_device(Worker, plugin.CUDA_SYNC_FLAGS["blocking"])
    assert Worker().init_device() == "device"
    assert plugin.MARK + '{"cuda_sync": 4, "refused": "libcuda.so.1"' in capsys.readouterr().err
