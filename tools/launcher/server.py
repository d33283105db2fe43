"""VllmServer: start a vLLM server for a test, check it is the one asked for, and take it down fully.

    with VllmServer(ServerConfig.from_env(outputs_dir), lease=True) as server:
        requests.get(server.url + "/health")

Lifecycle: [GPU slot lease] -> supervisor + server (supervisor.py) -> GET /health == 200 -> runner
check on the log -> ... -> teardown by the supervisor -> every PID gone -> NVML release check -> lease
released. The server also dies with the test process, however it dies (see supervisor.py); a SIGTERM
to the test process (Bazel's timeout) and interpreter exit stop live servers in order first.

Start the server from the main thread or from a thread that outlives it: the supervisor's
PDEATHSIG fires when the thread that started it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

from tools import matrix
from tools.launcher import gpu_lease, memory_budget, parking, ports, process_tree, zygote_client, zygote_env
from tools.launcher.config import (
    ServerConfig,
    build_command,
    build_env,
    check_importable,
    cpu_use_env,
    env_diff,
    preload_modules,
    resolve_model,
    validate,
    zygote_modules,
)
from tools.launcher.errors import PortConflictError, ServerReleaseError, ServerStartError
from tools.launcher.memory_claims import BYTES
from tools.launcher.nvml import MIB, Nvml, NvmlReadings, unattributed_bytes, wait_for_release
from tools.launcher.phase_plugin import sleepwake_memory_phase as phase_plugin
from tools.launcher.timings import ServerTimings

if TYPE_CHECKING:
    from tools.launcher.interface import Server, ServerFactory

log = logging.getLogger("sleepwake.launcher")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# On the server's PYTHONPATH for memory_phase_scope steps: vLLM finds the plugin through its dist-info.
_PHASE_PLUGIN_DIR = os.path.dirname(os.path.abspath(phase_plugin.__file__))
LOG_TAIL_LINES = 50
V2_MARKER = matrix.LOG_MARKER_V2  # logged by vLLM 0.26.0's gpu_worker.py only when it builds MRV2
# The log header's launch time and the line appended once /health answered (epoch seconds), which
# tools/bench reads for its per-phase breakdown of a start.
LAUNCH_MARK = "launched at"
HEALTHY_MARK = "# sleepwake launcher: GET /health 200 at"


def check_runner(runner: str, log_text: str) -> None:
    """Raises ServerStartError unless the log shows that vLLM built the runner asked for (the spec's
    VLLM_USE_V2_MODEL_RUNNER value says whether it is the V2 runner, whose build the log marks)."""
    want_v2, built_v2 = matrix.RUNNERS[runner] == "1", V2_MARKER in log_text
    name = runner.upper()
    if want_v2 and not built_v2:
        raise ServerStartError(
            "asked for %s (VLLM_USE_V2_MODEL_RUNNER=1) but the log has no %r: vLLM built the V1 runner"
            " (this model or platform may not support V2). The cell would report V1 results as %s;"
            " check the log for why vLLM fell back." % (name, V2_MARKER, name)
        )
    if not want_v2 and built_v2:
        raise ServerStartError(
            "asked for %s (VLLM_USE_V2_MODEL_RUNNER=0) but the log says %r: the variable did not reach"
            " the server or this vLLM ignores it. The cell would report V2 results as %s." % (name, V2_MARKER, name)
        )


def read_log(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as e:
        return "(log unreadable: %s)" % e


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(read_log(path).splitlines()[-lines:])


# A Python exception's last line, after vLLM's prefixes: "(EngineCore pid=7) ERROR 12-06 11:32:24
# [core.py:1330] ModuleNotFoundError: No module named 'jsonschema'".
_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\)\s+)?(?:(?:ERROR|WARNING|INFO|CRITICAL) [\d-]+ [\d:.]+ \[[^\]]*\]\s+)?")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception)(?:: .*)?$")


def first_error(text: str) -> str | None:
    """The first exception line of a server's log: a start that fails in the engine process ends with the
    API server's "Engine core initialization failed. See root cause above", which a log's tail shows
    while the cause scrolled out of it (ray's missing jsonschema did on a GPU runner)."""
    for line in text.splitlines():
        line = _PREFIX.sub("", line.strip())
        if _EXCEPTION.match(line):
            return line
    return None


# No proxies: an http_proxy in the environment must not route a loopback health check elsewhere.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(url: str) -> bool:
    try:
        with _opener.open(url + "/health", timeout=2) as response:
            return response.status == 200
    except Exception:  # refused, reset, 5xx, timeout: not healthy yet
        return False


class VllmServer:
    """One vLLM server. command_factory(config, port) -> argv replaces vLLM's command (tests use a stub
    server with it; the vLLM-importable check runs only for the real command); nvml replaces NVML."""

    def __init__(
        self,
        config: ServerConfig,
        lease: bool = False,
        *,
        nvml: NvmlReadings | None = None,
        command_factory: Callable[[ServerConfig, int], list[str]] | None = None,
        environ: Mapping[str, str] | None = None,
    ):
        self.config = config
        self.lease: gpu_lease.Lease | None = None  # once taken
        self.port = 0  # until started; a restart of a server that never started picks a fresh one too
        self.command: list[str] | None = None
        self.log_path = ""  # the current launch's log, once launched
        self.env: dict[str, str] | None = None
        self._want_lease = lease
        self._nvml = nvml  # made at the first use where not given (a CPU test gives fake_nvml.FakeNvml)
        self._factory = command_factory
        self._environ = dict(os.environ if environ is None else environ)
        # The supervisor: a subprocess.Popen, or a zygote_client.ForeignProcess, which has the members
        # of Popen used here.
        self._sup: Any = None
        self.start_mode: str | None = None  # "zygote" or "plain", once launched
        self.timings = ServerTimings()  # accumulated over restarts; the fixtures record it at stop
        self._cpu_at_ready: float | None = None  # the tree's CPU seconds at /health (timings.serve_cpu_s)
        self._device_index = 0
        self._baseline: int | None = None
        self._prepared = False
        self._log_dir = ""
        self._cover_path: str | None = None  # the cover file of a worker that brackets its own calls
        self._budget: memory_budget.Budget | None = None  # budget(), read on first use
        self._pools: dict[str, int] | None = None  # pools(), the same
        # A server another test process parked and this one claimed (parking.py): what the parker said
        # of it (VllmServer.park's suite argument, under "suite"); None for one this process started.
        self.borrowed: dict | None = None
        self._lend_key: str | None = None  # its parking key, when config.claim or park may use one
        self._log_offset = 0  # where this process's share of the server log begins (a borrowed one's)

    @property
    def url(self) -> str:
        return ports.url(self.config.host, self.port)

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            if not self._prepared:
                self._prepare()
            if self.borrowed is None:
                self._start(self.config.port)
        except BaseException:  # KeyboardInterrupt too: never leave a half-started server behind
            try:
                self._stop_server(check_release=False)
            finally:
                self._release_lease()
            raise

    def stop(self) -> None:
        """Tears the server down, checks that it released the GPU, and gives back the lease."""
        try:
            self._stop_server(check_release=True)
        finally:
            self._release_lease()

    def restart(self) -> None:
        """stop (with the release check) and start again, on the same port if it is still free."""
        port = self.port
        self._stop_server(check_release=True)
        self._start(port)

    def wait(self, timeout: float | None = None) -> bool:
        """True once the server has gone (it exited or was stopped), False if timeout passed first."""
        if self._sup is None:
            return True
        try:
            self._sup.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def pids(self) -> list[int]:
        """PIDs of the server's process tree now (the supervisor excluded)."""
        return sorted(process_tree.snapshot(self._sup.pid, include_root=False)) if self._sup else []

    @property
    def _gpu(self) -> NvmlReadings:
        """NVML, made at the first use where the caller gave none."""
        if self._nvml is None:
            self._nvml = Nvml()
        return self._nvml

    def gpu_bytes(self) -> int:
        return self._gpu.process_bytes(self.pids())

    def device_used_bytes(self) -> int:
        return self._gpu.device_used_bytes(self._device_index)

    @contextlib.contextmanager
    def memory_phase(self, kind: str, what: str = "") -> Iterator[float]:
        """Context manager ordering this server's memory phases against its GPU neighbours'
        (gpu_lease.memory_phase, kind gpu_lease.ALLOCATE, FREE, RELEASE or EXCLUSIVE; what: the call, for
        the GPU's phase trace). Yields the seconds it waited, which timings adds up."""
        # An allocation declares what its budget says it maps (a client's push, a trainer's checkpoint); the
        # launcher's own phases, and what the budget does not know, declare nothing and so keep the kinds
        # rule's exclusion under either rule.
        declares = kind == gpu_lease.ALLOCATE and self.lease is not None and self.config.memory_phase_rule == BYTES
        declared = self.budget().of(what) if declares else None
        phase = gpu_lease.memory_phase(
            self.lease,
            kind,
            self.config.lease_timeout_s,
            what=what,
            declared=declared,
            rule=self.config.memory_phase_rule,
        )
        with phase as waited:
            begin = time.monotonic()
            try:
                # The server's worker brackets its sleeps, wakes and reloads itself (brackets_calls); one
                # inside this phase must not wait for it.
                with gpu_lease.covering(self._cover_path, kind) if self._cover_path else contextlib.nullcontext():
                    yield waited
            finally:
                self.timings.add_memory_phase(waited, what or kind, time.monotonic() - begin)

    def budget(self) -> memory_budget.Budget:
        """What this server's memory phases declare under the rule bytes (memory_budget.of_pools)."""
        if self._budget is None:
            self._budget = memory_budget.of_pools(self.config, self.pools())
        return self._budget

    def pools(self) -> dict[str, int]:
        """The bytes of the pools this server's sleeps unmap (memory_budget.pools_of), read once: the
        checkpoint's headers do not change under a running server."""
        if self._pools is None:
            self._pools = memory_budget.pools_of(self.config, resolve_model(self.config.model))
        return self._pools

    def neighbour_in_start_step(self) -> bool:
        """Whether a server sharing this one's GPU is in a start step now (gpu_lease.start_step_inside):
        the latency oracles judge samples taken beside one against their own bounds."""
        return gpu_lease.start_step_inside(self.lease)

    @property
    def brackets_calls(self) -> bool:
        """Whether the server's worker takes the memory phase around its own sleeps, wakes and reloads
        (tools/launcher/phase_plugin), so that its client need not hold one around the HTTP call."""
        return self._cover_path is not None

    # -- start ------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        cfg = self.config
        validate(cfg)
        resolve_model(cfg.model)  # a missing checkpoint fails here, before a lease or a process
        nvml = self._gpu  # first: GpuUnavailableError on a CPU machine is the most useful message there
        self.env = build_env(cfg, self._environ)
        if self._factory is None:
            check_importable(sys.executable, self.env)
        gpus = gpu_lease.visible_gpus(nvml, self._environ)
        if self._want_lease:
            self._lend_key = self._parking_key()
            if cfg.claim and self._lend_key and self._claim(time.monotonic()):
                self._prepared = True
                return
            asked = time.monotonic()
            lease = gpu_lease.acquire(
                gpus,
                cfg.lock_dir,
                cfg.slots_per_gpu,
                cfg.lease_timeout_s,
                between_polls=lambda: self._while_no_slot(asked),
            )
            if lease is None:  # claimed a parked server meanwhile
                self._prepared = True
                return
            self.lease = lease
            self.timings.lease_wait_s += self.lease.waited_s
            self.env = build_env(cfg, self._environ, self.lease.gpu)
            if self._brackets_steps():
                fd, self._cover_path = tempfile.mkstemp(
                    prefix="cover-", suffix=".lock", dir=os.path.dirname(self.lease.path)
                )
                os.close(fd)
                self.env.update(
                    {
                        phase_plugin.ENV_LOCK: gpu_lease.memory_lock_path(self.lease),
                        phase_plugin.ENV_TIMEOUT: str(cfg.lease_timeout_s),
                        phase_plugin.ENV_COVER: self._cover_path,
                        phase_plugin.ENV_BUDGET: self.budget().to_env(),
                    }
                )
        if self._cover_path is not None or cpu_use_env(cfg):  # either plugin has something to do
            self.env["PYTHONPATH"] = os.pathsep.join(p for p in (_PHASE_PLUGIN_DIR, self.env.get("PYTHONPATH")) if p)
        self._device_index = int(self.lease.gpu if self.lease else gpus[0])
        self._log_dir = (
            cfg.log_dir
            or self._environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
            or tempfile.mkdtemp(prefix="sleepwake-vllm-")
        )
        for path in [self._log_dir] + [
            self.env[k] for k in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")
        ]:
            os.makedirs(path, exist_ok=True)
        self._prepared = True

    # -- parking (parking.py) ---------------------------------------------------------------------

    def _parking_key(self) -> str | None:
        """This server's parking key, or None where none applies: a plain start (nothing outlives the
        test process but a zygote's fork), or a command that is not `python -m module`."""
        cfg = self.config
        argv = list((self._factory or build_command)(cfg, 0))
        if cfg.start_mode == "plain" or len(argv) < 3 or argv[1] != "-m" or not self.env:
            return None
        try:
            zygote_key, _ = zygote_env.zygote_key(
                argv[0], zygote_modules(cfg, argv), self.env, zygote_client.code_digest(), preload_modules(cfg, argv)
            )
            return parking.lending_key(cfg, resolve_model(cfg.model), self.env, zygote_key)
        except (OSError, ValueError) as e:  # then it is neither claimed nor parked, only started
            log.warning("no parking key for this server (%s): it will be started and stopped, never lent", e)
            return None

    def _while_no_slot(self, asked: float) -> bool:
        """Between polls for a slot: a parked server of this key is taken (True); else one of another
        key parked for a while is asked to stop, which frees its slot for a later poll."""
        cfg = self.config
        if cfg.claim and self._lend_key and self._claim(asked):
            return True
        if self._lend_key:
            parking.evict_one(cfg.lock_dir, gpu_lease.owner_description(self._environ))
        return False

    def _claim(self, asked: float) -> bool:
        claimed = parking.claim(self.config.lock_dir, self._lend_key or "", gpu_lease.owner_description(self._environ))
        if claimed is None:
            return False
        meta = claimed.meta
        waited = time.monotonic() - asked
        self.lease = gpu_lease.Lease(
            gpu=meta["gpu"],
            slot=meta["slot"],
            path=meta["lease_path"],
            fd=claimed.lease_fd,
            waited_s=waited,
            exclusive=meta["exclusive"],
        )
        self.timings.lease_wait_s += waited
        self._device_index = int(self.lease.gpu)
        self.env = build_env(self.config, self._environ, self.lease.gpu)
        self._cover_path = meta.get("cover")
        self.port = meta["port"]
        self.command = meta["command"]
        self.log_path = meta["log_path"]
        self._log_offset = len(read_log(self.log_path))
        self._log_dir = os.path.dirname(self.log_path)
        if self.config.log_dir:
            os.makedirs(self.config.log_dir, exist_ok=True)  # for this process's share of the log
        self.start_mode = meta["start_mode"]
        self._sup = zygote_client.ForeignProcess(
            claimed.supervisor_pid, claimed.supervisor_start, claimed.ctl, claimed.report
        )
        self.borrowed = meta.get("suite") or {}
        _live.add(self)
        _install_handlers()
        self._cpu_at_ready = process_tree.cpu_seconds(process_tree.snapshot(self._sup.pid, include_root=False))
        log.info("claimed the parked vLLM server at %s (pids %s, log %s)", self.url, self.pids(), self.log_path)
        return True

    def park(self, suite: dict) -> str | None:
        """Hands the running server to the next test process that claims one of its configuration
        (parking.py), with `suite` for it (what the suite read of the server fresh); returns where it
        waits. None when it cannot be parked (a plain start, no lease, park_s 0): it is then still this
        process's, running, and the caller stops it."""
        cfg, sup = self.config, self._sup
        if sup is None or self.start_mode != "zygote" or self.lease is None or cfg.park_s <= 0 or not self._lend_key:
            return None
        self._end_serving(sup)
        meta = {
            "port": self.port,
            "command": self.command,
            "log_path": self.log_path,
            "start_mode": self.start_mode,
            "gpu": self.lease.gpu,
            "slot": self.lease.slot,
            "lease_path": self.lease.path,
            "exclusive": self.lease.exclusive,
            "cover": self._cover_path,
            "suite": suite,
        }
        message = {
            "lock_dir": cfg.lock_dir,
            "key": self._lend_key,
            "park_s": cfg.park_s,
            "memory_lock": gpu_lease.memory_lock_path(self.lease),
            "lease_timeout_s": cfg.lease_timeout_s,
            "release_timeout_s": cfg.release_timeout_s,
            "meta": meta,
        }
        try:
            sup.stdin.write(b"park\n" + json.dumps(message).encode() + b"\n")
            sup.stdin.flush()
            report = self._read_report(timeout_s=parking.ANSWER_TIMEOUT_S)
        except (BrokenPipeError, OSError, ValueError):
            report = {}
        if not report.get("parked"):
            log.warning("the supervisor did not park the server (%s); stopping it instead", report or "no answer")
            return None
        _live.discard(self)
        self._sup = None
        for pipe in (sup.stdin, sup.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        # Closed, not released: the supervisor's copy of the lock keeps the slot, unlocking would free it.
        os.close(self.lease.fd)
        self.lease.fd = -1
        self.lease = None
        self._cover_path = None  # the server's; whoever stops it last removes it
        self._prepared = False
        self.borrowed = None
        return report["parked"]

    def _end_serving(self, sup) -> None:
        """What a stop or a park adds before the tree goes on: the CPU it served with, its bracketed calls,
        and for a server taken over, this process's share of its log beside this process's other logs."""
        self._count_bracketed_calls()
        share = os.path.join(self.config.log_dir or "", os.path.basename(self.log_path))
        if (
            self.borrowed is not None
            and self.config.log_dir
            and os.path.abspath(share) != os.path.abspath(self.log_path)
        ):
            with contextlib.suppress(OSError), open(share, "w") as f:
                f.write(
                    "# sleepwake launcher: this test process's share of %s, a server it took over; the"
                    " lines before are its earlier test processes'\n%s"
                    % (self.log_path, read_log(self.log_path)[self._log_offset :])
                )
        if self._cpu_at_ready is not None:
            snap = process_tree.snapshot(sup.pid, include_root=False)
            self.timings.serve_cpu_s += max(process_tree.cpu_seconds(snap) - self._cpu_at_ready, 0.0)
            self._cpu_at_ready = None
            self.timings.cpu_by_thread = process_tree.thread_cpu(snap)

    # -- start (continued) --------------------------------------------------------------------------

    def _start(self, port: int) -> None:
        cfg = self.config
        # Device memory is the cell's to judge only when no other cell shares the GPU.
        exclusive = self.lease is not None and self.lease.exclusive
        self._baseline = unattributed_bytes(self._gpu, self._device_index) if exclusive else None
        taken = []
        # A start allocates weights, KV cache and graphs: no neighbour on the GPU may sleep meanwhile.
        # With steps the server's worker holds the phase around each of those itself.
        steps = self._brackets_steps()
        with contextlib.nullcontext(0.0) if steps else self.memory_phase(gpu_lease.ALLOCATE, "start"):
            begin = time.monotonic()  # after the wait, which timings counts as a memory-phase wait
            for _ in range(cfg.port_retries + 1):
                reservation = None if port else ports.Reservation(cfg.host)
                if reservation is not None:
                    port = reservation.port
                try:
                    self._launch(port)
                    healthy = self._wait_healthy()
                finally:
                    if reservation is not None:
                        reservation.close()
                if healthy:
                    break
                taken.append(port)
                log.warning("port %d was taken (bind conflict in %s); retrying with a fresh port", port, self.log_path)
                port = 0
        elapsed = time.monotonic() - begin
        if steps and len(taken) <= cfg.port_retries:
            elapsed -= self._check_bracketed_start()
        self.timings.start_s += elapsed
        self.timings.launches += 1
        if len(taken) > cfg.port_retries:
            raise PortConflictError(
                "every port tried was already in use (%s; %d retries). Another server is binding ports"
                " in this range: pass a different --port/ServerConfig.port, or raise port_retries. Last log"
                " lines of %s:\n%s"
                % (", ".join(map(str, taken)), cfg.port_retries, self.log_path, log_tail(self.log_path))
            )
        try:
            check_runner(cfg.runner, read_log(self.log_path))
        except ServerStartError as e:
            self._stop_server(check_release=False)
            raise ServerStartError("%s Log: %s" % (e, self.log_path)) from None
        log.info("vLLM server ready at %s (pids %s, log %s)", self.url, self.pids(), self.log_path)
        self._cpu_at_ready = process_tree.cpu_seconds(process_tree.snapshot(self._sup.pid, include_root=False))
        self.timings.start_cpu_s += self._cpu_at_ready

    def _brackets_steps(self) -> bool:
        return self.lease is not None and not self.lease.exclusive and self.config.memory_phase_scope == "steps"

    def _check_bracketed_start(self) -> float:
        """Checks that the worker took the ALLOCATE phase around its start-up steps and that nothing
        allocated after the last one; adds the steps' phases to timings and returns their waits."""
        steps = phase_plugin.read_steps(read_log(self.log_path))
        names = [s["step"] for s in steps]
        missing = [name for name in phase_plugin.STEPS if name not in names]
        unbracketed_calls = sorted(set(phase_plugin.CALLS) - set(steps[-1].get("calls", ()))) if steps else []
        held = self.gpu_bytes()
        last = steps[-1]["process_bytes"] if steps else None
        problem = None
        if missing:
            problem = (
                "its worker did not bracket %s (the memory-phase plugin %s did not load in the"
                " worker's process, or this vLLM renamed the step)" % (", ".join(missing), _PHASE_PLUGIN_DIR)
            )
        elif unbracketed_calls:
            problem = (
                "its worker does not bracket %s (this vLLM renamed the call, or a plugin replaced it"
                " after the start): a neighbour's allocation could land in its sleep" % ", ".join(unbracketed_calls)
            )
        elif last is None:
            problem = "NVML gave the worker no figure for its own bytes after %s" % names[-1]
        elif held - last > self.config.unbracketed_bytes_max:
            problem = (
                "its processes hold %d MiB at GET /health, %d MiB more than the worker held after its"
                " last bracketed step (%s), over unbracketed_bytes_max %d MiB: memory moved outside"
                " the steps, where a neighbour's sleep could see it"
                % (held // MIB, (held - last) // MIB, names[-1], self.config.unbracketed_bytes_max // MIB)
            )
        if problem or last is None:  # (a None last has its problem above)
            self._stop_server(check_release=False)
            raise ServerStartError(
                "memory_phase_scope steps: %s. Run with SLEEPWAKE_MEMORY_PHASE_SCOPE=start"
                " (the launcher holds the phase for the whole start). Log: %s" % (problem, self.log_path)
            )
        waited = 0.0
        for step in steps:
            self.timings.add_memory_phase(step["waited_s"], "start:" + step["step"], step.get("held_s"))
            waited += step["waited_s"]
        budget, pools = self.budget(), self.pools()
        for name, beyond in memory_budget.beyond_pools(steps, pools).items():
            self.timings.add_step_bytes(
                name, beyond, memory_budget.declared_beside_pools(budget, "start:" + name, pools)
            )
        with open(self.log_path, "a") as f:
            f.write(
                "# sleepwake launcher: %d MiB held at GET /health, %d MiB after the last bracketed step\n"
                % (held // MIB, last // MIB)
            )
        return waited

    def _launch(self, port: int) -> None:
        cfg = self.config
        self.port = port
        self.command = list((self._factory or build_command)(cfg, port))
        fd, self.log_path = tempfile.mkstemp(
            prefix="vllm-%s-%s-" % (cfg.runner, cfg.execution_mode), suffix=".log", dir=self._log_dir
        )
        launched_at = time.time()
        with os.fdopen(fd, "w") as header:
            header.write(
                "# sleepwake launcher, %s (%s %.3f)\n# argv: %s\n# env changes:\n%s\n"
                % (
                    time.strftime("%Y-%m-%d %H:%M:%S"),
                    LAUNCH_MARK,
                    launched_at,
                    json.dumps(self.command),
                    "\n".join("#   " + line for line in env_diff(self._environ, self.env)),
                )
            )
            if self.lease:
                header.write("# GPU lease: %s (waited %.1f s)\n" % (self.lease.path, self.lease.waited_s))
            if self._lend_key:  # equal keys may take over each other's servers (parking.py)
                header.write("# parking key: %s\n" % self._lend_key)
        spec = {
            "argv": self.command,
            "env": self.env,
            "cwd": os.getcwd(),
            "grace_s": cfg.grace_s,
            "parent_pid": os.getpid(),
            "parent_start": process_tree.start_time(os.getpid()),
        }
        with open(self.log_path, "ab") as log_file:
            self._sup = self._zygote_supervisor(spec, log_file) if cfg.start_mode != "plain" else None
            if self._sup is None:
                self.start_mode = "plain"
                self._sup = self._plain_supervisor(log_file)
        _live.add(self)
        _install_handlers()
        if self.start_mode == "plain":
            self._sup.stdin.write((json.dumps(spec) + "\n").encode())
            self._sup.stdin.flush()
        if "pid" not in self._read_report(timeout_s=60):
            self._stop_server(check_release=False)
            raise ServerStartError(
                "the supervisor did not start the server; last log lines of %s:\n%s"
                % (self.log_path, log_tail(self.log_path))
            )

    def _plain_supervisor(self, log_file: IO[bytes]) -> subprocess.Popen:
        sup_env = dict(self._environ)
        sup_env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, sup_env.get("PYTHONPATH")) if p)
        # The supervisor inherits the lease's lock: the slot stays taken until the tree is gone,
        # even if this process dies first.
        return subprocess.Popen(
            [sys.executable, "-m", "tools.launcher.supervisor"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            env=sup_env,
            pass_fds=(self.lease.fd,) if self.lease else (),
        )

    def _zygote_supervisor(self, spec: dict, log_file: IO[bytes]) -> zygote_client.ForeignProcess | None:
        """The supervisor forked by the zygote for this server's key, or None (start_mode auto) when
        the zygote cannot be used; the reason goes to the launcher's log and the server log."""
        cfg = self.config
        try:
            sup, key = zygote_client.start_supervisor(
                spec,
                log_file.fileno(),
                self.lease.fd if self.lease else None,
                lock_dir=cfg.lock_dir,
                idle_s=cfg.zygote_idle_s,
                start_timeout_s=cfg.zygote_start_timeout_s,
                host_idle_s=cfg.zygote_host_idle_s,
                environ=self._environ,
                modules=zygote_modules(cfg, spec["argv"]),
                preloads=preload_modules(cfg, spec["argv"]),
            )
        except zygote_client.ZygoteUnavailable as e:
            if cfg.start_mode == "zygote":
                raise ServerStartError("start_mode zygote: %s" % e) from None
            log.warning("starting the server plainly: %s", e)
            log_file.write(("# start: plain (the zygote is unavailable: %s)\n" % e).encode())
            log_file.flush()
            return None
        self.start_mode = "zygote"
        log_file.write(("# start: zygote key %s, supervisor %d\n" % (key, sup.pid)).encode())
        log_file.flush()
        return sup

    def _read_report(self, timeout_s: float) -> dict:
        readable, _, _ = select.select([self._sup.stdout], [], [], timeout_s)
        line = self._sup.stdout.readline() if readable else b""
        return json.loads(line) if line.strip() else {}

    def _wait_healthy(self) -> bool:
        """True once /health answers 200 from this server; False if the server exited on a bind conflict or
        another process listens on its port; else raises."""
        deadline = time.monotonic() + self.config.startup_timeout_s
        while True:
            if self._sup.poll() is not None:
                report = self._stop_server(check_release=False)
                if ports.is_bind_conflict(read_log(self.log_path)):
                    return False
                cause = first_error(read_log(self.log_path))
                raise ServerStartError(
                    "the vLLM server exited during start-up (exit code %s) before GET %s/health answered"
                    " 200%s. Fix the cause in its log; last %d lines of %s:\n%s"
                    % (
                        report.get("rc"),
                        self.url,
                        "; its first error: %s" % cause if cause else "",
                        LOG_TAIL_LINES,
                        self.log_path,
                        log_tail(self.log_path),
                    )
                )
            if _healthy(self.url):
                if not ports.listening_pids(self.pids(), self.port):
                    # Another server listens on this port (a user's fixed port, or one picked again
                    # before ours bound it): its 200 says nothing about ours. Ours cannot listen there.
                    log.warning(
                        "GET %s/health answered 200, but no process of this server listens on port"
                        " %d: another server has it",
                        self.url,
                        self.port,
                    )
                    self._stop_server(check_release=False)
                    return False
                with open(self.log_path, "a") as f:
                    f.write("%s %.3f\n" % (HEALTHY_MARK, time.time()))
                return True
            if time.monotonic() >= deadline:
                self._stop_server(check_release=False)
                raise ServerStartError(
                    "the vLLM server did not answer GET %s/health with 200 within %.0f s (startup_timeout_s);"
                    " it was stopped. If it was only slow (cold caches, shared CPUs) raise"
                    " SLEEPWAKE_STARTUP_TIMEOUT_S; otherwise see where it hangs. Last %d lines of %s:\n%s"
                    % (self.url, self.config.startup_timeout_s, LOG_TAIL_LINES, self.log_path, log_tail(self.log_path))
                )
            try:
                self._sup.wait(timeout=self.config.health_poll_s)  # wakes early if the server dies
            except subprocess.TimeoutExpired:
                pass

    # -- stop -------------------------------------------------------------------------------------

    def _stop_server(self, check_release: bool, fast: bool = False) -> dict:
        """Has the supervisor tear the tree down, verifies that every PID is gone, then (if asked) that
        NVML no longer sees the server. Returns the supervisor's final report."""
        sup, self._sup = self._sup, None
        if sup is None:
            return {}
        _live.discard(self)
        # Releasing the GPU changes device-wide memory as much as a start does: a neighbour reading
        # device-wide bytes (the immediacy oracle) must not see it mid-window (a neighbour's exit was read
        # as memory not restored: docs/design.md). It only frees, so it overlaps starts and sleeps.
        # A stop forced by a signal does not wait for the lock.
        with contextlib.nullcontext() if fast else self.memory_phase(gpu_lease.RELEASE, "teardown"):
            begin = time.monotonic()  # after the wait, which timings counts as a memory-phase wait
            try:
                return self._tear_down(sup, check_release, fast)
            finally:
                self.timings.stop_s += time.monotonic() - begin

    def _tear_down(self, sup, check_release: bool, fast: bool) -> dict:
        self._end_serving(sup)
        snap = process_tree.snapshot(sup.pid, include_root=False)
        try:
            sup.stdin.write(b"stop fast\n" if fast else b"stop\n")
            sup.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it is already finishing
        try:
            sup.wait(timeout=self.config.grace_s + 30)
        except subprocess.TimeoutExpired:
            log.error("the supervisor %d did not finish its teardown; killing its tree directly", sup.pid)
            snap.update(process_tree.snapshot(sup.pid))
            process_tree.signal_all(snap, signal.SIGKILL)
            sup.wait()
        lines = [line for line in sup.stdout.read().splitlines() if line.strip()]
        sup.stdout.close()
        report = json.loads(lines[-1]) if lines else {}
        for pid in report.get("killed", []):
            snap.setdefault(pid, None)
        left = process_tree.wait_gone(snap, 5.0)
        if left:
            raise ServerReleaseError(
                "server processes survived the teardown: %s. End them (kill -9) before"
                " the next cell uses this GPU; log: %s" % (sorted(left), self.log_path)
            )
        if check_release:
            wait_for_release(
                self._gpu,
                list(snap),
                self._device_index,
                self._baseline,
                self.config.release_tolerance_bytes,
                self.config.release_timeout_s,
            )
        return report

    def _count_bracketed_calls(self) -> None:
        """Adds the waits of the worker's own bracketed calls (a covered one waited for nothing) to
        timings, which would otherwise count them as the cell's own work."""
        if self._cover_path is None or not self.log_path:
            return
        for call in phase_plugin.read_calls(read_log(self.log_path)[self._log_offset :]):
            if not call.get("covered"):
                self.timings.add_memory_phase(call["waited_s"], call["call"], call.get("held_s"))
            if call.get("reserved_delta") is not None:
                declared = memory_budget.declared_beside_pools(self.budget(), call["call"], self.pools())
                self.timings.add_reserved_delta(call["call"], call["reserved_delta"], declared)
            self.timings.sleep_asserts += bool(call.get(phase_plugin.VLLM_ASSERT_KEY))

    def _release_lease(self) -> None:
        self._prepared = False  # a later start() takes a lease again
        self.borrowed = None  # and starts its own server
        if self._cover_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._cover_path)
            self._cover_path = None
        if self.lease is not None:
            self.lease.release()
            self.lease = None


# Servers with a running supervisor, stopped in order at interpreter exit and on SIGTERM (Bazel's
# timeout signal), so the normal path does not depend on the supervisor noticing a dead pipe.
_live: set = set()
_handlers_installed = False


def _stop_all(fast: bool = False) -> None:
    for server in list(_live):
        try:
            server._stop_server(check_release=False, fast=fast)
        except Exception as e:  # keep stopping the others
            log.error("stopping the vLLM server at %s failed: %s", server.url, e)


def _on_sigterm(signum, frame) -> None:
    log.warning("SIGTERM: stopping %d vLLM server(s) before exiting", len(_live))
    _stop_all(fast=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_stop_all)
    # Only where nobody else handles SIGTERM (and only the main thread may install handlers).
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


if TYPE_CHECKING:  # the interface the suite makes and uses its servers through; mypy (//tools/lint:types_test)
    _factory: ServerFactory = VllmServer
    _server: Server = VllmServer(ServerConfig())
