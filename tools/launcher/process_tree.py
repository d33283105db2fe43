"""Process trees through psutil and the kernel's children files: snapshot a process's descendants,
signal them, wait until gone.

A PID alone is not an identity (numbers are reused), so a snapshot maps each PID to its creation time
(psutil's create_time, from the kernel's start time) and a process counts as the same one only while
both match. Zombies count as gone: they hold no memory and their parent reaps them.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

Snapshot = dict  # pid -> creation time

_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def _process(pid: int, start_time: float | None = None) -> psutil.Process | None:
    """The live process pid (the same one, if start_time is given), or None."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in _GONE or start_time not in (None, proc.create_time()):
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _ask(pid: int, question, start_time: float | None = None):
    """question(the live process pid, the same one if start_time is given), or None if it is gone
    (before or while asked)."""
    proc = _process(pid, start_time)
    try:
        return question(proc) if proc else None
    except psutil.NoSuchProcess:
        return None


def start_time(pid: int) -> float | None:
    """The creation time of pid (with the PID, its identity), or None if it does not exist."""
    return _ask(pid, psutil.Process.create_time)


def alive(pid: int, start_time: float | None = None) -> bool:
    return _process(pid, start_time) is not None


def _live(procs) -> Snapshot:
    found = {}
    for proc in procs:
        try:
            if proc.status() not in _GONE:
                found[proc.pid] = proc.create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


# Linux lists each thread's children in /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN).
PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _child_pids(pid: int) -> list[int]:
    """pid's children from its threads' children files (none if it is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(k) for tid in tids for k in _read(f"/proc/{pid}/task/{tid}/children").split()]


def _processes(pids):
    """psutil.Process of each pid that exists (_live then keeps the live ones)."""
    for pid in pids:
        try:
            yield psutil.Process(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def descendant_pids(root: int) -> list[int] | None:
    """The PIDs below root, from the children files of root's tree alone; None without those files.
    Why not psutil's children(recursive=True): it reads every process's stat on the host to find a
    tree's parents, many times what this costs on a host of hundreds of processes
    (docs/design.md), and a walk step reads its server's tree for each NVML reading and
    host-memory read."""
    if not PROC_CHILDREN:
        return None
    found, todo, seen = [], [root], {root}
    while todo:
        # seen: a PID reused between two reads must not make the walk go round.
        kids = [k for k in _child_pids(todo.pop()) if k not in seen]
        seen.update(kids)
        found += kids
        todo += kids
    return found


def snapshot(root: int, include_root: bool = True) -> Snapshot:
    """Every live descendant of root (and root itself if asked), as pid -> creation time."""
    proc = _process(root)
    if proc is None:
        return {}
    pids = descendant_pids(root)
    if pids is None:
        try:
            descendants = proc.children(recursive=True)
        except psutil.NoSuchProcess:
            descendants = []
    else:
        descendants = list(_processes(pids))  # distinct: descendant_pids keeps each once
    return _live(([proc] if include_root else []) + descendants)


def cpu_seconds(snap: Snapshot) -> float:
    """CPU seconds (user + system) the processes of snap have used, with their reaped children's, of
    those still the same processes; a process gone since the snapshot counts nothing."""
    total = 0.0
    for pid, created in snap.items():
        times = _ask(pid, psutil.Process.cpu_times, created)
        if times is not None:
            total += times.user + times.system + times.children_user + times.children_system
    return total


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the thread or process is gone
        return ""


def thread_cpu(snap: Snapshot) -> dict[str, dict]:
    """{"cpu_s", "threads"} by "process name/thread name" (the kernel's comm; "main" for the process's
    first thread, whose name is the process's) over the threads of snap's live processes: whose threads
    a server's CPU time went to (its main loop, a pool of torch threads, the tokenizer's). What a
    process's threads that already exited spent is "process name/(exited threads)" (its own time less
    its live threads'), so the groups add up to the processes' own CPU time."""
    totals: dict[str, dict] = {}

    def count(proc: psutil.Process) -> None:
        own = proc.cpu_times()
        threads = proc.threads()
        name = _process_name(proc.pid)
        for t in threads:
            thread = "main" if t.id == proc.pid else _read(f"/proc/{proc.pid}/task/{t.id}/comm").strip() or "?"
            _add(totals, "%s/%s" % (name, thread), t.user_time + t.system_time, 1)
        exited = own.user + own.system - sum(t.user_time + t.system_time for t in threads)
        if exited > 0:
            _add(totals, name + "/(exited threads)", exited, 0)

    for pid, created in snap.items():
        _ask(pid, count, created)
    return totals


def _process_name(pid: int) -> str:
    """The title a process gave itself (vLLM's engine core: VLLM::EngineCore, in its argv through
    setproctitle), else its kernel name: a forked server's processes are all the zygote's python3."""
    argv0 = _read(f"/proc/{pid}/cmdline").split("\0")[0].strip()
    if argv0.startswith("VLLM::"):
        return argv0.split()[0]
    return _read(f"/proc/{pid}/comm").strip() or "?"


def _add(totals: dict, key: str, seconds: float, threads: int) -> None:
    group = totals.setdefault(key, {"cpu_s": 0.0, "threads": 0})
    group["cpu_s"] += seconds
    group["threads"] += threads


def reap_exited() -> list[tuple[int, int]]:
    """(pid, wait status) of every child of this process that has exited, reaped without blocking."""
    out: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, status))


def parent(pid: int) -> int | None:
    """The parent PID of pid, or None if it is gone."""
    return _ask(pid, psutil.Process.ppid)


def children(pid: int) -> set[int]:
    """Live direct children of pid."""
    if PROC_CHILDREN:  # a pid that is gone (or a zombie, whose children were reparented) has none
        return set(_live(_processes(_child_pids(pid))))
    return _ask(pid, lambda proc: set(_live(proc.children()))) or set()


def survivors(snap: Snapshot) -> Snapshot:
    return {pid: start for pid, start in snap.items() if alive(pid, start)}


def signal_all(snap: Snapshot, sig: int) -> None:
    for pid in survivors(snap):
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


def pidfd(pid: int, start_time: float | None) -> int | None:
    """A pidfd of pid (readable once it has exited), or None if it is gone already or its PID now names
    a process started at another time than start_time."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if not alive(pid, start_time):
        os.close(fd)
        return None
    return fd
