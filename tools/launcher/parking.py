"""Parked servers: a started server that a test process gave back waits, holding its GPU slot, for the
next test process that asks for a server of the same configuration.

Why: on one H200 most of a matrix's time is starting servers (docs/design.md), and the cells of one
runner x mode ask for the same server one after another; the suite decides whether a server may be
lent (tests/core/server_reuse.py checks its reset), this module only hands it over.

How:
  * The test process writes "park" and a JSON line to its supervisor's control pipe (VllmServer.park).
    The supervisor, forked by a zygote and so no test process's child, stops watching that test
    process, writes itself into its slot lock's owner line, listens on
    <lock_dir>/parked/<key>/<supervisor pid>.sock and reports {"parked": path}.
  * A start whose config says claim (ServerConfig.claim) first connects to a socket of its key and
    sends "claim" with its new control and report pipes; the supervisor answers with what the server is
    (port, log, argv, the suite's readings given at park) and its slot lock's descriptor, unlinks the
    socket and watches the claimant as it watched the first test process. The first claim wins; a later
    claimant finds the socket gone or closed and tries the next one.
  * A parked server stops on its own after park_s, when it exits, or when a start of another
    configuration that found no free slot evicts it; only one parked for longer than EVICT_AFTER_S,
    so that a claimant of its own key, which polls as often as slots are polled, gets it first.
  * Its teardown takes the RELEASE memory phase, as a test process's stop does.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import json
import os
import select
import sys
import time

from tools.launcher import process_tree, unix_socket, zygote_env

# A claimant polls for a parked server of its key as often as gpu_lease.acquire polls for a slot
# (0.25 s): eight of its polls before another configuration's start may evict the server.
EVICT_AFTER_S = 2.0
ANSWER_TIMEOUT_S = 10.0
# The ServerConfig fields that decide nothing in the server process: where the launcher writes, whom it
# asks, how long it waits. Every other field, and the checkpoint's files, make up the key.
UNKEYED_FIELDS = frozenset({"log_dir", "port", "claim", "park_s"})
# The per-server variables (zygote_env.is_per_server) that change what a server does; the others are
# where Bazel put one test (its runfiles, TEST_*, HOME, TMPDIR) or what the launcher sets per lease
# (CUDA_VISIBLE_DEVICES, the memory-phase plugin's lock and cover files). The key variables, which the
# zygote imported under, are in the zygote's key. A variable a server reads and no key holds would
# let a server differ from what its borrower asked for: list it here.
KEYED_PER_SERVER = ("VLLM_USE_V2_MODEL_RUNNER", "SLEEPWAKE_MUTANT")


def park_dir(lock_dir: str, key: str = "") -> str:
    return os.path.join(lock_dir, "parked", key) if key else os.path.join(lock_dir, "parked")


def model_identity(model_dir: str) -> list:
    """The checkpoint's files by what they are, not where a test's runfiles link them from."""
    names = sorted(os.listdir(model_dir))
    return [[name, os.path.realpath(os.path.join(model_dir, name))] for name in names]


def lending_key(config, model_dir: str, env: dict, zygote_key: str) -> str:
    """Equal keys: servers that answer alike (ServerConfig but UNKEYED_FIELDS, the checkpoint's files,
    the zygote's key, the per-server variables of KEYED_PER_SERVER and the server's own PYTHONPATH entries
    with each test's private directories written as their variable's name)."""
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in UNKEYED_FIELDS}
    fields["model"] = model_identity(model_dir)
    private = {os.path.abspath(env[v]): "$" + v for v in zygote_env.PER_TEST_DIR_VARS if env.get(v)}

    def relative(path: str) -> str:
        for directory, name in private.items():
            if path == directory or path.startswith(directory + os.sep):
                return name + path[len(directory) :]
        return path

    _, own_path = zygote_env.split_pythonpath(env, "")
    material = {
        "config": fields,
        "zygote": zygote_key,
        "env": {k: env.get(k) for k in KEYED_PER_SERVER},
        "pythonpath": [relative(p) for p in own_path],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _write_owner(lease_fd: int, owner: str) -> None:
    """The slot lock's owner line (gpu_lease.holders prints it), rewritten as the slot changes hands."""
    os.ftruncate(lease_fd, 0)
    os.pwrite(lease_fd, (owner + "\n").encode(), 0)


# -- the supervisor's side ------------------------------------------------------------------------------


def wait_parked(park: dict, lease_fd: int, server, reap, reasons: list, say, report) -> int | None:
    """In the supervisor after "park": returns a pidfd of the test process that claimed the server (its
    control and report pipes now on fds 0 and 1), or None with the reason appended to reasons (the
    caller then tears the tree down)."""
    directory = park_dir(park["lock_dir"], park["key"])
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "%d.sock" % os.getpid())
    listener = unix_socket.listen(path)
    _write_owner(lease_fd, "parked server: supervisor pid=%d key=%s since=%s" % (os.getpid(), park["key"], time.time()))
    report({"parked": path})
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # let go of the test process that parked it: its pipes may close now
        os.dup2(devnull, fd)
    os.close(devnull)
    say("parked at %s for %.0f s" % (path, park["park_s"]))
    deadline = time.monotonic() + park["park_s"]
    try:
        while not reasons:
            if time.monotonic() >= deadline:
                reasons.append("parked %.0f s without a claim" % park["park_s"])
                break
            try:
                readable, _, _ = select.select([listener], [], [], 0.2)
            except InterruptedError:
                continue
            reap()
            if server.returncode is None:
                server.poll()
            if server.returncode is not None:
                reasons.append("server exited with code %s while parked" % server.returncode)
                break
            if readable:
                claimant = _answer(listener, park, lease_fd, server, reasons, say)
                if claimant is not None:
                    return claimant
    finally:
        listener.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return None


