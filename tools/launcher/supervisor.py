"""A small process between the test and the vLLM server that makes the server die with the test.

Why: Bazel kills a test on timeout with SIGTERM then SIGKILL, and a test process can die any other way
(SIGKILL, a crash in a fixture). vLLM's engine core and workers outlive a killed API server (#55846),
and they may setsid, so neither a process group nor the test's own cleanup code reaches them all.

How (python -m tools.launcher.supervisor, started by server.py):
  * stdin is a pipe from the test process. The first line is the JSON spec (argv, env, cwd, grace_s,
    parent_pid). Later, "stop" asks for a teardown ("stop fast": with the capped grace below); EOF
    means the test process is gone, however it died: the kernel closes the pipe's write end when its
    last holder exits.
  * PR_SET_CHILD_SUBREAPER: descendants orphaned by a dead parent (a double-forked or setsid'd worker)
    are reparented to this process instead of init, so they stay in the tree snapshotted below.
  * PR_SET_PDEATHSIG(SIGTERM): a second route for the same news, for when a forked copy of the test
    process keeps the pipe open.
  * The server runs in its own session, so signals aimed at the test's process group (Ctrl-C, Bazel's
    group SIGTERM) reach only this process, which tears the tree down in order (engine core and
    workers never see half a shutdown). The server root also gets PDEATHSIG SIGKILL as a last resort
    for when this process itself is SIGKILLed.
  * Teardown: snapshot every descendant, SIGTERM, grace period, snapshot again, SIGKILL survivors,
    reap. On a signal the grace is capped so the SIGKILL lands before Bazel's own (15 s by default).
  * stdout reports JSON lines to the test process: {"pid": N} once started, then {"reason", "rc",
    "killed"} at the end. stderr is the server's log file, so its decisions appear in the log.
  * "park" (a forked supervisor only, which is no test process's child): the server waits for the next
    test process that claims it, which then owns this process as the first one did (parking.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable

from tools.launcher import gpu_lease, parking, process_tree
from tools.launcher.errors import GpuUnavailableError, ServerReleaseError
from tools.launcher.nvml import Nvml, NvmlReadings, wait_for_release

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
SIGNAL_GRACE_S = 5.0


def prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(%d, %d) failed" % (option, value))


def _die_with_parent() -> None:  # runs in the server's child between fork and exec
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _say(message) -> None:
    print("[sleepwake supervisor %d] %s" % (os.getpid(), message), file=sys.stderr, flush=True)


def _report(record: dict) -> None:
    try:
        print(json.dumps(record), flush=True)
    except (BrokenPipeError, OSError):
        pass  # the test process is gone; the log has the story


def _read_line(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        data += chunk
    return data


class _Reaper:
    """Reaps every exited child (orphans land here), keeping the server's own exit status."""

    def __init__(self, server: subprocess.Popen):
        self.server = server

    def __call__(self) -> None:
        for pid, status in process_tree.reap_exited():
            if pid == self.server.pid:
                self.server.returncode = os.waitstatus_to_exitcode(status)


