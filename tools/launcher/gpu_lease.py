"""GPU slots shared by concurrent test cells: one flock'd file per (GPU, slot).

Like TensorFlow's parallel_gpu_execute.sh: with --local_test_jobs = GPUs x slots_per_gpu, that many
cells run at once and each finds a free slot. flock locks belong to the open file, so a crashed or
killed holder releases its slot by dying; the holder's identity is written into the file so a waiting
cell can say who it is waiting for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import logging
import os
import socket
import struct
import time
from typing import TYPE_CHECKING

from tools.launcher import memory_claims, visible_devices
from tools.launcher.errors import LeaseTimeoutError

if TYPE_CHECKING:
    from tools.launcher.nvml import NvmlReadings

log = logging.getLogger("sleepwake.launcher")


@dataclasses.dataclass
class Lease:
    gpu: str  # the GPU's NVML index: the server's CUDA_VISIBLE_DEVICES (with CUDA_DEVICE_ORDER=PCI_BUS_ID)
    slot: int
    path: str
    fd: int
    waited_s: float
    exclusive: bool  # the only slot of its GPU: device-wide memory belongs to this cell

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def visible_gpus(nvml: NvmlReadings, environ) -> list[str]:
    """NVML indices (as text, the lock files' and the servers' CUDA_VISIBLE_DEVICES) of the GPUs this
    process was given: those CUDA_VISIBLE_DEVICES lists (indices or UUIDs), else every NVML device."""
    uuids = [nvml.device_uuid(index) for index in range(nvml.device_count())]
    return [str(index) for index in visible_devices.resolve(environ.get("CUDA_VISIBLE_DEVICES"), uuids)]


def owner_description(environ=None) -> str:
    env = os.environ if environ is None else environ
    return "pid=%d target=%s host=%s since=%s" % (
        os.getpid(),
        env.get("TEST_TARGET", "(not a bazel test)"),
        socket.gethostname(),
        datetime.datetime.now().isoformat(timespec="seconds"),
    )


def _slot_path(lock_dir: str, gpu: str, slot: int) -> str:
    return os.path.join(lock_dir, "gpu%s.slot%d.lock" % (gpu, slot))


def _try_lock(path: str):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def holders(lock_dir: str, gpus, slots_per_gpu: int) -> list[str]:
    lines = []
    for gpu in gpus:
        for slot in range(slots_per_gpu):
            path = _slot_path(lock_dir, gpu, slot)
            try:
                with open(path) as f:
                    lines.append("%s: %s" % (path, f.read().strip() or "(holder unknown)"))
            except OSError:
                lines.append("%s: (no lock file)" % path)
    return lines


def acquire(
    gpus,
    lock_dir: str,
    slots_per_gpu: int = 1,
    timeout_s: float = 600.0,
    owner: str | None = None,
    poll_s: float = 0.25,
    between_polls=None,
) -> Lease | None:
    """Takes a free slot, waiting at most timeout_s; raises LeaseTimeoutError naming the holders.
    between_polls(), when given, runs after each round that found none: a true answer ends the wait
    without a lease (None; the launcher claimed a parked server, which holds its own slot).

    Fails at once if this process holds every slot itself (two servers in one test): nobody else
    could free one.
    """
    owner = owner or owner_description()
    start = time.monotonic()
    while True:
        lease = try_acquire(gpus, lock_dir, slots_per_gpu, owner, start)
        if lease is not None:
            return lease
        if between_polls is not None and between_polls():
            return None
        held = holders(lock_dir, gpus, slots_per_gpu)
        if all(" pid=%d " % os.getpid() in line for line in held):
            raise LeaseTimeoutError(
                "this process already holds every GPU slot (%s), so waiting would never end. Stop the"
                " other server before starting this one, or raise slots_per_gpu." % "; ".join(held)
            )
        if time.monotonic() - start >= timeout_s:
            raise LeaseTimeoutError(
                "no GPU slot became free within %.0f s (GPUs %s, %d slot(s) each, locks in %s). Holders:\n  %s\n"
                "Wait for those cells, end stale ones, or run fewer at once (--local_test_jobs = GPUs x"
                " slots_per_gpu)." % (timeout_s, ",".join(gpus), slots_per_gpu, lock_dir, "\n  ".join(held))
            )
        time.sleep(poll_s)  # flock cannot wait on "any of several files"; poll them with a deadline


def try_acquire(gpus, lock_dir: str, slots_per_gpu: int, owner: str, asked: float) -> Lease | None:
    """A free slot now, or None; asked: when the caller began waiting (time.monotonic), for waited_s."""
    os.makedirs(lock_dir, exist_ok=True)
    # Slot-major order: the first slot of every GPU before any second slot, to spread cells out.
    for slot in range(slots_per_gpu):
        for gpu in gpus:
            path = _slot_path(lock_dir, gpu, slot)
            fd = _try_lock(path)
            if fd is None:
                continue
            os.ftruncate(fd, 0)
            os.write(fd, (owner + "\n").encode())
            waited = time.monotonic() - asked
            log.info("GPU lease: took %s after waiting %.1f s", path, waited)
            return Lease(gpu=gpu, slot=slot, path=path, fd=fd, waited_s=waited, exclusive=slots_per_gpu == 1)
    return None


def memory_lock_path(lease: Lease) -> str:
    return os.path.join(os.path.dirname(lease.path), "gpu%s.memory.lock" % lease.gpu)


# What a memory phase does to device-wide memory, which decides who may overlap it.
ALLOCATE = "allocate"  # a start, a wake, a weight reload: device-wide free memory falls
FREE = "free"  # a sleep that unmaps: it only rises, and vLLM judges the sleep by how much
RELEASE = "release"  # a teardown: it only rises, and nobody judges it
EXCLUSIVE = "exclusive"  # a window that reads device-wide memory (immediacy, latency): nothing moves
KINDS = (ALLOCATE, FREE, RELEASE, EXCLUSIVE)
# Who keeps a phase of each kind out: holders of these kinds, and phases of these kinds still waiting
# (a waiting FREE keeps new allocations out but for passes_waiting_free's, a waiting EXCLUSIVE everything).
# _try_enter implements it with the bytes below; tools/bench/phase_trace.py reads a run's waits by it.
EXCLUDED_BY = {ALLOCATE: (FREE, EXCLUSIVE), FREE: (ALLOCATE, EXCLUSIVE), RELEASE: (EXCLUSIVE,), EXCLUSIVE: KINDS}
KEPT_OUT_BY_WAITING = {ALLOCATE: (FREE, EXCLUSIVE), FREE: (EXCLUSIVE,), RELEASE: (EXCLUSIVE,), EXCLUSIVE: ()}

# One byte of the per-GPU lock file per role, locked with open-file-description locks (F_OFD_*): like
# flock they belong to the open file, so a holder that dies releases them, and unlike flock they can be
# tested without being taken (F_OFD_GETLK).
_INSIDE = {ALLOCATE: 0, FREE: 1, RELEASE: 2}  # read-locked by each holder; EXCLUSIVE write-locks all three
_EXCLUDES = {ALLOCATE: FREE, FREE: ALLOCATE}  # RELEASE excludes only EXCLUSIVE
_FREE_WAITING = 3  # read-locked by a waiting FREE: no new ALLOCATE enters, so a sleep waits at most for
#                    the allocations already under way, never for a stream of overlapping starts
_EXCLUSIVE_WAITING = 4  # read-locked by a waiting EXCLUSIVE: nothing new enters
_START_STEP_INSIDE = 5  # read-locked by each start step holding ALLOCATE (what "start:<step>")
_FLOCK = "hhqqi4x"  # struct flock on Linux x86-64 and arm64: type, whence, start, len, pid (0 for OFD locks)


# An ALLOCATE's role, from its `what`: a worker's start step ("start:<step>") holds it for seconds; a
# running server's wake or reload, a fraction of one. While a start step holds ALLOCATE, a waiting FREE
# waits for that step anyway, so a brief ALLOCATE may pass the FREE's keep-out: it ends before the step
# does and costs the sleep nothing (without this, wakes queued for minutes behind a waiting FREE that
# itself waited for start steps: docs/design.md). A new start step is still kept out, so the
# sleep's wait stays bounded by the steps already inside.
START_STEP = "start"
BRIEF = ("wake", "reload")


def role(what: str) -> str:
    """What a phase's holder does, from its `what`: start, sleep, wake, reload, window, teardown."""
    return what.split(":", 1)[0]


