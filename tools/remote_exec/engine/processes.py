"""Background processes logged to a file, waited on by a readiness condition, always stopped."""

from __future__ import annotations

import contextlib
import pathlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator

# How often a readiness condition is polled: these services offer no readiness signal to wait on.
_POLL_SECONDS = 0.1


class ServiceError(RuntimeError):
    """A service did not start; the message names it and ends with its log's tail."""


def log_tail(path: pathlib.Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def port_open(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    return check


def log_contains(path: pathlib.Path, text: str) -> Callable[[], bool]:
    return lambda: path.exists() and text in path.read_text(errors="replace")


@contextlib.contextmanager
def spawned(cmd: list[str], log: pathlib.Path, stop_signal: int = signal.SIGTERM) -> Iterator[subprocess.Popen]:
    """Runs cmd with stdout+stderr in log; on exit sends stop_signal, then SIGKILL after 20 s."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(stop_signal)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_until(what: str, ready: Callable[[], bool], proc: subprocess.Popen, log: pathlib.Path, timeout: float) -> None:
    """Returns once ready() holds; raises ServiceError if proc exits first or timeout passes."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise ServiceError(
                f"{what} exited with {proc.returncode} before it was ready (log {log}):\n{log_tail(log)}"
            )
        if time.monotonic() > deadline:
            raise ServiceError(f"{what} was not ready after {timeout:.0f} s (log {log}):\n{log_tail(log)}")
        time.sleep(_POLL_SECONDS)


@contextlib.contextmanager
def started(
    what: str,
    cmd: list[str],
    log: pathlib.Path,
    ready: Callable[[], bool],
    timeout: float,
    stop_signal: int = signal.SIGTERM,
) -> Iterator[subprocess.Popen]:
    """spawned(cmd), yielded once ready() holds."""
    with spawned(cmd, log, stop_signal) as proc:
        wait_until(what, ready, proc, log, timeout)
        yield proc


def run_to_completion(what: str, cmd: list[str], log: pathlib.Path, timeout: float) -> None:
    """Runs cmd to its end with output in log; a failure raises ServiceError with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        try:
            rc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            raise ServiceError(f"{what} did not finish in {timeout:.0f} s (log {log}):\n{log_tail(log)}") from None
    if rc != 0:
        raise ServiceError(f"{what} failed with exit code {rc} (log {log}):\n{log_tail(log)}")
