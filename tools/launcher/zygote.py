"""The zygote: imports server modules (vLLM's API server, the door host) once, then forks a supervisor and
its server per request, so a start no longer pays the import (tens of seconds, far more with dozens at
once: docs/design.md).

Started by the zygote host (zygote_host.py), one per key (zygote_env.zygote_key), with the key's
environment: python -m tools.launcher.zygote --socket PATH --module M [--module M2 ...] [--preload P ...]
--key K --idle_s S --ready_fd N

  * Import: the modules are imported, in order, with environment reads recorded (EnvReads). A per-server variable
    read then would keep this process's value in every server; unless zygote_env.IMPORT_SAFE says why
    that read is harmless, every fork is refused and the launcher starts plainly, naming the variable.
  * Preloads: modules the server would import only later, in every server (vLLM's engine core imports
    its worker, model runner and model after the API server forks it), imported after the module under
    the same rules: their reads and CUDA count as the module's. A MODULE:FUNCTION preload also calls the
    function, a cached value every server computes (Triton's cache key). One that fails is logged and
    left to the server, which imports it itself (or fails as a plain start would).
  * Freeze: then every object the imports made goes into the permanent generation (gc.freeze), so a
    fork's garbage collections walk only what that server allocated (freeze_heap says why).
  * Requests (unix_socket messages on PATH, same uid only): {"op": "ping"} and {"op": "fork", "key",
    "spec"} with three or four descriptors: the control pipe's read end, the report pipe's write end,
    the server log, and optionally the GPU lease. A fork is refused, with the reason, when the key is
    another zygote's, the modules' files changed since the import (the zygote then exits: its image is
    stale), CUDA is initialised here (a forked CUDA context is unusable), the argv is not
    `<this python> -m <one of its modules> ...`, or a per-server sys.path entry would shadow a module
    already imported.
  * Fork: the child becomes the server's supervisor (supervisor.supervise) with the two pipes as its
    stdin and stdout. It is not the test process's child, so a pidfd of the test process stands in for
    PDEATHSIG. It forks the server, which takes the request's environment, sys.path, cwd and argv and
    runs the argv's module as __main__ (runpy), as `python -m` would.
  * Orphans: the zygote is a child subreaper. If a supervisor dies without its teardown (SIGKILL, the
    OOM killer), its server dies by PDEATHSIG and the server's orphans (vLLM's engine core) land here;
    the zygote kills them within ORPHAN_CHECK_S, where the plain path leaves them to Bazel's
    process-wrapper at the end of the test.
  * Idle: with no request for idle_s the zygote removes its socket and exits. Supervisors and servers
    it forked live on, reparented.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import dataclasses
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType

from tools.launcher import process_tree, supervisor, unix_socket, zygote_env

REQUEST_TIMEOUT_S = 10.0  # a launcher sends its request right after connecting
ORPHAN_CHECK_S = 2.0  # how often an idle zygote looks for orphans of a dead supervisor
_OWN_PACKAGE = zygote_env.OWN_PACKAGE  # dropped from a server's modules


def _say(message) -> None:
    print("[sleepwake zygote %d] %s" % (os.getpid(), message), file=sys.stderr, flush=True)


# Frames of the standard library's environment plumbing: the read is attributed to their caller.
_PLUMBING = ("os", "_collections_abc", "posixpath", "genericpath")


def _caller() -> str:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and (
        os.path.basename(frame.f_code.co_filename)[:-3] in _PLUMBING
        or frame.f_code.co_filename.strip("<>").split(" ")[-1] in _PLUMBING
    ):
        frame = frame.f_back
    return "%s:%d" % (frame.f_code.co_filename, frame.f_lineno) if frame else "?"


class EnvReads:
    """Records the environment variables read while the block runs: name -> sites ("file:line").
    Reads made while walking the whole environment (tqdm looks for TQDM_*) are not point reads."""

    def __init__(self):
        self.sites: dict[str, set] = {}
        self._bulk_sites: set = set()

    def __enter__(self) -> EnvReads:
        # os._Environ defines both; get(), `in` and os.getenv() go through __getitem__.
        cls = type(os.environ)
        self._saved = (cls.__getitem__, cls.__iter__)
        getitem, iterate = self._saved
        reads = self

        def __getitem__(env, key):
            if isinstance(key, str):
                reads.sites.setdefault(key, set()).add(_caller())
            return getitem(env, key)

        def __iter__(env):
            reads._bulk_sites.add(_caller())
            return iterate(env)

        cls.__getitem__, cls.__iter__ = __getitem__, __iter__  # type: ignore[method-assign]  # the point
        return self

    def __exit__(self, *exc) -> None:
        type(os.environ).__getitem__, type(os.environ).__iter__ = self._saved  # type: ignore[method-assign]

    def point_reads(self) -> dict[str, list[str]]:
        out = {name: sorted(sites - self._bulk_sites) for name, sites in self.sites.items()}
        return {name: sites for name, sites in out.items() if sites}


# cuDeviceGetCount's answer before any cuInit in this process (cuda.h CUDA_ERROR_NOT_INITIALIZED).
_CUDA_ERROR_NOT_INITIALIZED = 3


def driver_initialized(load=ctypes.CDLL) -> bool:
    """Whether this process has called cuInit, which torch's own flag misses: torch.cuda.is_available()
    and NVML-less device counts call it without torch's lazy init. A forked child of such a process gets
    CUDA_ERROR_NOT_INITIALIZED on its first CUDA call, in every server. cuDeviceGetCount answers
    NOT_INITIALIZED until cuInit and changes nothing; without a driver (a CPU machine) nothing can be."""
    try:
        driver = load("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return driver.cuDeviceGetCount(ctypes.byref(count)) != _CUDA_ERROR_NOT_INITIALIZED


def cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return (torch is not None and bool(torch.cuda.is_initialized())) or driver_initialized()


def module_files_state(module: str, *more: str) -> list:
    """(path, inode, mtime, size) of each module's file and its top-level package's __init__: a
    reinstall (pip replaces the files) changes them, and this zygote's image is then stale."""
    modules = [m.partition(":")[0] for m in (module,) + more]  # a MODULE:FUNCTION preload is MODULE's
    names = [name for m in modules for name in (m.split(".")[0], m)]
    out = []
    for name in dict.fromkeys(names):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            try:
                st = os.stat(path)
                out.append([path, st.st_ino, st.st_mtime_ns, st.st_size])
            except OSError:
                out.append([path, None, None, None])
    return out