def passes_waiting_free(what: str) -> bool:
    return role(what) in BRIEF


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError("memory phase kind %r: expected one of %s" % (kind, ", ".join(KINDS)))


def _lock_byte(fd: int, lock_type: int, offset: int, length: int = 1) -> bool:
    """Takes (or with F_UNLCK drops) a lock on bytes [offset, offset+length) without waiting."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, lock_type, os.SEEK_SET, offset, length, 0))
        return True
    except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: a conflicting lock is held
        return False


def _held_by_others(fd: int, offset: int) -> bool:
    """Whether another open file holds any lock on the byte at offset (this one's own do not count)."""
    answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0))
    return struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK


def _kept_out_by_waiting_free(fd: int, what: str) -> bool:
    if not _held_by_others(fd, _FREE_WAITING):
        return False
    return not (passes_waiting_free(what) and _held_by_others(fd, _START_STEP_INSIDE))


def _try_enter(
    fd: int, kind: str, what: str = "", declared: int | None = None, rule: str = memory_claims.KINDS
) -> bool:
    """One attempt at entering a phase of `kind`; on failure holds nothing but its waiting flag.
    declared, rule: the phase's claim and the rule that admits it (memory_claims)."""
    if kind == EXCLUSIVE:
        if _lock_byte(fd, fcntl.F_WRLCK, 0, len(_INSIDE)):
            return True
        _lock_byte(fd, fcntl.F_RDLCK, _EXCLUSIVE_WAITING)
        return False
    if _held_by_others(fd, _EXCLUSIVE_WAITING) or (kind == ALLOCATE and _kept_out_by_waiting_free(fd, what)):
        return False
    if kind not in _EXCLUDES:  # RELEASE: only an EXCLUSIVE keeps it out
        return _lock_byte(fd, fcntl.F_RDLCK, _INSIDE[kind])
    # Under the ledger's mutex, so an ALLOCATE and a FREE entering at once are judged one after the
    # other, each seeing the other's role byte and claim.
    with memory_claims.mutex(fd):
        if _lock_byte(fd, fcntl.F_RDLCK, _INSIDE[kind]):
            claims = memory_claims.live(fd)
            if rule == memory_claims.BYTES:
                admitted = memory_claims.admits(claims, kind, declared)
            else:
                admitted = not _held_by_others(fd, _INSIDE[_EXCLUDES[kind]])
            if admitted:
                memory_claims.take(fd, kind, declared if rule == memory_claims.BYTES else None, claims)
                if kind == ALLOCATE and role(what) == START_STEP:
                    _lock_byte(fd, fcntl.F_RDLCK, _START_STEP_INSIDE)
                return True
            _lock_byte(fd, fcntl.F_UNLCK, _INSIDE[kind])
    if kind == FREE:
        _lock_byte(fd, fcntl.F_RDLCK, _FREE_WAITING)
    return False


