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
                raise GpuUnavailableError("NVML bindings are missing (%s): install nvidia-ml-py; %s"
                                          % (e, GPU_CELL_HINT)) from e
        self._lib = lib
        try:
            lib.nvmlInit()
            count = lib.nvmlDeviceGetCount()
        except Exception as e:  # pynvml.NVMLError and friends: no driver, no device, no permission
            raise GpuUnavailableError("NVML is unavailable (%s), so no NVIDIA GPU can be used here: %s"
                                      % (e, GPU_CELL_HINT)) from e
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

    def index_of(self, ident: str) -> int:
        """NVML index of a CUDA_VISIBLE_DEVICES entry: an index or a GPU UUID."""
        try:
            return int(ident)
        except ValueError:
            return int(self._lib.nvmlDeviceGetIndex(self._lib.nvmlDeviceGetHandleByUUID(ident)))

    def processes(self) -> dict[int, int]:
        """pid -> bytes for every compute process on any device (bytes summed over devices).

        PIDs are as NVML sees them: in a container without the host's PID namespace they may not
        match this process's view, which is why the release check also compares device memory.
        """
        found: dict[int, int] = {}
        for index in range(self.device_count()):
            for proc in self._lib.nvmlDeviceGetComputeRunningProcesses(self._handle(index)):
                found[proc.pid] = found.get(proc.pid, 0) + int(proc.usedGpuMemory or 0)
        return found

    def process_bytes(self, pids) -> int:
        procs = self.processes()
        return sum(procs.get(pid, 0) for pid in pids)


class FakeNvml:
    """Nvml with settable state: used[index] -> bytes, procs: pid -> bytes."""

    def __init__(self, device_count: int = 1, used=None, procs=None):
        self.count = device_count
        self.used = dict(used or {})
        self.procs = dict(procs or {})

    def device_count(self) -> int:
        return self.count

    def device_name(self, index: int) -> str:
        return "Fake GPU %d" % index

    def driver_version(self) -> str:
        return "0.0-fake"

    def device_used_bytes(self, index: int) -> int:
        return self.used.get(index, 0)

    def index_of(self, ident: str) -> int:
        return int(ident)

    def processes(self) -> dict[int, int]:
        return dict(self.procs)

    def process_bytes(self, pids) -> int:
        return sum(self.procs.get(pid, 0) for pid in pids)
