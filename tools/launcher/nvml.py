"""The launcher's only view of the GPU: what it reads of NVML (NvmlReadings), a small seam over pynvml
that reads it (Nvml), and the release check that reads it (a test's stop and a parked server's,
supervisor.stop_tree). CPU tests read a fake of it instead (fake_nvml.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from tools.launcher.errors import GPU_CELL_HINT, GpuUnavailableError, ServerReleaseError

MIB = 1 << 20


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReadings(Protocol):
    """What the launcher reads of NVML: devices, their used bytes and the compute processes on them."""

    def device_count(self) -> int: ...

    def device_name(self, index: int) -> str: ...

    def driver_version(self) -> str: ...

    def device_used_bytes(self, index: int) -> int: ...

    def device_uuid(self, index: int) -> str: ...

    def device_processes(self, index: int) -> dict[int, int]:
        """pid -> bytes for the compute processes on device `index`."""
        ...

    def processes(self) -> dict[int, int]:
        """pid -> bytes for every compute process on any device (bytes summed over devices)."""
        ...

    def process_bytes(self, pids) -> int: ...


class Nvml:
    """NVML, initialised once. Raises GpuUnavailableError if there is no driver or no device."""

    def __init__(self, lib=None):
        if lib is None:
            try:
                import pynvml
            except ImportError as e:
                raise GpuUnavailableError(
                    "NVML bindings are missing (%s): install nvidia-ml-py; %s" % (e, GPU_CELL_HINT)
                ) from e
            lib = pynvml
        self._lib = lib
        try:
            lib.nvmlInit()
            count = lib.nvmlDeviceGetCount()
        except Exception as e:  # pynvml.NVMLError and friends: no driver, no device, no permission
            raise GpuUnavailableError(
                "NVML is unavailable (%s), so no NVIDIA GPU can be used here: %s" % (e, GPU_CELL_HINT)
            ) from e
        if count == 0:
            raise GpuUnavailableError("NVML sees no NVIDIA GPU: %s" % GPU_CELL_HINT)

    def _handle(self, index: int):
        return self._lib.nvmlDeviceGetHandleByIndex(index)

    def device_count(self) -> int:
        return self._lib.nvmlDeviceGetCount()

    def device_name(self, index: int) -> str:
        return _text(self._lib.nvmlDeviceGetName(self._handle(index)))

    def driver_version(self) -> str:
        return _text(self._lib.nvmlSystemGetDriverVersion())

    def device_used_bytes(self, index: int) -> int:
        return int(self._lib.nvmlDeviceGetMemoryInfo(self._handle(index)).used)

    def device_uuid(self, index: int) -> str:
        """The GPU's UUID (GPU-...), as CUDA_VISIBLE_DEVICES and `nvidia-smi -L` name it."""
        return _text(self._lib.nvmlDeviceGetUUID(self._handle(index)))

    def device_processes(self, index: int) -> dict[int, int]:
        """pid -> bytes for the compute processes NVML lists on device `index`."""
        found: dict[int, int] = {}
        for proc in self._lib.nvmlDeviceGetComputeRunningProcesses(self._handle(index)):
            found[proc.pid] = found.get(proc.pid, 0) + int(proc.usedGpuMemory or 0)
        return found

    def processes(self) -> dict[int, int]:
        """pid -> bytes for every compute process on any device (bytes summed over devices).

        PIDs are as NVML sees them: in a container without the host's PID namespace they may not
        match this process's view, which is why the release check also compares device memory.
        """
        found: dict[int, int] = {}
        for index in range(self.device_count()):
            for pid, used in self.device_processes(index).items():
                found[pid] = found.get(pid, 0) + used
        return found

    def process_bytes(self, pids) -> int:
        procs = self.processes()
        return sum(procs.get(pid, 0) for pid in pids)


def unattributed_bytes(nvml: NvmlReadings, device_index: int) -> int:
    """The device's used bytes that no process NVML lists on it accounts for: what a process that
    escaped its server's tree (or the driver) holds. A neighbour's process that NVML lists, another
    run's server or a build action's, is subtracted: it cannot move this reading."""
    return nvml.device_used_bytes(device_index) - sum(nvml.device_processes(device_index).values())


def wait_for_release(
    nvml: NvmlReadings,
    pids: list[int],
    device_index: int,
    baseline: int | None,
    tolerance: int,
    timeout_s: float,
    poll_s: float = 0.25,
) -> None:
    """Waits until NVML lists none of pids and, when baseline is given (an exclusive lease: the
    unattributed_bytes before the server started), the device's unattributed bytes are within
    tolerance of it; raises ServerReleaseError with the numbers."""
    deadline = time.monotonic() + timeout_s
    while True:
        procs = nvml.processes()
        listed = {pid: procs[pid] for pid in pids if pid in procs}
        over = ""  # how the device's unattributed bytes exceed the baseline, if they do
        if baseline is not None:
            held = unattributed_bytes(nvml, device_index)
            if held > baseline + tolerance:
                over = (
                    "device %d holds %.0f MiB that no process NVML lists accounts for vs %.0f MiB before"
                    " the server started (tolerance %.0f MiB, %.0f MiB over)"
                    % (
                        device_index,
                        held / MIB,
                        baseline / MIB,
                        tolerance / MIB,
                        (held - baseline - tolerance) / MIB,
                    )
                )
        if not listed and not over:
            return
        if time.monotonic() >= deadline:
            problems = []
            if listed:
                problems.append(
                    "NVML still lists server PIDs %s (MiB: %s)"
                    % (sorted(listed), {pid: round(b / MIB) for pid, b in listed.items()})
                )
            if over:
                problems.append(over)
            raise ServerReleaseError(
                "GPU memory not released %.0f s after the server stopped: %s. Find the holder with"
                " nvidia-smi and end it; until then the next cell on this GPU measures wrong numbers."
                % (timeout_s, "; ".join(problems))
            )
        time.sleep(poll_s)


if TYPE_CHECKING:  # NVML as the launcher reads it, which mypy (//tools/lint:types_test) holds Nvml to
    _nvml: NvmlReadings = Nvml()