def _top_level_names(entry: str) -> set:
    """Names importable at top level from a sys.path entry (packages, modules, extensions)."""
    try:
        names = os.listdir(entry)
    except OSError:
        return set()
    out = set()
    for name in names:
        base = name.split(".")[0]
        if base.isidentifier() and (name == base or name.endswith((".py", ".so", ".pyc"))):
            out.add(base)
    return out


@dataclasses.dataclass
class Refusal:
    reason: str
    stale: bool = False  # the zygote exits after refusing: its image no longer matches the files


@dataclasses.dataclass
class Zygote:
    """What a fork is checked against: the imported modules and the state the import left."""

    modules: tuple  # the modules a fork may run, imported in this order
    key: str
    python: str
    key_pythonpath: list  # abspath'd PYTHONPATH entries this zygote imported with
    site_path: list  # sys.path entries that do not come from PYTHONPATH (stdlib, site-packages)
    files: list  # module_files_state of the modules and the preloads at import
    unsafe_reads: dict  # per-server variables read at import and not in IMPORT_SAFE -> sites
    loaded: dict  # top-level module name -> the sys.path entry it was imported from
    import_fds: frozenset  # descriptors the import opened: part of the image, so servers keep them
    preloaded: tuple = ()  # the preloads that imported
    pid: int = 0
    socket_path: str = ""
    supervisors: set = dataclasses.field(default_factory=set)  # PIDs of the supervisors it forked
    own_children: frozenset = frozenset()  # children the import itself left (not orphans)
    cuda_initialized: Callable[[], bool] = cuda_initialized  # tests replace it

    def refusal(self, message: dict) -> Refusal | None:
        if message.get("key") != self.key:
            return Refusal("this zygote serves key %s, the request is for %s" % (self.key, message.get("key")))
        if module_files_state(*self.modules, *self.preloaded) != self.files:
            return Refusal(
                "the files of %s%s changed since this zygote imported them (reinstalled?); a new zygote"
                " imports them again" % (", ".join(self.modules), " or of its preloads" if self.preloaded else ""),
                stale=True,
            )
        if self.unsafe_reads:
            return Refusal(
                "importing %s%s reads per-server variables, which would keep this zygote's values"
                " in every server: %s. Key the zygote on them (zygote_env.PER_SERVER_*) or list"
                " why they are harmless in zygote_env.IMPORT_SAFE"
                % (
                    ", ".join(self.modules),
                    " and its preloads" if self.preloaded else "",
                    ", ".join("%s (%s)" % (name, sites[0]) for name, sites in sorted(self.unsafe_reads.items())),
                )
            )
        if self.cuda_initialized():
            return Refusal("CUDA is initialised in the zygote; a forked child cannot use it")
        spec = message.get("spec") or {}
        argv = spec.get("argv") or []
        if (
            len(argv) < 3
            or argv[1] != "-m"
            or argv[2] not in self.modules
            or os.path.realpath(argv[0]) != os.path.realpath(self.python)
        ):
            return Refusal(
                "this zygote runs `%s -m %s`, the request's argv starts %s"
                % (self.python, " | ".join(self.modules), argv[:3])
            )
        shadows = self.shadowed(spec)
        if shadows:
            return Refusal(
                "per-server sys.path entries would shadow modules the zygote already imported: %s" % "; ".join(shadows)
            )
        return None

    def server_path(self, spec: dict) -> list:
        """The sys.path `python -m` would start with: cwd, PYTHONPATH, then the interpreter's own."""
        entries = [os.path.abspath(e) for e in spec["env"].get("PYTHONPATH", "").split(os.pathsep) if e]
        return [spec.get("cwd") or os.getcwd()] + entries + self.site_path

    def shadowed(self, spec: dict) -> list:
        """Modules already imported that the server's sys.path would find elsewhere first."""
        path = self.server_path(spec)
        first: dict[str, int] = {}
        for index, entry in enumerate(path):
            first.setdefault(entry, index)
        out = []
        for index, entry in enumerate(path):
            if entry in self.key_pythonpath or entry in self.site_path or first[entry] != index:
                continue
            for name in sorted(_top_level_names(entry) & set(self.loaded)):
                origin = self.loaded[name]
                if origin != entry and first.get(origin, len(path)) > index:
                    out.append("%s in %s (imported from %s)" % (name, entry, origin))
        return out


