"""The bytes each holder of a GPU's memory phase declares, in a small ledger inside its memory lock file.

Why: vLLM 0.26.0's worker judges a sleep only by the device-wide free memory before and after it
(vllm/v1/worker/gpu_worker.py Worker.sleep, line 220: `assert freed_bytes >= 0, "Memory usage increased
after sleeping."`), so an allocation inside a sleep's window trips it only when the allocations there
outgrow what the sleep frees. With the rule BYTES (gpu_lease.memory_phase) a sleep (FREE) is admitted
while the allocations inside (ALLOCATE) declare less than its allowance, and an allocation while every
running sleep's allowance still holds what was charged to it since it began; with KINDS the two kinds
never overlap (the ledger is still written, so a holder of either rule sees the other's claims).

A claim is a record at CLAIMS_AT + slot x RECORD_BYTES: its kind, pid, declared bytes (an allocation's
size; a sleep's allowance: margin x the bytes it frees) and, for a sleep, the bytes charged to it. Its
holder write-locks the record's first byte (an open-file-description lock, like gpu_lease's role bytes),
so a holder that dies takes its claim with it: a record whose byte nobody locks is dead and its slot free.
Every read and write of the ledger happens under MUTEX_AT, a write lock held for microseconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import struct

ALLOCATE = "allocate"  # gpu_lease.ALLOCATE
FREE = "free"  # gpu_lease.FREE
BYTES = "bytes"
KINDS = "kinds"
RULES = (BYTES, KINDS)

MUTEX_AT = 64  # above gpu_lease's role bytes (0-5)
COUNT_AT = 128  # slots ever used (8 bytes): readers scan no further
CLAIMS_AT = 4096
_RECORD = "<1s3xiqq"  # kind (A or F), pid, declared bytes (-1: unknown), bytes charged (a sleep's)
RECORD_BYTES = struct.calcsize(_RECORD)
_KIND_CODE = {ALLOCATE: b"A", FREE: b"F"}
_FLOCK = "hhqqi4x"  # struct flock on Linux x86-64 and arm64, as gpu_lease's


@dataclasses.dataclass(frozen=True)
class Claim:
    slot: int
    kind: str
    pid: int
    declared: int | None  # None: not declared (an allocation of any size; a sleep that allows nothing)
    charged: int


def _lock(fd: int, lock_type: int, offset: int, wait: bool = False) -> bool:
    command = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
    try:
        fcntl.fcntl(fd, command, struct.pack(_FLOCK, lock_type, os.SEEK_SET, offset, 1, 0))
        return True
    except (BlockingIOError, PermissionError):
        return False


def _locked_by_others(fd: int, offset: int) -> bool:
    answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0))
    return struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK


@contextlib.contextmanager
def mutex(fd: int):
    """The ledger to this open file alone while inside; a holder that dies releases it."""
    _lock(fd, fcntl.F_WRLCK, MUTEX_AT, wait=True)
    try:
        yield
    finally:
        _lock(fd, fcntl.F_UNLCK, MUTEX_AT)


def _slots_used(fd: int) -> int:
    raw = os.pread(fd, 8, COUNT_AT)
    return struct.unpack("<q", raw)[0] if len(raw) == 8 else 0


def _offset(slot: int) -> int:
    return CLAIMS_AT + slot * RECORD_BYTES


def live(fd: int) -> list[Claim]:
    """Other open files' claims whose holder still lives (call under mutex)."""
    claims = []
    for slot in range(_slots_used(fd)):
        if not _locked_by_others(fd, _offset(slot)):
            continue
        code, pid, declared, charged = struct.unpack(_RECORD, os.pread(fd, RECORD_BYTES, _offset(slot)))
        kind = ALLOCATE if code == b"A" else FREE
        claims.append(Claim(slot, kind, pid, None if declared < 0 else declared, charged))
    return claims


def admits(claims: list[Claim], kind: str, declared: int | None) -> bool:
    """The rule BYTES: whether a phase of kind declaring `declared` bytes may join the live claims.

    A sleep (FREE; declared: its allowance) joins while the allocations inside declare less than its
    allowance in all (none inside: it joins whatever its allowance). An allocation joins while, for every
    running sleep, what was charged to it plus this allocation stays below its allowance. Undeclared
    bytes are the old rule's: an undeclared allocation overlaps no sleep, an undeclared sleep no allocation.
    """
    if kind == FREE:
        inside = [c.declared for c in claims if c.kind == ALLOCATE]
        if not inside:
            return True
        if declared is None or None in inside:
            return False
        return sum(inside) < declared  # type: ignore[arg-type]
    sleeps = [c for c in claims if c.kind == FREE]
    if not sleeps:
        return True
    if declared is None:
        return False
    return all(s.declared is not None and s.charged + declared < s.declared for s in sleeps)


def take(fd: int, kind: str, declared: int | None, claims: list[Claim]) -> int:
    """Writes this open file's claim (call under mutex, after admits) and charges an allocation to every
    running sleep; returns its slot. The claim lives until fd is closed."""
    used = _slots_used(fd)
    slot = next((s for s in range(used) if _lock(fd, fcntl.F_WRLCK, _offset(s))), None)
    if slot is None:
        slot = used
        _lock(fd, fcntl.F_WRLCK, _offset(slot))
        os.pwrite(fd, struct.pack("<q", used + 1), COUNT_AT)
    charged = sum(c.declared or 0 for c in claims if c.kind == ALLOCATE) if kind == FREE else 0
    record = struct.pack(_RECORD, _KIND_CODE[kind], os.getpid(), -1 if declared is None else declared, charged)
    os.pwrite(fd, record, _offset(slot))
    if kind == ALLOCATE and declared:
        for sleep in (c for c in claims if c.kind == FREE):
            at = _offset(sleep.slot) + struct.calcsize("<1s3xiq")
            os.pwrite(fd, struct.pack("<q", sleep.charged + declared), at)
    return slot