def start_step_inside(lease: Lease | None) -> bool:
    """Whether a GPU neighbour's worker is in one of its start steps now (it holds ALLOCATE with
    _START_STEP_INSIDE). A latency sample taken meanwhile shares the GPU's copy engines and driver with a
    weight load, a profile run or a graph capture, and a wake beside one is several times slower
    (docs/design.md). A lease alone on its GPU has no neighbours."""
    if lease is None or lease.exclusive:
        return False
    fd = os.open(memory_lock_path(lease), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        return _held_by_others(fd, _START_STEP_INSIDE)
    finally:
        os.close(fd)


# A server's cover file: its client, holding a phase of a kind itself, read-locks that kind's byte, so the
# server's own bracket of a call (phase_plugin) knows the phase is held for it. Taking the lock there
# instead would wait for the client's phase to end, which waits for the call: an EXCLUSIVE window would
# never end, and a FREE one would keep a waiting EXCLUSIVE's neighbours out until it timed out.
_COVER_BYTE = {ALLOCATE: 0, FREE: 1, EXCLUSIVE: 2}


@contextlib.contextmanager
def covering(path: str, kind: str):
    """Marks on the cover file at path that a phase of kind is held for the server's calls (RELEASE covers
    no call: it marks nothing)."""
    _check_kind(kind)
    if kind not in _COVER_BYTE:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        _lock_byte(fd, fcntl.F_RDLCK, _COVER_BYTE[kind])
        yield
    finally:
        os.close(fd)


def covered(path: str, kind: str) -> bool:
    """Whether another process covers a call of kind on the cover file at path: it holds that kind's
    phase or an EXCLUSIVE one."""
    _check_kind(kind)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        return any(_held_by_others(fd, _COVER_BYTE[k]) for k in {kind, EXCLUSIVE} if k in _COVER_BYTE)
    finally:
        os.close(fd)


@contextlib.contextmanager
def memory_phase(
    lease: Lease | None,
    kind: str,
    timeout_s: float,
    poll_s: float = 0.01,
    what: str = "",
    declared: int | None = None,
    rule: str = memory_claims.KINDS,
):
    """Orders the GPU-memory phases of the servers sharing one GPU. Yields the seconds it waited.

    Why: vLLM 0.26.0's worker judges a sleep by the device-wide free memory before and after it
    (gpu_worker.py sleep: `assert freed_bytes >= 0, "Memory usage increased after sleeping."`). If
    another server on the GPU allocates meanwhile (its start, its wake), the sleep fails with HTTP 500
    after having unmapped its memory, and the engine is left inconsistent (seen on the H200 with 16
    servers per GPU). Only allocations can break that check: so ALLOCATE phases (starts, wakes,
    reloads) overlap each other, FREE phases (sleeps) overlap each other, and the two kinds never
    overlap (rule KINDS). With rule BYTES a FREE and ALLOCATEs overlap while the allocations' declared
    bytes stay below the sleep's (memory_claims.admits): declared, an ALLOCATE's size or a FREE's
    allowance, margin x the bytes it frees (memory_budget.py); undeclared, the old rule. A FREE that
    waits keeps new ALLOCATEs out, so a sleep waits for the allocations already under way only (a wake
    or reload passes while a start step, which the sleep waits for anyway, is inside:
    passes_waiting_free). RELEASE (a teardown) overlaps both: freeing cannot break a neighbour's check.
    EXCLUSIVE, for a window that reads device-wide memory itself (the immediacy oracle, the latency
    samples), overlaps nothing. A lease alone on its GPU needs no lock.
    poll_s is short because each sleep waits at least one poll once the phase frees. what: what the
    holder does (sleep, wake, start:load_model, ...), for the GPU's phase trace (trace_path).
    """
    _check_kind(kind)
    if lease is None or lease.exclusive:
        yield 0.0
        return
    with memory_phase_at(memory_lock_path(lease), kind, timeout_s, poll_s, what, declared, rule) as waited:
        yield waited


def trace_path(lock_path: str) -> str:
    """The GPU's phase trace beside its memory lock: one JSON line per phase held (kind, what, pid,
    target, and the wall-clock times it was asked for, entered and left), appended by every holder, so
    a run's waits can be split by what they waited for (tools/bench/phase_trace.py)."""
    return os.path.splitext(lock_path)[0] + ".trace.jsonl"


def _trace(lock_path: str, kind: str, what: str, asked: float, entered: float, declared: int | None) -> None:
    line = (
        json.dumps(
            {
                "kind": kind,
                "what": what or kind,
                "declared": declared,
                "pid": os.getpid(),
                "target": os.environ.get("TEST_TARGET", ""),
                "asked": round(asked, 4),
                "entered": round(entered, 4),
                "left": round(time.time(), 4),
            }
        )
        + "\n"
    )
    try:  # one write of an O_APPEND file: the holders' lines do not interleave
        fd = os.open(trace_path(lock_path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as e:  # a trace is for the bench; a phase never fails for it
        log.warning("memory phase trace %s not written: %s", trace_path(lock_path), e)


@contextlib.contextmanager
def memory_phase_at(
    path: str,
    kind: str,
    timeout_s: float,
    poll_s: float = 0.01,
    what: str = "",
    declared: int | None = None,
    rule: str = memory_claims.KINDS,
):
    """memory_phase on the lock file at path: for a server process, which knows its GPU's lock file
    (phase_plugin/sleepwake_memory_phase.py) but holds no lease."""
    if rule not in memory_claims.RULES:
        raise ValueError("memory phase rule %r: expected one of %s" % (rule, ", ".join(memory_claims.RULES)))
    _check_kind(kind)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    start, asked = time.monotonic(), time.time()
    entered = None
    try:
        while not _try_enter(fd, kind, what, declared, rule):
            if time.monotonic() - start >= timeout_s:
                raise LeaseTimeoutError(
                    "memory phase lock %s: no %s phase within %.0f s: other servers on this GPU kept"
                    " starting, waking or sleeping for that long. Check the other cells' logs, or give"
                    " each cell its own GPU (SLEEPWAKE_SLOTS_PER_GPU=1)." % (path, kind, timeout_s)
                ) from None
            time.sleep(poll_s)  # a bounded wait on several conditions: fcntl can wait on one range only
        for flag in (_FREE_WAITING, _EXCLUSIVE_WAITING):
            _lock_byte(fd, fcntl.F_UNLCK, flag)
        entered = time.time()
        yield time.monotonic() - start
    finally:
        os.close(fd)  # closing the descriptor releases its locks
        if entered is not None:
            _trace(path, kind, what, asked, entered, declared)
