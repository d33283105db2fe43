"""Who takes a free GPU slot next: the cells waiting for one, longest expected first.

Why: the matrix ends when its last cell does. Cells that take slots in whatever order Bazel started
them end with a long cell started late (a 90 s walk shard begun at 80 s ends the run at 170 s); served
longest first (LPT scheduling), the long cells run from the start and the short ones fill the gaps
after them. Each cell says how long it expects to hold its slot (ServerConfig.lease_priority_s, from
tools/matrix.bzl CELL_SECONDS); equal expectations are served in the order they arrived.

Each waiter keeps a file in <lock_dir>/slot-queue-<gpus>/, named by its priority and arrival, and
holds an flock on it while it waits: a waiter that died leaves its file unlocked, and the next one to
look removes it, so a killed cell never holds the queue up. The file is locked before it is given its
name, so a live waiter is never taken for a dead one.
"""

from __future__ import annotations

import fcntl
import os
import time

SUFFIX = ".wait"


def queue_dir(lock_dir: str, gpus) -> str:
    """The queue of cells that may take a slot of exactly these GPUs (a runner's CUDA_VISIBLE_DEVICES)."""
    return os.path.join(lock_dir, "slot-queue-" + "_".join(sorted(gpus)))


def _key(name: str):
    """(-priority in ms, arrival in ns, pid) of a waiter's file name; None for any other file."""
    if not name.endswith(SUFFIX):
        return None
    try:
        priority_ms, arrival_ns, pid = (int(part) for part in name[:-len(SUFFIX)].split("-"))
    except ValueError:
        return None
    return -priority_ms, arrival_ns, pid


def _alive(path: str) -> bool:
    """Whether the waiter of this file still holds it; a dead one's file is removed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock this process took: the file goes below, before anyone reuses it
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return False


class Place:
    """This process's place in the queue of its GPUs, from join() until leave()."""

    def __init__(self, lock_dir: str, gpus, priority_s: float):
        self.dir = queue_dir(lock_dir, gpus)
        os.makedirs(self.dir, exist_ok=True)
        self.name = "%d-%d-%d%s" % (max(0, round(priority_s * 1000)), time.time_ns(), os.getpid(), SUFFIX)
        self.key = _key(self.name)
        staging = os.path.join(self.dir, ".joining-%d-%d" % (os.getpid(), time.monotonic_ns()))
        self.fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.rename(staging, os.path.join(self.dir, self.name))

    def ahead(self) -> int:
        """How many live waiters come before this one: they take the next free slots."""
        count = 0
        for name in os.listdir(self.dir):
            key = _key(name)
            if key is not None and key < self.key and _alive(os.path.join(self.dir, name)):
                count += 1
        return count

    def leave(self) -> None:
        if self.fd >= 0:
            try:
                os.unlink(os.path.join(self.dir, self.name))
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = -1