def _loaded_top_level() -> dict:
    """Top-level module name -> the sys.path entry its file lies in (built-ins and the zygote's own
    package are left out: the first have no file, the second is dropped from every server)."""
    out = {}
    for name, mod in list(sys.modules.items()):
        if "." in name or name in (_OWN_PACKAGE, "__main__"):
            continue
        path = getattr(mod, "__file__", None)
        if not path:
            continue
        entry = (
            os.path.dirname(os.path.dirname(path)) if os.path.basename(path) == "__init__.py" else os.path.dirname(path)
        )
        out[name] = os.path.abspath(entry)
    return out


def _open_fds() -> set:
    """Open descriptors above 2 (not the one listdir used, which is closed by now)."""
    out = set()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            os.fstat(fd)
        except OSError:
            continue
        if fd > 2:
            out.add(fd)
    return out


def _close_all_but(keep) -> None:
    for fd in _open_fds() - set(keep):
        try:
            os.close(fd)
        except OSError:
            pass  # the listdir's own descriptor, already gone


def _preload(modules) -> tuple:
    """Imports each module, and for MODULE:FUNCTION also calls FUNCTION(), a cached computation every
    server would repeat (its cache then holds the value in every fork); the ones that worked. A failure
    is the server's to meet, not the zygote's."""
    out = []
    for name in modules:
        module, _, function = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if function:
                getattr(loaded, function)()
            out.append(name)
        except (Exception, SystemExit) as e:
            _say(
                "preload %s failed, left to the server: %s: %s"
                % (name, type(e).__name__, (str(e).strip().splitlines() or [""])[0])
            )
    return tuple(out)


