"""The launcher's only view of the GPU: a small seam over pynvml, and a fake of it for CPU tests."""

from __future__ import annotations

from tools.launcher.errors import GPU_CELL_HINT, GpuUnavailableError


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Nvml:
    """NVML, initialised once. Raises GpuUnavailableError if there is no driver or no device."""

    def __init__(self, lib=None):
        if lib is None:
            try:
                import pynvml as lib
            except ImportError as e:
                raise GpuUnavailableError(
                    "NVML bindings are missing (%s): install nvidia-ml-py; %s" % (e, GPU_CELL_HINT)
                ) from e
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


class FakeNvml:
    """Nvml with settable state: used[index] -> bytes, procs: pid -> bytes, the processes of device 0;
    device i's UUID is uuids[i], by default GPU-00000000-0000-0000-0000-00000000000<i>."""

    def __init__(self, device_count: int = 1, used=None, procs=None, uuids=None):
        self.count = device_count
        self.used = dict(used or {})
        self.procs = dict(procs or {})
        self.uuids = list(uuids or ["GPU-00000000-0000-0000-0000-%012d" % i for i in range(device_count)])
        if len(self.uuids) != device_count:
            raise ValueError("FakeNvml: %d uuids for %d devices" % (len(self.uuids), device_count))

    def device_count(self) -> int:
        return self.count

    def device_name(self, index: int) -> str:
        return "Fake GPU %d" % index

    def driver_version(self) -> str:
        return "0.0-fake"

    def device_used_bytes(self, index: int) -> int:
        return self.used.get(index, 0)

    def device_uuid(self, index: int) -> str:
        return self.uuids[index]

    def device_processes(self, index: int) -> dict[int, int]:
        return dict(self.procs) if index == 0 else {}

    def processes(self) -> dict[int, int]:
        return dict(self.procs)

    def process_bytes(self, pids) -> int:
        return sum(self.procs.get(pid, 0) for pid in pids)
