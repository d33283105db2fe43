import types

import pytest

from tools.launcher.errors import GPU_CELL_HINT, GpuUnavailableError, ServerReleaseError
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.nvml import Nvml, unattributed_bytes, wait_for_release

GIB = 1 << 30


class _NoDriver:
    def nvmlInit(self):
        raise RuntimeError("NVML Shared Library Not Found")


def _lib(devices):
    """A pynvml stand-in: devices is a list of (used bytes, [(pid, bytes)]), UUIDs GPU-<index>."""
    proc = lambda pid, used: types.SimpleNamespace(pid=pid, usedGpuMemory=used)  # noqa: E731
    return types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: b"GPU-%d" % h,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlSystemGetDriverVersion=lambda: "570.1",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=devices[h][0]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [proc(p, b) for p, b in devices[h][1]],
    )


def test_no_nvml_says_this_is_a_gpu_cell():
    with pytest.raises(GpuUnavailableError) as e:
        Nvml(lib=_NoDriver())
    assert GPU_CELL_HINT in str(e.value) and "NVML Shared Library Not Found" in str(e.value)
    assert GPU_CELL_HINT == "this is a GPU cell; run it on a GPU runner with --config=gpu"


def test_no_device_says_this_is_a_gpu_cell():
    with pytest.raises(GpuUnavailableError, match="sees no NVIDIA GPU: " + GPU_CELL_HINT):
        Nvml(lib=_lib([]))


def test_seam_sums_process_bytes_over_devices():
    nvml = Nvml(lib=_lib([(5 * GIB, [(10, GIB), (11, None)]), (7 * GIB, [(10, 2 * GIB)])]))
    assert nvml.processes() == {10: 3 * GIB, 11: 0}
    assert nvml.process_bytes([10, 11, 12]) == 3 * GIB
    assert (nvml.device_used_bytes(1), nvml.device_name(0), nvml.driver_version()) == (7 * GIB, "NVIDIA H200", "570.1")
    assert (nvml.device_uuid(0), nvml.device_uuid(1)) == ("GPU-0", "GPU-1")


def test_release_waits_while_nvml_lists_server_pids_then_raises_with_numbers():
    fake = FakeNvml(procs={41: 3 * GIB, 99: GIB})
    with pytest.raises(ServerReleaseError, match=r"lists server PIDs \[41\] \(MiB: \{41: 3072\}\)"):
        wait_for_release(fake, [41, 42], 0, None, 512 << 20, timeout_s=0.3, poll_s=0.05)
    fake.procs = {99: GIB}  # someone else's process is not ours to wait for
    wait_for_release(fake, [41, 42], 0, None, 512 << 20, timeout_s=0.3, poll_s=0.05)


def test_release_compares_device_memory_only_with_a_baseline():
    fake = FakeNvml(used={0: 4 * GIB})
    with pytest.raises(
        ServerReleaseError,
        match="device 0 holds 4096 MiB that no process NVML lists accounts for vs 2048 MiB .*tolerance 512 MiB,"
        " 1536 MiB over",
    ):
        wait_for_release(fake, [41], 0, 2 * GIB, 512 << 20, timeout_s=0.2, poll_s=0.05)
    wait_for_release(fake, [41], 0, None, 512 << 20, timeout_s=0.2)  # shared GPU: no baseline
    wait_for_release(fake, [41], 0, 4 * GIB - (256 << 20), 512 << 20, timeout_s=0.2)  # within tolerance


def test_a_neighbour_nvml_lists_cannot_fail_the_release_but_unlisted_memory_does():
    # Before the server: 1 GiB that no listed process accounts for (the driver, the context of this
    # process). After it: another run's server (pid 77, 24 GiB) started on the same GPU meanwhile.
    fake = FakeNvml(used={0: GIB})
    baseline = unattributed_bytes(fake, 0)
    fake.used, fake.procs = {0: 25 * GIB}, {77: 24 * GIB}
    wait_for_release(fake, [41], 0, baseline, 512 << 20, timeout_s=0.2, poll_s=0.05)
    # 2 GiB more that no listed process holds (a child that escaped the server's tree): ours to report.
    fake.used = {0: 27 * GIB}
    with pytest.raises(ServerReleaseError, match="holds 3072 MiB that no process NVML lists accounts for"):
        wait_for_release(fake, [41], 0, baseline, 512 << 20, timeout_s=0.2, poll_s=0.05)


def test_device_processes_are_the_device_s_own():
    nvml = Nvml(lib=_lib([(5 * GIB, [(10, GIB), (11, None)]), (7 * GIB, [(10, 2 * GIB)])]))
    assert (nvml.device_processes(0), nvml.device_processes(1)) == ({10: GIB, 11: 0}, {10: 2 * GIB})
    assert unattributed_bytes(nvml, 0) == 4 * GIB and unattributed_bytes(nvml, 1) == 5 * GIB
