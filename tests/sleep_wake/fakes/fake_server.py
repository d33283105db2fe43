"""Stand-in for tools/launcher/server.py that serves FakeVllm in-process: the fake tier's server module.

Selected by SLEEPWAKE_SERVER_MODULE=tests.sleep_wake.fakes.fake_server (tests/sleep_wake/conftest.py
reads it; unset, the fixtures use tools.launcher.server). Why this seam: the fixtures take their
VllmServer from one named module and their ServerConfig always from the real tools.launcher.config,
so nothing is swapped into sys.modules and every test, fixture and helper that imports the launcher
(test_physical_memory's resolve_model, say) gets the real module. Only the server differs: the real
one supervises a vLLM process on a GPU; this one runs FakeVllm on a thread of the test process and
models NVML from the fake engine's pools.

The module has the real one's public surface: VllmServer with the same signature, methods and
attributes, and every other public name re-exported from tools.launcher.server unchanged
(tests/sleep_wake/unit/fake_server_surface_unit_test.py fails when the two drift apart). VllmServer
does not subclass the real one, although a few lines (url, __enter__) are the same: a method the real
server gains must fail that test, not run the real server's GPU code on the fake.

What start() shares with the real server: validate(config), resolve_model (a missing checkpoint is a
ConfigError), build_env (the fake decides its runner from VLLM_USE_V2_MODEL_RUNNER, as vLLM does),
the log file under config.log_dir, and check_runner on that log. The weights pool is the checkpoint's
tensor bytes and the KV-cache pool config.kv_cache_bytes, so the memory classes compare the fake's
bytes with the numbers they compare vLLM's with; what the fake generates depends on the checkpoint
(fake_checkpoint.py). pids() names a real process: the
child that holds the engine's pinned host memory (fake_host_memory.py), whose /proc counters the
host-memory class reads as it reads vLLM's. The engine appends vLLM's sleep lines to the log.

Environment (the test process's, which a real server would inherit):
  SLEEPWAKE_MUTANT                a defect of fake_defects.DEFECTS to re-create (the mutant harness's switch)
  SLEEPWAKE_FAKE_TOKEN_DELAY_S    seconds per decode step (default 0.002)
  SLEEPWAKE_FAKE_VLLM_VERSION     the release whose response shapes the fake serves (default 0.26.0)
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time

import sleepwake_mutants

from tests.sleep_wake.fakes import fake_checkpoint, fake_defects, fake_engine, fake_host_memory, fake_vllm
from tools.launcher import gpu_lease, ports
from tools.launcher.server import (  # noqa: F401 (re-exported: the module's public surface)
    HEALTHY_MARK, LAUNCH_MARK, LOG_TAIL_LINES, V2_MARKER, Nvml, PortConflictError, ServerConfig, ServerReleaseError,
    ServerStartError, ServerTimings, build_command, build_env, check_importable, check_runner, env_diff, log,
    log_tail, preload_modules, read_log, resolve_model, validate, wait_for_release)

# Private: every public name of this module is one of tools.launcher.server's.
_DEFAULT_TOKEN_DELAY_S = 0.002  # 768 tokens take ~1.5 s: a sleep lands mid-stream in the race tests
_DEFAULT_VERSION = "0.26.0"


class VllmServer:
    """FakeVllm with VllmServer's interface. nvml and command_factory are accepted for the signature
    and unused: the fake has no process to start and models NVML itself."""

    def __init__(self, config: ServerConfig, lease: bool = False, *, nvml=None, command_factory=None,
                 environ=None):
        self.config = config
        self.lease = None  # no GPU, so never a lease; memory_phase() then orders nothing, as for a lone GPU
        self.port = None
        self.command = None
        self.log_path = None
        self.env = None
        self.start_mode = None  # "fake" once started: served in this process, neither forked nor exec'd
        self.timings = ServerTimings()  # no lease and no neighbours: starts and stops only
        self._environ = dict(os.environ if environ is None else environ)
        self._fake = None
        self._host = None

    @property
    def url(self) -> str:
        return ports.url(self.config.host, self.port)

    @property
    def brackets_calls(self) -> bool:
        return False  # no lease, so no worker plugin: the client's own phases order nothing either

    def __enter__(self) -> "VllmServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._start(self.config.port)

    def stop(self) -> None:
        begin = time.monotonic()
        fake, self._fake = self._fake, None
        if fake is not None:
            fake.stop()
        host, self._host = self._host, None
        if host is not None:
            host.stop()
        self.timings.stop_s += time.monotonic() - begin

    def restart(self) -> None:
        port = self.port
        self.stop()
        self._start(port)

    def wait(self, timeout: float | None = None) -> bool:
        """True once the server has gone; the fake goes only when stopped (a dead engine keeps its
        front end up, as vLLM's does)."""
        fake = self._fake
        return fake is None or fake.engine.stopping.wait(timeout)

    def pids(self) -> list[int]:
        """The child holding the fake's pinned host memory. Not this process: the fake's threads run in
        the test's process, whose heap grows with the test (a walk's hundreds of steps), not with the
        server's sleeps, and would read as the server's host memory drifting."""
        return [self._host.pid] if self._fake else []

    def gpu_bytes(self) -> int:
        return self._fake.engine.gpu_bytes() if self._fake else 0

    def device_used_bytes(self) -> int:
        return self._fake.engine.device_used_bytes() if self._fake else 0

    @contextlib.contextmanager
    def memory_phase(self, kind: str, what: str = ""):
        with gpu_lease.memory_phase(self.lease, kind, self.config.lease_timeout_s, what=what) as waited:
            self.timings.add_memory_phase(waited)
            yield waited

    def neighbour_in_start_step(self) -> bool:
        return gpu_lease.start_step_inside(self.lease)  # no lease: no neighbours, never

    # -- start ------------------------------------------------------------------------------------

    def _defects(self) -> list[str]:
        name = self._environ.get(sleepwake_mutants.ENV, "")
        if name in ("", "none"):
            return []
        if name not in fake_defects.DEFECTS:
            raise ServerStartError(f"{sleepwake_mutants.ENV}={name!r} names no defect the fake re-creates;"
                                   f" known: {', '.join(sorted(fake_defects.DEFECTS))}")
        return [name]

    def _start(self, port: int) -> None:
        begin = time.monotonic()
        cfg = self.config
        validate(cfg)
        checkpoint = fake_checkpoint.load(resolve_model(cfg.model))
        self.env = build_env(cfg, self._environ)
        defects = self._defects()
        memory = fake_engine.GpuMemory.for_mode(checkpoint.total_bytes, cfg.kv_cache_bytes, cfg.execution_mode)
        log_dir = cfg.log_dir or self._environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp(
            prefix="sleepwake-fake-vllm-")
        os.makedirs(log_dir, exist_ok=True)
        fd, self.log_path = tempfile.mkstemp(prefix=f"vllm-{cfg.runner}-{cfg.execution_mode}-",
                                             suffix=".log", dir=log_dir)
        os.close(fd)
        try:
            self._host = fake_host_memory.HostProcess()
            fake = fake_vllm.FakeVllm(
                float(self._environ.get("SLEEPWAKE_FAKE_TOKEN_DELAY_S", _DEFAULT_TOKEN_DELAY_S)), defects,
                memory, self._environ.get("SLEEPWAKE_FAKE_VLLM_VERSION", _DEFAULT_VERSION), port or 0,
                checkpoint, fake_host_memory.PinnedHostMemory(self._host), self._log)
            self._fake = fake.start()
            self.start_mode = "fake"
            self.port = int(fake.url.rsplit(":", 1)[1])
            self.command = ["fake_vllm"] + build_command(cfg, self.port)[3:]  # vLLM's flags, no interpreter
            self._log(f"# sleepwake fake server (in-process FakeVllm {fake.version}), "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n# argv: {json.dumps(self.command)}\n"
                      f"# memory: {memory}\n# checkpoint: {checkpoint.path} (digest {checkpoint.digest})")
            if self.env["VLLM_USE_V2_MODEL_RUNNER"] == "1":
                self._log(V2_MARKER)
            template = sleepwake_mutants.ACTIVATION if defects else sleepwake_mutants.NO_MUTANT
            self._log(template.format(name=",".join(defects), pid=os.getpid()))
            check_runner(cfg.runner, read_log(self.log_path))
        except BaseException:
            self.stop()
            raise
        self.timings.start_s += time.monotonic() - begin

    def _log(self, line: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