def _launch_popen(spec: dict):
    """The plain path: exec the server's argv in a new session, dying with this process."""
    return subprocess.Popen(
        spec["argv"],
        env=spec["env"],
        cwd=spec.get("cwd"),
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr.fileno(),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def main() -> int:
    """The plain path: started by the test process, which is this process's parent."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    spec = json.loads(_read_line(0) or b"null")
    if spec is None or os.getppid() != spec["parent_pid"]:
        _say("the test process was gone before the server started; not starting it")
        return 1
    return supervise(spec, _launch_popen)


def supervise(spec: dict, launch, test_gone_fd: int | None = None) -> int:
    """Starts the server with launch(spec) (an object with pid, returncode and poll()), then tears its
    tree down on "stop", on EOF of stdin, on SIGTERM/SIGINT, on the server's exit, or when
    test_gone_fd (a pidfd of the test process, where this process is not its child) turns readable.
    "park" and a JSON line hand the server to the next test process that claims it (parking.py), where
    spec["lease_fd"] names the slot lock this process holds."""
    reasons: list[str] = []
    signal.signal(signal.SIGTERM, lambda signum, _: reasons.append("got SIGTERM"))
    signal.signal(signal.SIGINT, lambda signum, _: reasons.append("got SIGINT"))
    server = launch(spec)
    _report({"pid": server.pid})
    reap = _Reaper(server)
    parked: dict | None = None  # the park message while the server waits parked
    while not reasons:
        watched = [0] + ([test_gone_fd] if test_gone_fd is not None else [])
        try:
            readable, _, _ = select.select(watched, [], [], 0.2)
        except InterruptedError:
            continue
        if 0 in readable:
            line = _read_line(0).strip()
            if line == b"park":
                park = json.loads(_read_line(0) or b"null")
                if not park or spec.get("lease_fd") is None:
                    _report({"error": "nothing to park with: %s" % ("no lease" if park else "no park message")})
                    continue
                if test_gone_fd is not None:
                    os.close(test_gone_fd)
                parked = park
                test_gone_fd = parking.wait_parked(park, spec["lease_fd"], server, reap, reasons, _say, _report)
                if test_gone_fd is not None:
                    parked = None
                continue
            reasons.append(
                {b"stop": "asked to stop", b"stop fast": "asked to stop fast"}.get(
                    line, "test process gone (pipe closed)"
                )
            )
        elif readable:
            reasons.append("test process gone (pidfd)")
        reap()
        if server.returncode is None:
            server.poll()
        if server.returncode is not None:
            reasons.append("server exited with code %s" % server.returncode)
    ordered = parked is not None or reasons[0] == "asked to stop" or reasons[0].startswith("server exited")
    grace = spec["grace_s"] if ordered else min(spec["grace_s"], SIGNAL_GRACE_S)
    _say("stopping the server tree (%s): SIGTERM, %.1f s grace, then SIGKILL" % (reasons[0], grace))
    killed = stop_tree(parked, lambda: process_tree.terminate_tree(os.getpid(), grace, include_root=False, reap=reap))
    left = process_tree.survivors(killed)
    _say("tree of %d process(es) %s" % (len(killed), "gone" if not left else "NOT gone: %s" % sorted(left)))
    if parked is not None and parked["meta"].get("cover"):
        with contextlib.suppress(OSError):
            os.unlink(parked["meta"]["cover"])
    _report({"reason": reasons[0], "rc": server.returncode, "killed": sorted(killed), "left": sorted(left)})
    return 0


def stop_tree(
    parked: dict | None, terminate: Callable[[], dict], nvml_factory: Callable[[], NvmlReadings] = Nvml
) -> dict:
    """Tears the server's tree down with terminate() and returns what it returned (the processes it
    ended). A parked server's stop is nobody's but this process's: it takes the RELEASE phase a test's
    stop takes, and like that stop (server.py _tear_down) holds it until NVML lists none of the tree.
    The driver frees a process's device memory after the process is gone, and a neighbour's EXCLUSIVE
    window opening in between would read the freeing as its own shortfall (seen on the H200: an evicted
    server's 3.6 GB read by a neighbour's immediacy window as memory not restored at wake)."""
    if parked is None or not parked.get("memory_lock"):
        return terminate()
    with gpu_lease.memory_phase_at(
        parked["memory_lock"], gpu_lease.RELEASE, parked["lease_timeout_s"], what="teardown of a parked server"
    ):
        killed = terminate()
        try:
            nvml = nvml_factory()
        except GpuUnavailableError:
            return killed  # no NVIDIA GPU here, so the tree held no device memory
        try:
            wait_for_release(nvml, list(killed), 0, None, 0, parked["release_timeout_s"])
        except ServerReleaseError as e:
            _say(e)  # nobody to raise to: the log says it, and the next start's own release check sees it
    return killed


if __name__ == "__main__":
    sys.exit(main())
