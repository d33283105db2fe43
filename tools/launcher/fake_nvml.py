"""A fake of NVML as the launcher reads it (nvml.NvmlReadings), with settable state, for tests on a CPU:
the launcher's own tests and the engine tier's door hosts (tests/engine/lib/door_host_process.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.launcher.nvml import NvmlReadings


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


if TYPE_CHECKING:  # the readings the launcher takes of NVML, which mypy (//tools/lint:types_test) holds this fake to
    _fake: NvmlReadings = FakeNvml()
