"""Process trees read from /proc: snapshot a process's descendants, signal them, wait until gone.

A PID alone is not an identity (numbers are reused), so a snapshot maps each PID to its kernel start
time (field 22 of /proc/PID/stat) and a process counts as the same one only while both match.
Zombies count as gone: they hold no memory and their parent reaps them.
"""

from __future__ import annotations

import os
import signal
import time

Snapshot = dict  # pid -> start time


def _stat(pid: int):
    """(ppid, state, start time) of pid, or None if it does not exist."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # comm may hold spaces and parentheses
    return int(fields[1]), fields[0].decode(), int(fields[19])


def start_time(pid: int) -> int | None:
    """The kernel start time of pid (with the PID, its identity), or None if it does not exist."""
    stat = _stat(pid)
    return stat[2] if stat else None


def alive(pid: int, start_time: int | None = None) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] not in ("Z", "X") and start_time in (None, stat[2])


def snapshot(root: int, include_root: bool = True) -> Snapshot:
    """Every live descendant of root (and root itself if asked), as pid -> start time."""
    stats, children = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat and stat[1] not in ("Z", "X"):
                stats[int(name)] = stat
                children.setdefault(stat[0], []).append(int(name))
    found, stack = {}, [root]
    while stack:
        pid = stack.pop()
        if pid in stats and (pid != root or include_root):
            found[pid] = stats[pid][2]
        stack.extend(children.get(pid, []))
    return found


def reap_exited() -> list[tuple[int, int]]:
    """(pid, wait status) of every child of this process that has exited, reaped without blocking."""
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, status))


def children(pid: int) -> set[int]:
    """Live direct children of pid."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat and stat[0] == pid and stat[1] not in ("Z", "X"):
                out.add(int(name))
    return out


def survivors(snap: Snapshot) -> Snapshot:
    return {pid: start for pid, start in snap.items() if alive(pid, start)}


def signal_all(snap: Snapshot, sig: int) -> None:
    for pid, start in survivors(snap).items():
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(snap: Snapshot, timeout_s: float, reap=None, poll_s: float = 0.05) -> Snapshot:
    """Waits until no process of snap is alive or timeout_s passes; returns the survivors.

    reap, if given, is called on each poll: a parent must reap its own children for them to go.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if reap:
            reap()
        left = survivors(snap)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll_s)


def terminate_tree(root: int, grace_s: float, include_root: bool = True, reap=None) -> Snapshot:
    """SIGTERM to root's whole tree, grace_s to exit, SIGKILL to what is left; returns every PID seen.

    The tree is snapshotted before any signal: once a parent dies, its children (vLLM's engine core
    and workers) are reparented and no longer reachable from root. A second snapshot after the grace
    period catches processes forked meanwhile.
    """
    snap = snapshot(root, include_root)
    signal_all(snap, signal.SIGTERM)
    wait_gone(snap, grace_s, reap)
    snap.update(snapshot(root, include_root))
    signal_all(snap, signal.SIGKILL)
    wait_gone(snap, 10.0, reap)
    return snap
