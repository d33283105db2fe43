"""The launcher's side of the zygote: find (through the host) the zygote for a server's key and have it
fork the server's supervisor, which the launcher then drives like the plain path's (ForeignProcess).

Any reason the zygote cannot be used is a ZygoteUnavailable with a one-line reason; the launcher then
starts the server plainly (start_mode auto) or fails with it (start_mode zygote).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time

from tools.launcher import process_tree, unix_socket, zygote_env, zygote_host

_HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(_HERE))
# The zygote runs these files; a change to any of them keys new zygotes (zygote_env.zygote_key).
ZYGOTE_SOURCES = ("zygote.py", "supervisor.py", "process_tree.py", "unix_socket.py", "zygote_env.py")
HOST_START_TIMEOUT_S = 10.0  # the host imports only the standard library: it listens within ~0.1 s
FORK_REPLY_TIMEOUT_S = 30.0  # a fork of the pre-imported image takes milliseconds
ATTEMPTS = 3  # a zygote may exit (idle, stale) between the host's answer and the fork request
_hosts_started: list = []  # Popen handles of hosts this process started, kept so they are reaped


class ZygoteUnavailable(Exception):
    """The zygote cannot start this server; str() is the one-line reason."""


def code_digest() -> str:
    return zygote_host.sources_digest(ZYGOTE_SOURCES)


def inside_bazel_test(environ) -> bool:
    return bool(environ.get("TEST_TMPDIR"))


def start_host(lock_dir: str, idle_s: float, environ) -> subprocess.Popen:
    """Starts a host for lock_dir in its own session (it outlives this process)."""
    os.makedirs(lock_dir, exist_ok=True)
    env = {"PATH": environ.get("PATH", os.defpath), "PYTHONPATH": ROOT}
    with open(os.path.join(lock_dir, zygote_host.HOST_LOG), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.launcher.zygote_host", "--lock_dir", lock_dir, "--idle_s", str(idle_s)],
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _hosts_started.append(proc)
    return proc


@contextlib.contextmanager
def private_host(lock_dir: str, environ=os.environ):
    """A zygote host on lock_dir for the block, listening once the block begins, for servers that only this
    process starts on lock_dir: a test that owns its lock dir may start one inside Bazel, since nothing
    outlives that test. Stopping it (SIGTERM) stops its zygotes; ZygoteUnavailable if it does not listen."""
    proc = start_host(lock_dir, idle_s=0, environ=environ)
    try:
        connect_started_host(lock_dir).close()
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=zygote_host.REPLACE_TIMEOUT_S)


def _connect_host(lock_dir: str, environ, host_idle_s: float):
    path = os.path.join(lock_dir, zygote_host.HOST_SOCKET)
    try:
        return unix_socket.connect(path, HOST_START_TIMEOUT_S)
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    if inside_bazel_test(environ):
        raise ZygoteUnavailable(
            "no zygote host serves %s, and this process runs inside a Bazel test, where a host it started"
            " would be killed with the test (Bazel's process-wrapper reaps what a test leaves) and take"
            " other cells' servers with it; start one outside Bazel first (tools/run_matrix.sh does):"
            " PYTHONPATH=%s python3 -m tools.launcher.zygote_host --lock_dir %s" % (lock_dir, ROOT, lock_dir)
        )
    start_host(lock_dir, host_idle_s, environ)
    return connect_started_host(lock_dir)


def connect_started_host(lock_dir: str):
    """A connection to the host just started for lock_dir, once it listens; ZygoteUnavailable if it does not
    within HOST_START_TIMEOUT_S."""
    path = os.path.join(lock_dir, zygote_host.HOST_SOCKET)
    deadline = time.monotonic() + HOST_START_TIMEOUT_S
    while True:
        try:
            return unix_socket.connect(path, HOST_START_TIMEOUT_S)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() >= deadline:
                raise ZygoteUnavailable(
                    "started a zygote host for %s but it did not listen within %.0f s; see %s"
                    % (lock_dir, HOST_START_TIMEOUT_S, os.path.join(lock_dir, zygote_host.HOST_LOG))
                ) from None
            time.sleep(0.05)  # the host binds within ~0.1 s of starting; connect() cannot wait for a path


def _zygote_socket(lock_dir: str, request: dict, environ, host_idle_s: float) -> str:
    sock = _connect_host(lock_dir, environ, host_idle_s)
    with sock:
        try:
            unix_socket.send(sock, request)
            reply, _ = unix_socket.recv(sock, request["start_timeout_s"] + 30)
        except OSError as e:
            raise ZygoteUnavailable("the zygote host at %s did not answer: %s" % (lock_dir, e)) from None
    if not reply.get("ok"):
        raise ZygoteUnavailable(
            "the zygote host could not start a zygote for %s: %s" % (", ".join(request["modules"]), reply.get("error"))
        )
    return reply["socket"]


class ForeignProcess:
    """A process this one did not fork (a zygote's child), with Popen's poll/wait/stdin/stdout.

    Waiting goes through a pidfd. returncode becomes 0 once it is gone: only its parent (the zygote)
    sees the real status, and the supervisor reports the server's own in its last line anyway.
    """

    def __init__(self, pid: int, start_time: float | None, stdin, stdout):
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._pidfd: int | None
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = None
        if self._pidfd is None or not process_tree.alive(pid, start_time):
            self._gone()

    def _gone(self) -> None:
        self.returncode = 0
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    # Running while it has a pidfd: _gone() closes it and sets the returncode.
    def poll(self) -> int | None:
        if self._pidfd is not None and select.select([self._pidfd], [], [], 0)[0]:
            self._gone()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self._pidfd is not None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                # (only with a timeout: without one, select waits until the process is gone)
                raise subprocess.TimeoutExpired(["supervisor %d (forked by a zygote)" % self.pid], timeout or 0.0)
            self._gone()
        return self.returncode


def start_supervisor(
    spec: dict,
    log_fd: int,
    lease_fd: int | None,
    *,
    lock_dir: str,
    idle_s: float,
    start_timeout_s: float,
    host_idle_s: float,
    environ,
    modules=(),
    preloads=(),
) -> tuple[ForeignProcess, str]:
    """Has the zygote that imported modules (default: spec's `python -m module` alone) and then preloads
    fork a supervisor running spec; returns it and the zygote's key. Raises ZygoteUnavailable with the
    reason when that cannot be done."""
    argv = spec["argv"]
    if len(argv) < 3 or argv[1] != "-m":
        raise ZygoteUnavailable("the server command is not `python -m module ...` (%s)" % argv[:3])
    modules = tuple(modules) or (argv[2],)
    if argv[2] not in modules:
        raise ValueError("the server runs %s, which the zygote's modules %s leave out" % (argv[2], modules))
    if not hasattr(os, "pidfd_open"):
        raise ZygoteUnavailable(
            "this Python (%s) has no os.pidfd_open (Linux >= 5.3, Python >= 3.9)" % sys.version.split()[0]
        )
    key, env = zygote_env.zygote_key(argv[0], modules, spec["env"], code_digest(), preloads)
    request = {
        "op": "zygote",
        "key": key,
        "python": argv[0],
        "modules": list(modules),
        "preloads": list(preloads),
        "env": env,
        "code_root": ROOT,
        "idle_s": idle_s,
        "start_timeout_s": start_timeout_s,
    }
    problems = []
    for _ in range(ATTEMPTS):
        path = _zygote_socket(lock_dir, request, environ, host_idle_s)
        ctl_read, ctl_write = os.pipe()
        report_read, report_write = os.pipe()
        fds = [ctl_read, report_write, log_fd] + ([lease_fd] if lease_fd is not None else [])
        try:
            with unix_socket.connect(path, FORK_REPLY_TIMEOUT_S) as sock:
                unix_socket.send(sock, {"op": "fork", "key": key, "spec": spec}, fds)
                reply, _ = unix_socket.recv(sock, FORK_REPLY_TIMEOUT_S)
        except OSError as e:  # gone between the host's answer and now (idle exit): ask the host again
            problems.append("zygote at %s: %s" % (path, e))
            reply = {}
        finally:
            os.close(ctl_read)
            os.close(report_write)
        if reply.get("ok"):
            return ForeignProcess(
                reply["pid"], reply.get("start"), os.fdopen(ctl_write, "wb"), os.fdopen(report_read, "rb")
            ), key
        os.close(ctl_write)
        os.close(report_read)
        if reply and not reply.get("stale"):
            raise ZygoteUnavailable("the zygote for key %s refused: %s" % (key, reply.get("error")))
        if reply:
            problems.append(str(reply.get("error")))
    raise ZygoteUnavailable("the zygote for key %s went away %d times: %s" % (key, ATTEMPTS, "; ".join(problems)))
