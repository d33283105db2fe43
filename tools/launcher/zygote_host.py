"""The zygote host: starts a zygote (zygote.py) per key on request, from outside any test.

Why a host: under `bazel test`, Bazel's process-wrapper is a child subreaper that SIGKILLs whatever a
test leaves behind once the test ends (Bazel 4.2.3, checked: a setsid'd, double-forked process started
by a test was gone when the test finished). A zygote started by one cell would die with that cell and
take the servers it had forked for other cells with it. The host runs outside Bazel's tests
(tools/run_matrix.sh, the bench, or a launcher that is not inside a test starts it) and the zygotes
are its children, so they outlive any one cell.

    python3 -m tools.launcher.zygote_host --lock_dir /tmp/sleepwake-gpu-locks [--idle_s 600]

Requests (unix_socket messages, same uid only) on <lock_dir>/zygote-host.sock:
  {"op": "zygote", "key", "python", "modules", "preloads", "env", "code_root", "idle_s", "start_timeout_s"}
      -> {"ok": true, "socket", "pid", "started"} once that key's zygote serves,
         {"ok": false, "error", "log"} if it could not start;
  {"op": "ping"} -> {"ok": true, "pid", "code", "stopping"} (code: the digest of the host's own sources;
      stopping: a signal reached it, and it exits once its loop sees it).
One host per lock dir (an flock on zygote-host.lock). It exits after idle_s with no live zygote and no
request (0: when killed); on SIGTERM it stops its zygotes first (servers they forked live on).
tools/run_matrix.sh leaves its host serving after the run, so that the next run's cells fork from a
zygote that has imported vLLM already; with --replace_other_code a new host stops one left by another
checkout's code, whose requests this code may not understand.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from tools.launcher import unix_socket

HOST_SOCKET = "zygote-host.sock"
HOST_LOCK = "zygote-host.lock"
HOST_LOG = "zygote-host.log"
LOG_TAIL_LINES = 30
# A key whose zygote failed to start is answered with that failure for this long instead of importing
# again: every cell of a run would otherwise pay a failing import (or its timeout) before its plain start.
FAILURE_MEMORY_S = 600.0
# What a host runs of this package: a host whose digest differs speaks another version of the protocol.
HOST_SOURCES = ("zygote_host.py", "unix_socket.py")
REPLACE_TIMEOUT_S = 30.0  # a host stopping gives its zygotes 10 s each to exit before it lets go of its lock


def sources_digest(names) -> str:
    """A digest of these files of this package (tools/launcher), named and in order: the code a process
    started from them runs (this host's; the zygote's, zygote_client.ZYGOTE_SOURCES)."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in names:
        with open(os.path.join(here, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def code_digest() -> str:
    return sources_digest(HOST_SOURCES)


def _say(message) -> None:
    print("[sleepwake zygote host %d %s] %s" % (os.getpid(), time.strftime("%H:%M:%S"), message), flush=True)


def zygote_paths(lock_dir: str, key: str) -> tuple[str, str]:
    """(socket, log) of the zygote for key."""
    return os.path.join(lock_dir, "zygote-%s.sock" % key), os.path.join(lock_dir, "zygote-%s.log" % key)


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return "\n".join(f.read().decode(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError as e:
        return "(log unreadable: %s)" % e


def key_differences(request: dict, other: dict) -> list[str]:
    """What two zygote requests differ in, by name (values can be long paths): why a second zygote of one
    module imports it again instead of sharing the first."""
    # What zygote_env.zygote_key digests: the interpreter by its real path, not the code root.
    names = ["python"] if os.path.realpath(request["python"]) != os.path.realpath(other["python"]) else []
    names += [field for field in ("modules", "preloads") if request.get(field) != other.get(field)]
    env, other_env = request.get("env") or {}, other.get("env") or {}
    names += sorted(name for name in set(env) | set(other_env) if env.get(name) != other_env.get(name))
    # Equal requests with unequal keys: the clients' code digests differ (zygote_env.zygote_key).
    return names or ["the clients' code"]


@dataclasses.dataclass
class _Zygote:
    proc: subprocess.Popen
    socket: str
    log: str

    def serving(self) -> bool:
        return self.proc.poll() is None and os.path.exists(self.socket)


class Host:
    def __init__(self, lock_dir: str):
        self.lock_dir = lock_dir
        self.code = code_digest()
        self.stopping: list[int] = []  # the signal that stops it: it still answers until its loop sees it
        self.zygotes: dict[str, _Zygote] = {}
        self.last_request = time.monotonic()
        self.active = 0
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.failures: dict[str, tuple[float, dict]] = {}  # key -> (when, the failed reply)
        self.requests: dict[str, dict] = {}  # key -> the request that started its zygote

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def live_zygotes(self) -> int:
        with self._lock:
            return sum(z.proc.poll() is None for z in self.zygotes.values())

    def ensure(self, request: dict) -> dict:
        key = request["key"]
        with self._key_lock(key):
            zygote = self.zygotes.get(key)
            if zygote is not None and zygote.serving():
                return {"ok": True, "socket": zygote.socket, "pid": zygote.proc.pid, "started": False}
            failed_at, failure = self.failures.get(key, (None, {}))
            if failed_at is not None and time.monotonic() - failed_at < FAILURE_MEMORY_S:
                return dict(
                    failure,
                    error="%s (the start %.0f s ago; not retried for %.0f s)"
                    % (failure["error"], time.monotonic() - failed_at, FAILURE_MEMORY_S),
                )
            if zygote is not None and zygote.proc.poll() is None:
                # Its socket is gone: it is exiting (idle or stale); let it finish before replacing it.
                try:
                    zygote.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    zygote.proc.kill()
                    zygote.proc.wait()
            reply = self._start(request)
            if not reply["ok"]:
                self.failures[key] = (time.monotonic(), reply)
            return reply

    def _start(self, request: dict) -> dict:
        key = request["key"]
        sock, log = zygote_paths(self.lock_dir, key)
        preloads = list(request.get("preloads") or [])
        env = dict(request["env"])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (request["code_root"], env.get("PYTHONPATH")) if p)
        read_end, write_end = os.pipe()
        started = time.monotonic()
        with open(log, "ab") as log_file:
            log_file.write(
                (
                    "# zygote for key %s, started %s by the host for %s -m %s\n# preloads: %s\n"
                    "# key environment:\n%s\n"
                    % (
                        key,
                        time.strftime("%Y-%m-%d %H:%M:%S"),
                        request["python"],
                        " | ".join(request["modules"]),
                        " ".join(preloads) or "none",
                        "\n".join("#   %s=%s" % kv for kv in sorted(request["env"].items())),
                    )
                ).encode()
            )
            log_file.flush()
            proc = subprocess.Popen(
                # -s: no user site-packages, which would follow the zygote's HOME (a per-server variable).
                [
                    request["python"],
                    "-s",
                    "-m",
                    "tools.launcher.zygote",
                    "--socket",
                    sock,
                ]
                + [arg for name in request["modules"] for arg in ("--module", name)]
                + [arg for name in preloads for arg in ("--preload", name)]
                + ["--key", key, "--idle_s", str(request.get("idle_s", 60.0)), "--ready_fd", str(write_end)],
                env=env,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                start_new_session=True,
            )
        os.close(write_end)
        timeout_s = float(request.get("start_timeout_s", 300.0))
        with os.fdopen(read_end, "rb") as ready:
            line = ready.readline() if select.select([ready], [], [], timeout_s)[0] else b""
        try:
            reply = json.loads(line) if line.strip() else {}
        except ValueError:
            reply = {}
        if not reply.get("ok"):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            error = reply.get("error") or (
                "no word from the zygote within %.0f s" % timeout_s if not line else "the zygote wrote %r" % line
            )
            _say("zygote for key %s failed to start: %s" % (key, error))
            return {"ok": False, "error": "%s; last lines of %s:\n%s" % (error, log, _tail(log)), "log": log}
        with self._lock:
            self.zygotes[key] = _Zygote(proc, sock, log)
        _say(
            "zygote %d for key %s serves %s (%.1f s to import)%s"
            % (
                proc.pid,
                key,
                ", ".join(request["modules"]),
                time.monotonic() - started,
                self.another_zygote_note(request),
            )
        )
        with self._lock:
            self.requests[key] = request
        return {"ok": True, "socket": sock, "pid": proc.pid, "started": True}

    def another_zygote_note(self, request: dict) -> str:
        """Where a zygote of one of the same modules was started before under another key, what the keys
        differ in: each such zygote is one more import of the module (docs/design.md)."""
        with self._lock:
            earlier = [
                (k, r)
                for k, r in self.requests.items()
                if set(r["modules"]) & set(request["modules"]) and k != request["key"]
            ]
        if not earlier:
            return ""
        key, other = earlier[-1]
        return "; the zygote of key %s imported it too, under a key that differs in: %s" % (
            key,
            ", ".join(key_differences(request, other)),
        )

    def handle(self, conn) -> None:
        with conn:
            try:
                if unix_socket.peer_uid(conn) != os.getuid():
                    _say("ignored a connection from another uid")
                    return
                message, fds = unix_socket.recv(conn, 10.0)
                for fd in fds:
                    os.close(fd)
                op = message.get("op")
                if op == "ping":
                    reply = {"ok": True, "pid": os.getpid(), "code": self.code, "stopping": bool(self.stopping)}
                elif op == "zygote":
                    reply = self.ensure(message)
                else:
                    reply = {"ok": False, "error": "unknown op %r" % op}
                unix_socket.send(conn, reply)
            except (OSError, KeyError, ValueError) as e:
                _say("a request failed: %r" % e)
            finally:
                with self._lock:
                    self.active -= 1
                    self.last_request = time.monotonic()

    def stop_zygotes(self) -> None:
        with self._lock:
            zygotes = list(self.zygotes.values())
        for zygote in zygotes:
            if zygote.proc.poll() is None:
                zygote.proc.terminate()  # the zygote only: the supervisors it forked have their own session
        for zygote in zygotes:
            try:
                zygote.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                zygote.proc.kill()


def ping(lock_dir: str) -> dict | None:
    """The serving host's answer to a ping, or None if none answers."""
    try:
        with unix_socket.connect(os.path.join(lock_dir, HOST_SOCKET), 5.0) as conn:
            unix_socket.send(conn, {"op": "ping"})
            return unix_socket.recv(conn, 5.0)[0]
    except (OSError, ValueError):
        return None


def await_host(lock_dir: str, timeout_s: float) -> dict | None:
    """The ping answer of a host of this code on lock_dir, once one answers within timeout_s; else None."""
    deadline = time.monotonic() + timeout_s
    code = code_digest()
    while True:
        answer = ping(lock_dir)
        if answer is not None and answer.get("code") == code and not answer.get("stopping"):
            return answer
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)  # a new host listens within ~0.1 s; one replacing another within REPLACE_TIMEOUT_S


def _take_lock(lock_fd: int, lock_dir: str, replace: bool) -> bool:
    """Whether this process is to serve lock_dir, holding its host lock. Without replace, only if no host
    holds the lock. With replace, a host of this code that answers keeps serving; one of other code is
    stopped; one that holds the lock but answers no more is on its way out and is waited for."""
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        if not replace:
            _say("another host serves %s; exiting" % lock_dir)
            return False
    deadline, stopped, code = time.monotonic() + REPLACE_TIMEOUT_S, None, code_digest()
    while time.monotonic() < deadline:
        answer = ping(lock_dir)
        if answer is not None and answer.get("stopping"):
            answer = None  # on its way out: its lock is about to be free
        if answer is not None and answer.get("code") == code:
            _say("another host serves %s; exiting" % lock_dir)
            return False
        if answer is not None and answer.get("pid") != stopped:
            _say(
                "host %s serves %s with other code (%s, this is %s); stopping it"
                % (answer.get("pid"), lock_dir, answer.get("code"), code)
            )
            stopped = answer["pid"]
            os.kill(stopped, signal.SIGTERM)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.05)  # flock has no timeout of its own
    _say("the host lock of %s is still held after %.0f s; exiting" % (lock_dir, REPLACE_TIMEOUT_S))
    return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lock_dir",
        required=True,
        help="The GPU lease dir (ServerConfig.lock_dir); the host's and the zygotes' sockets and logs go there.",
    )
    parser.add_argument(
        "--idle_s",
        type=float,
        default=120.0,
        help="Exit after this long with no live zygote and no request (0: only when killed).",
    )
    parser.add_argument(
        "--replace_other_code",
        action="store_true",
        help="If the host serving --lock_dir runs"
        " other sources than this one's (HOST_SOURCES), stop it and serve in its place, as for"
        " a host on its way out; a host of these sources is left serving.",
    )
    parser.add_argument(
        "--await_s",
        type=float,
        default=None,
        help="Serve nothing: wait at most this long for"
        " a host of these sources to answer on --lock_dir; exit 0 once one does, else 1.",
    )
    args = parser.parse_args(argv)
    if args.await_s is not None:
        return 0 if await_host(args.lock_dir, args.await_s) else 1
    os.makedirs(args.lock_dir, exist_ok=True)
    lock_fd = os.open(os.path.join(args.lock_dir, HOST_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    if not _take_lock(lock_fd, args.lock_dir, args.replace_other_code):
        return 0
    host = Host(args.lock_dir)
    listener = unix_socket.listen(os.path.join(args.lock_dir, HOST_SOCKET))
    stopping = host.stopping
    signal.signal(signal.SIGTERM, lambda signum, _: stopping.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _: stopping.append(signum))
    _say("serving %s (idle exit after %s)" % (args.lock_dir, "%.0f s" % args.idle_s if args.idle_s else "never"))
    while not stopping:
        try:
            readable, _, _ = select.select([listener], [], [], 1.0)
        except InterruptedError:
            continue
        if readable:
            conn, _ = listener.accept()
            with host._lock:
                host.active += 1
            threading.Thread(target=host.handle, args=(conn,), daemon=True).start()
            continue
        with host._lock:
            idle_for = time.monotonic() - host.last_request
            busy = host.active
        if args.idle_s and not busy and idle_for >= args.idle_s and host.live_zygotes() == 0:
            _say("idle for %.0f s with no zygote; exiting" % idle_for)
            break
    # Unlink before closing, under the lock: a launcher then either reaches this host or starts another.
    os.unlink(os.path.join(args.lock_dir, HOST_SOCKET))
    listener.close()
    if stopping:
        _say("signal %d: stopping %d zygote(s)" % (stopping[0], host.live_zygotes()))
        host.stop_zygotes()
    os.close(lock_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