def freeze_heap() -> int:
    """Moves every object the import made into the permanent generation, which no collection walks;
    returns how many there are.

    Why: a server collects its garbage several times during its start (vLLM's worker and model runner
    call gc.collect() before vLLM's own freeze_gc_heap() at the end of start-up, and allocation triggers
    more), and each full collection walks every object of the import, the first in a fork writing to every
    page it walks and so copying it (their cost: docs/design.md). Frozen here, every fork
    inherits them frozen: its collections walk only what it allocated itself. vLLM unfreezes
    only around MRV1's CUDA-graph capture and at shutdown, which then walk everything as before."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _per_server(reads: EnvReads) -> dict:
    return {n: s for n, s in reads.point_reads().items() if zygote_env.is_per_server(n)}


def import_modules(modules, preloads=()) -> Zygote:
    """Imports modules, then the preloads, with their environment reads recorded; the Zygote to check
    forks against."""
    modules = tuple(modules)
    start = time.monotonic()
    before = _open_fds()
    with EnvReads() as reads:
        for module in modules:
            importlib.import_module(module)
    imported = time.monotonic()
    with EnvReads() as preload_reads:
        preloaded = _preload(preloads)
    frozen = freeze_heap()
    import_fds = frozenset(_open_fds() - before)
    per_server, preload_sites = _per_server(reads), _per_server(preload_reads)
    for name, sites in preload_sites.items():
        per_server[name] = sorted(set(per_server.get(name, [])) | set(sites))
    unsafe = {n: s for n, s in per_server.items() if n not in zygote_env.IMPORT_SAFE}
    key_path = [os.path.abspath(e) for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    _say(
        "imported %s in %.1f s%s; per-server variables read at import: %s; CUDA initialised: %s; threads: %d"
        " Python, %d native; %d objects frozen for the forks' collections"
        % (
            ", ".join(modules),
            imported - start,
            ", then %d of %d preload(s) in %.1f s" % (len(preloaded), len(preloads), time.monotonic() - imported)
            if preloads
            else "",
            sorted(per_server) or "none",
            cuda_initialized(),
            threading.active_count(),
            len(os.listdir("/proc/self/task")),
            frozen,
        )
    )
    # IMPORT_SAFE says why a read is harmless at the sites it names; the preloads' sites are new ones.
    if preload_sites:
        _say(
            "per-server variables the preloads read: %s"
            % ", ".join("%s (%s)" % (name, "; ".join(sites)) for name, sites in sorted(preload_sites.items()))
        )
    if unsafe:
        _say("refusing every fork: %s" % unsafe)
    return Zygote(
        modules=modules,
        key="",
        python=sys.executable,
        key_pythonpath=key_path,
        site_path=[os.path.abspath(p) for p in sys.path if p and os.path.abspath(p) not in key_path],
        files=module_files_state(*modules, *preloaded),
        unsafe_reads=unsafe,
        loaded=_loaded_top_level(),
        import_fds=import_fds,
        preloaded=preloaded,
        pid=os.getpid(),
        own_children=frozenset(process_tree.children(os.getpid())),
    )


# -- the forked server ------------------------------------------------------------------------------


class ForkedServer:
    """The supervisor's handle on a server it forked (the _Reaper sets returncode)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode = None

    def poll(self):
        return self.returncode


def _run_as_main(module: str) -> int:
    """runpy of module as __main__, then the interpreter's own exit steps; returns the exit code."""
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    # What Py_FinalizeEx does first: join non-daemon threads, then run atexit handlers.
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # CPython's own exit step, not in the stubs
    except Exception:
        traceback.print_exc()
    atexit._run_exitfuncs()
    return code