def _answer(listener, park: dict, lease_fd: int, server, reasons: list, say) -> int | None:
    """One connection to a parked server: an eviction (reasons gets why), a claim (the claimant's pidfd,
    its pipes on fds 0 and 1), or nothing that changes hands (None; the server stays parked)."""
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        with conn:
            if unix_socket.peer_uid(conn) != os.getuid():
                return None
            message, fds = unix_socket.recv(conn, ANSWER_TIMEOUT_S)
            if message.get("op") == "evict":
                unix_socket.send(conn, {"ok": True})
                reasons.append("evicted by %s" % message.get("by"))
                return None
            ok = message.get("op") == "claim" and len(fds) == 2
            gone = process_tree.pidfd(message.get("pid", -1), message.get("start")) if ok else None
            if gone is None:
                unix_socket.send(conn, {"ok": False, "error": "a claim needs a live test process and 2 pipes"})
                return None
            try:
                unix_socket.send(conn, {"ok": True, "meta": park["meta"], "server_pid": server.pid}, [lease_fd])
            except OSError:
                os.close(gone)
                raise
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        _write_owner(lease_fd, message.get("owner") or "pid=%s" % message.get("pid"))
        say("claimed by test process %s" % message.get("pid"))
        return gone
    except OSError as e:  # the claimant went away mid-answer: the server stays parked
        say("a claim broke off: %s" % e)
        return None
    finally:
        for fd in fds:
            os.close(fd)


# -- the claimant's side --------------------------------------------------------------------------------


@dataclasses.dataclass
class Claim:
    meta: dict  # what the parker said of the server (VllmServer.park)
    lease_fd: int
    supervisor_pid: int
    supervisor_start: float | None
    ctl: object  # the supervisor's new control pipe (write end, binary file)
    report: object  # its new report pipe (read end, binary file)


def _parked(lock_dir: str, key: str = "") -> list[str]:
    """Parked servers' sockets, oldest first (of one key, or of every key)."""
    pattern = os.path.join(park_dir(lock_dir), key or "*", "*.sock")
    paths = []
    for path in glob.glob(pattern):
        try:
            paths.append((os.stat(path).st_mtime, path))
        except FileNotFoundError:
            pass  # claimed or stopped meanwhile
    return [p for _, p in sorted(paths)]


def _ask(path: str, message: dict, fds=()) -> tuple[dict, list[int]]:
    try:
        with unix_socket.connect(path, ANSWER_TIMEOUT_S) as sock:
            unix_socket.send(sock, message, fds)
            return unix_socket.recv(sock, ANSWER_TIMEOUT_S)
    except ConnectionRefusedError:  # nobody listens: its supervisor died without unlinking it
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    except OSError:
        pass  # claimed by another, or stopping: not ours
    return {}, []


def claim(lock_dir: str, key: str, owner: str) -> Claim | None:
    """A parked server of key, now this process's, or None when none could be had."""
    me = os.getpid()
    for path in _parked(lock_dir, key):
        ctl_read, ctl_write = os.pipe()
        report_read, report_write = os.pipe()
        try:
            reply, fds = _ask(
                path,
                {"op": "claim", "pid": me, "start": process_tree.start_time(me), "owner": owner},
                [ctl_read, report_write],
            )
        finally:
            os.close(ctl_read)
            os.close(report_write)
        if reply.get("ok") and len(fds) == 1:
            supervisor = int(os.path.basename(path).split(".")[0])
            return Claim(
                reply["meta"],
                fds[0],
                supervisor,
                process_tree.start_time(supervisor),
                os.fdopen(ctl_write, "wb"),
                os.fdopen(report_read, "rb"),
            )
        for fd in fds + [ctl_write, report_read]:
            os.close(fd)
    return None


def evict_one(lock_dir: str, by: str, older_than_s: float = EVICT_AFTER_S) -> bool:
    """Asks the oldest server parked for longer than older_than_s to stop; True if one agreed."""
    now = time.time()
    for path in _parked(lock_dir):
        try:
            if now - os.stat(path).st_mtime < older_than_s:
                continue
        except FileNotFoundError:
            continue
        if _ask(path, {"op": "evict", "by": by})[0].get("ok"):
            return True
    return False


def evict_all(lock_dir: str, by: str) -> int:
    """Stops every parked server (a run's end: nothing may hold a slot for a run that is not coming)."""
    return sum(bool(_ask(path, {"op": "evict", "by": by})[0].get("ok")) for path in _parked(lock_dir))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Lists or stops the servers parked in a lock dir.")
    parser.add_argument("--lock_dir", default="/tmp/sleepwake-gpu-locks", help="the launcher's lock dir")
    parser.add_argument("--evict_all", action="store_true", help="stop every parked server")
    args = parser.parse_args(argv)
    if args.evict_all:
        n = evict_all(args.lock_dir, "python3 -m tools.launcher.parking --evict_all")
        print("parking: asked %d parked server(s) in %s to stop" % (n, args.lock_dir))
    else:
        for path in _parked(args.lock_dir):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
