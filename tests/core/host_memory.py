"""Host (CPU) memory of a server's process tree, read from /proc/<pid>/status.

Why host memory: level 1 copies the weights into pinned host memory (vllm/device_allocator/cumem.py
CuMemAllocator.sleep: torch.empty(size, device="cpu", pin_memory=True), i.e. cudaHostAlloc through
PyTorch's caching host allocator) and level 2 keeps no copy; giving host RAM back is why level 2 exists.

Which counter shows pinned pages depends on how the NVIDIA driver maps them into the process. Measured
on an L4 (driver 570, PyTorch 2.9): a 4 GiB pinned tensor added exactly 4 GiB to RssShmem and nothing
to RssAnon (MakazhanAlpamys/Soup#655); VmPin and VmLck count only pages pinned through the kernel's
own accounting, which the driver does not use there. So the GPU tests bound VmRSS (= RssAnon + RssFile
+ RssShmem: it holds the copy whichever way the driver books it), report RssShmem as the pinned figure,
and record every counter, so that the H200 run shows where the pinned bytes land.

Why /proc and not psutil (which the launcher uses for process trees): psutil's memory_info folds
RssShmem into `shared` together with RssFile and has no VmLck or VmPin, the counters this needs apart.
"""

import dataclasses
import os

KiB = 1 << 10
# /proc/<pid>/status line -> HostMemory field. RssAnon/RssFile/RssShmem exist since Linux 4.5.
STATUS_FIELDS = {
    "VmRSS": "rss",
    "RssAnon": "anon",
    "RssFile": "file",
    "RssShmem": "shmem",
    "VmLck": "locked",
    "VmPin": "pinned_vm",
}


class HostMemoryError(RuntimeError):
    """/proc does not give what the measurement needs (old kernel, no process left)."""


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """Bytes of one process or the sum over several (shared pages count once per process)."""

    rss: int = 0  # VmRSS: every resident page mapped by the process
    anon: int = 0  # RssAnon: private anonymous pages (heap, pageable tensors)
    file: int = 0  # RssFile: file-backed pages (libraries, mmapped checkpoints)
    shmem: int = 0  # RssShmem: shared memory; where the driver books cudaHostAlloc'd pages (above)
    locked: int = 0  # VmLck: mlock()ed pages
    pinned_vm: int = 0  # VmPin: pages pinned through the kernel's pinned_vm accounting

    @property
    def allocated(self) -> int:
        """RssAnon + RssShmem: the pages the process allocated itself (its heap and pageable tensors;
        its pinned copies, see the module docstring). Not RssFile: file-backed pages (libraries, the
        mmapped checkpoint) come and go with the kernel's page cache, whatever the server does (a healthy
        engine core's RssFile moved by more than a host bound between two cycles on the H200:
        docs/design.md)."""
        return self.anon + self.shmem

    @property
    def pinned(self) -> int:
        """The pinned-host-memory figure the suite reports: RssShmem (see the module docstring)."""
        return self.shmem

    def __add__(self, other: "HostMemory") -> "HostMemory":
        return HostMemory(**{f: getattr(self, f) + getattr(other, f) for f in _FIELD_NAMES})

    def __sub__(self, other: "HostMemory") -> "HostMemory":
        return HostMemory(**{f: getattr(self, f) - getattr(other, f) for f in _FIELD_NAMES})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


_FIELD_NAMES = [f.name for f in dataclasses.fields(HostMemory)]


def parse_status(text: str, where: str = "status") -> HostMemory:
    """The HostMemory of a /proc/<pid>/status text; HostMemoryError if a needed line is missing."""
    values = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key in STATUS_FIELDS:
            parts = rest.split()
            if len(parts) != 2 or parts[1] != "kB" or not parts[0].isdigit():
                raise HostMemoryError(f"{where}: unexpected {key} line {line!r} (expected '<n> kB')")
            values[STATUS_FIELDS[key]] = int(parts[0]) * KiB
    missing = [k for k, f in STATUS_FIELDS.items() if f not in values]
    if missing:
        raise HostMemoryError(
            f"{where} has no {', '.join(missing)} line: host memory needs Linux >= 4.5 "
            "(RssAnon/RssFile/RssShmem); run the cell on a newer kernel"
        )
    return HostMemory(**values)


def process_memory(pid: int, proc: str = "/proc") -> HostMemory | None:
    """The process's HostMemory, or None if it is gone (or a zombie, which holds no memory)."""
    path = os.path.join(proc, str(pid), "status")
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if "\nVmRSS:" not in "\n" + text:  # kernel threads and zombies have no memory lines
        return None
    return parse_status(text, path)


def tree_memory(pids, proc: str = "/proc") -> dict[int, HostMemory]:
    """pid -> HostMemory for every pid of `pids` still alive; HostMemoryError if none is."""
    found = {}
    for pid in pids:
        memory = process_memory(pid, proc)
        if memory is not None:
            found[pid] = memory
    if not found:
        raise HostMemoryError(
            f"none of the processes {sorted(pids)} is alive (or has memory lines in "
            f"{proc}): the server is gone; see its log"
        )
    return found


def total(per_pid: dict[int, HostMemory]) -> HostMemory:
    result = HostMemory()
    for memory in per_pid.values():
        result = result + memory
    return result


def server_host_memory(server) -> tuple[HostMemory, dict[int, HostMemory]]:
    """(sum, per pid) over the server's process tree (API server, engine core and its workers)."""
    per_pid = tree_memory(server.pids())
    return total(per_pid), per_pid


RELEASED, KEPT, PARTIAL = "released", "kept", "partial"


def retention(retained: int, copy: int, noise: float) -> str:
    """What a process did with a level-1 host copy once awake again, from the host bytes it still holds
    above its awake bytes: RELEASED (within `noise`), KEPT (at least half the copy), else PARTIAL."""
    if retained <= noise:
        return RELEASED
    return KEPT if retained >= copy / 2 else PARTIAL