def _become_server(zygote: Zygote, spec: dict, supervisor_pid: int) -> None:
    os.setsid()
    supervisor.prctl(supervisor.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != supervisor_pid:  # the supervisor died before PDEATHSIG was armed
        os._exit(1)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stdout and stderr both into the server log, as the plain path does
    _close_all_but(zygote.import_fds)
    os.environ.clear()
    os.environ.update(spec["env"])
    os.chdir(spec.get("cwd") or "/")
    for name in [n for n in sys.modules if n == _OWN_PACKAGE or n.startswith(_OWN_PACKAGE + ".")]:
        del sys.modules[name]
    sys.path[:] = zygote.server_path(spec)
    importlib.invalidate_caches()
    import tempfile

    tempfile.tempdir = None  # gettempdir() caches; this server's TMPDIR decides again
    sys.argv[:] = ["-m"] + list(spec["argv"][3:])


def _fork_server(zygote: Zygote, spec: dict) -> ForkedServer:
    """Runs in the supervisor: forks the server from the pre-imported image."""
    supervisor_pid = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedServer(pid)
    code = 1
    try:
        _become_server(zygote, spec, supervisor_pid)
        code = _run_as_main(spec["argv"][2])
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def watch_test_process(pid: int, start_time: float | None) -> int | None:
    """A pidfd of the test process, or None if it is already gone (or its PID was reused)."""
    return process_tree.pidfd(pid, start_time)


def _become_supervisor(zygote: Zygote, spec: dict, fds: list) -> int:
    """Runs in the forked child: the same supervisor as the plain path, on the passed pipes."""
    ctl, report, log_fd = fds[:3]
    lease = fds[3:4]
    for target, fd in ((0, ctl), (1, report), (2, log_fd)):
        os.dup2(fd, target)
    _close_all_but(set(zygote.import_fds) | set(lease))
    os.setsid()  # out of the zygote's process group: nothing aimed at the zygote reaches the server
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    supervisor.prctl(supervisor.PR_SET_CHILD_SUBREAPER, 1)
    test_gone = watch_test_process(spec["parent_pid"], spec.get("parent_start"))
    if test_gone is None:
        supervisor._say("the test process was gone before the server started; not starting it")
        return 1
    supervisor._say(
        "forked by zygote %d (key %s): the server skips importing %s" % (os.getppid(), zygote.key, spec["argv"][2])
    )
    spec = dict(spec, lease_fd=lease[0] if lease else None)  # parking hands this slot lock on
    return supervisor.supervise(spec, lambda s: _fork_server(zygote, s), test_gone_fd=test_gone)


# -- the zygote's loop ------------------------------------------------------------------------------


def _handle(zygote: Zygote, conn: socket.socket, message: dict, fds: list):
    """Answers one request; in a forked child returns the supervisor's work, else None."""
    op = message.get("op")
    if op == "ping":
        unix_socket.send(
            conn,
            {
                "ok": True,
                "pid": os.getpid(),
                "key": zygote.key,
                "modules": list(zygote.modules),
                "preloaded": list(zygote.preloaded),
            },
        )
        return None
    if op != "fork":
        unix_socket.send(conn, {"ok": False, "error": "unknown op %r" % op})
        return None
    refusal = zygote.refusal(message)
    if refusal is None and len(fds) not in (3, 4):
        refusal = Refusal("a fork needs 3 or 4 descriptors (control, report, log[, lease]); got %d" % len(fds))
    if refusal is not None:
        _say("refused a fork: %s" % refusal.reason)
        if refusal.stale:  # no new client may reach this image once it says so
            _unlink(zygote.socket_path)
        unix_socket.send(conn, {"ok": False, "error": refusal.reason, "stale": refusal.stale})
        return refusal if refusal.stale else None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        return lambda: _become_supervisor(zygote, message["spec"], fds)
    zygote.supervisors.add(pid)
    _say("forked supervisor %d for test process %d" % (pid, message["spec"]["parent_pid"]))
    unix_socket.send(conn, {"ok": True, "pid": pid, "start": process_tree.start_time(pid)})
    return None


def kill_orphans(zygote: Zygote) -> None:
    """Reaps finished supervisors and kills the trees of children that are neither a supervisor nor
    the import's own: orphans of a supervisor that died without its teardown."""
    for pid, _ in process_tree.reap_exited():
        zygote.supervisors.discard(pid)
    for orphan in process_tree.children(os.getpid()) - zygote.supervisors - zygote.own_children:
        tree = process_tree.snapshot(orphan)
        _say("killing %s: orphaned by a supervisor that died without its teardown" % sorted(tree))
        process_tree.signal_all(tree, signal.SIGKILL)


def serve(zygote: Zygote, listener: socket.socket, idle_s: float):
    """Serves until idle (returns None) or, in a forked child, returns the child's work."""
    my_uid = os.getuid()
    last_request = time.monotonic()
    while True:
        kill_orphans(zygote)
        readable, _, _ = select.select([listener], [], [], ORPHAN_CHECK_S)
        if not readable:
            if idle_s > 0 and time.monotonic() - last_request >= idle_s:
                _say("no request for %.0f s; exiting" % idle_s)
                return None
            continue
        last_request = time.monotonic()
        conn, _ = listener.accept()
        fds: list = []
        with conn:
            try:
                if unix_socket.peer_uid(conn) != my_uid:
                    _say("ignored a connection from another uid")
                    continue
                message, fds = unix_socket.recv(conn, REQUEST_TIMEOUT_S)
                result = _handle(zygote, conn, message, fds)
            except OSError as e:
                _say("a request failed: %s" % e)
                continue
            finally:
                if os.getpid() == zygote.pid:  # a forked supervisor keeps them
                    for fd in fds:
                        os.close(fd)
            if isinstance(result, Refusal):
                return None
            if result is not None:
                listener.close()
                return result


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on.")
    parser.add_argument(
        "--module",
        action="append",
        required=True,
        help="A server module to import (repeatable, imported in order); a fork runs the one its request's"
        " argv names as __main__.",
    )
    parser.add_argument(
        "--preload",
        action="append",
        default=[],
        metavar="MODULE[:FUNCTION]",
        help="Also import"
        " MODULE after the --module ones (repeatable): a module every server imports only later (vLLM's"
        " engine core imports its worker and model after the fork), which each then has already;"
        " with :FUNCTION also call MODULE.FUNCTION(), a cached computation each server would"
        " repeat. Its environment reads and CUDA count as --module's; if it fails, the zygote logs"
        " it and serves, and the server does it itself.",
    )
    parser.add_argument("--key", required=True, help="The key (zygote_env.zygote_key) requests must carry.")
    parser.add_argument("--idle_s", type=float, default=60.0, help="Exit after this long without a request (0: never).")
    parser.add_argument(
        "--ready_fd",
        type=int,
        required=True,
        help="Descriptor to write one JSON line to once serving (or failing), then close.",
    )
    args = parser.parse_args(argv)
    # `python -m` put the cwd first on sys.path; a server's own cwd replaces it in the fork.
    if sys.path and sys.path[0] == os.getcwd():
        del sys.path[0]
    ready = os.fdopen(args.ready_fd, "w")
    try:
        zygote = import_modules(args.module, args.preload)
        zygote.key, zygote.socket_path = args.key, args.socket
        supervisor.prctl(supervisor.PR_SET_CHILD_SUBREAPER, 1)  # see "Orphans" above
        if zygote.cuda_initialized():
            raise RuntimeError(
                "importing %s%s initialised CUDA; forked servers could not use it"
                % (", ".join(args.module), " and its preloads" if args.preload else "")
            )
        listener = unix_socket.listen(args.socket)
    except BaseException as e:
        traceback.print_exc()
        ready.write(json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, e)}) + "\n")
        ready.close()
        return 1
    ready.write(json.dumps({"ok": True, "pid": os.getpid()}) + "\n")
    ready.close()
    modules = ", ".join(args.module)
    _say("serving %s on %s (key %s, idle exit after %.0f s)" % (modules, args.socket, args.key, args.idle_s))
    child_work = serve(zygote, listener, args.idle_s)
    if child_work is not None:
        code = 1
        try:
            code = child_work()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _unlink(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
