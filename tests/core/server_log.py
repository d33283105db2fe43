"""What vLLM 0.26.0 itself logs about a sleep, read from the server log the launcher writes.

Two lines per level >= 1 sleep, both written by the engine process before /sleep answers:
  vllm/device_allocator/cumem.py CuMemAllocator.sleep:
    "CuMemAllocator: sleep freed 2.46 GiB memory in total, of which 0.48 GiB is backed up in CPU and
     the rest 1.98 GiB is discarded directly."
  vllm/v1/worker/gpu_worker.py Worker.sleep (device-wide free memory before and after):
    "Sleep mode freed 2.52 GiB memory, 0.88 GiB memory is still in use."
They are vLLM's own account, not a measurement of ours: the tests use them as a cross-check and to
know whether a server has slept before, never as the oracle.
"""

import dataclasses
import re

GiB = 1 << 30
_ALLOCATOR = re.compile(
    r"CuMemAllocator: sleep freed (?P<total>[\d.]+) GiB memory in total, of which "
    r"(?P<backed_up>[\d.]+) GiB is backed up in CPU"
)
_WORKER = re.compile(
    r"Sleep mode freed (?P<freed>[\d.]+) GiB memory, (?P<used>[\d.]+) GiB memory is "
    r"still in use"
)


@dataclasses.dataclass(frozen=True)
class AllocatorSleep:
    total_bytes: int  # every pool allocation unmapped
    backed_up_bytes: int  # of which copied to host memory first (the weights at level 1)


@dataclasses.dataclass(frozen=True)
class WorkerSleep:
    freed_bytes: int  # device-wide free memory after minus before
    used_bytes: int  # device-wide used memory after


def _gib(text: str) -> int:
    return int(round(float(text) * GiB))


def allocator_sleeps(log_text: str) -> list[AllocatorSleep]:
    return [AllocatorSleep(_gib(m["total"]), _gib(m["backed_up"])) for m in _ALLOCATOR.finditer(log_text)]


def worker_sleeps(log_text: str) -> list[WorkerSleep]:
    return [WorkerSleep(_gib(m["freed"]), _gib(m["used"])) for m in _WORKER.finditer(log_text)]


def read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()
