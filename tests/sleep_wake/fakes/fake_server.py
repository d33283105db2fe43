"""The fake tier's server: FakeVllm served in-process, a ServerFactory of tools/launcher/interface.py.

Selected by SLEEPWAKE_SERVER_MODULE=tests.sleep_wake.fakes.fake_server (tests/core/servers.py
reads it; unset, the fixtures use tools.launcher.server). Why this seam: the fixtures make their server
through the class that variable names and configure it with the real tools.launcher.config, so nothing
is swapped into sys.modules and every test, fixture and helper that imports the launcher
(test_physical_memory's resolve_model, say) gets the real module. Only the server differs: the real
one supervises a vLLM process on a GPU; this one runs FakeVllm on a thread of the test process and
models NVML from the fake engine's pools.

VllmServer implements the interface the suite uses of a server (tools/launcher/interface.py: Server,
ServerFactory), which mypy checks (//tools/lint:types_test), and nothing more: it does not subclass
the real server, so a member the interface gains must be written here, not inherited GPU code.

What start() shares with the real server: validate(config), resolve_model (a missing checkpoint is a
ConfigError), build_env (the fake decides its runner from VLLM_USE_V2_MODEL_RUNNER, as vLLM does),
the log file under config.log_dir, and check_runner on that log. The weights pool is the checkpoint's
tensor bytes and the KV-cache pool config.kv_cache_bytes, so the memory classes compare the fake's
bytes with the numbers they compare vLLM's with; what the fake generates depends on the checkpoint
(fake_checkpoint.py). pids() names a real process: the
child that holds the engine's pinned host memory (fake_host_memory.py), whose /proc counters the
host-memory class reads as it reads vLLM's. The engine appends vLLM's sleep lines to the log.

Environment (the test process's, which a real server would inherit):
  SLEEPWAKE_MUTANT                a defect of fake_defects.DEFECTS to re-create (the mutant plugin's switch)
  SLEEPWAKE_FAKE_TOKEN_DELAY_S    seconds per decode step (default 0.002)
  SLEEPWAKE_FAKE_VLLM_VERSION     the release whose response shapes the fake serves (default 0.26.0)
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import sleepwake_mutants

from tests.core.trainer import MemoryPhases
from tests.sleep_wake.fakes import fake_checkpoint, fake_defects, fake_engine, fake_host_memory, fake_vllm
from tools.launcher import gpu_lease, ports, weight_receiver
from tools.launcher.config import ServerConfig, build_command, build_env, resolve_model, validate
from tools.launcher.errors import ServerStartError
from tools.launcher.server import V2_MARKER, check_runner, read_log
from tools.launcher.timings import ServerTimings

if TYPE_CHECKING:
    from tools.launcher.interface import Server, ServerFactory

_DEFAULT_TOKEN_DELAY_S = 0.002  # 768 tokens take ~1.5 s: a sleep lands mid-stream in the race tests
_DEFAULT_VERSION = "0.26.0"


class VllmServer:
    """FakeVllm as a Server of the suite's interface. No GPU, so never a lease: lease is accepted (the
    suite asks for one) and memory_phase() orders nothing, as for a server alone on its GPU."""

    def __init__(self, config: ServerConfig, lease: bool = False, *, environ: Mapping[str, str] | None = None):
        self.config = config
        self.command: list[str] | None = None
        self.log_path = ""  # once started
        self.start_mode: str | None = None  # "fake" once started: served in this process, neither forked nor exec'd
        self.timings = ServerTimings()  # no lease and no neighbours: starts and stops only
        self._environ = dict(os.environ if environ is None else environ)
        self._port = 0
        self._fake: fake_vllm.FakeVllm | None = None
        self._host: fake_host_memory.HostProcess | None = None

    @property
    def url(self) -> str:
        return ports.url(self.config.host, self._port)

    @property
    def brackets_calls(self) -> bool:
        return False  # no lease, so no worker plugin: the client's own phases order nothing either

    @property
    def borrowed(self) -> dict | None:
        return None  # served in this test process: none outlives it, so none is taken over from another

    def park(self, suite: dict) -> str | None:
        return None  # nothing to hand over: the fixtures lend it within this process (tests/core/server_reuse.py Pool)

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        begin = time.monotonic()
        self._start()
        self.timings.start_s += time.monotonic() - begin

    def stop(self) -> None:
        begin = time.monotonic()
        fake, self._fake = self._fake, None
        if fake is not None:
            fake.stop()
        host, self._host = self._host, None
        if host is not None:
            host.stop()
        self.timings.stop_s += time.monotonic() - begin

    def pids(self) -> list[int]:
        """The child holding the fake's pinned host memory. Not this process: the fake's threads run in
        the test's process, whose heap grows with the test (a walk's hundreds of steps), not with the
        server's sleeps, and would read as the server's host memory drifting."""
        return [self._host.pid] if self._fake and self._host else []

    def gpu_bytes(self) -> int:
        return self._fake.engine.gpu_bytes() if self._fake else 0

    def device_used_bytes(self) -> int:
        return self._fake.engine.device_used_bytes() if self._fake else 0

    @contextlib.contextmanager
    def memory_phase(self, kind: str, what: str = "") -> Iterator[float]:
        with gpu_lease.memory_phase(None, kind, self.config.lease_timeout_s, what=what) as waited:
            self.timings.add_memory_phase(waited)
            yield waited

    def neighbour_in_start_step(self) -> bool:
        return gpu_lease.start_step_inside(None)  # no lease: no neighbours, never

    # -- start ------------------------------------------------------------------------------------

    def _defects(self) -> list[str]:
        name = self._environ.get(sleepwake_mutants.ENV, "")
        if name in ("", "none"):
            return []
        if name not in fake_defects.DEFECTS:
            raise ServerStartError(
                f"{sleepwake_mutants.ENV}={name!r} names no defect the fake re-creates;"
                f" known: {', '.join(sorted(fake_defects.DEFECTS))}"
            )
        return [name]

    def _start(self) -> None:
        cfg = self.config
        validate(cfg)
        checkpoint = fake_checkpoint.load(resolve_model(cfg.model))
        env = build_env(cfg, self._environ)
        defects = self._defects()
        memory = fake_engine.GpuMemory.for_mode(checkpoint.total_bytes, cfg.kv_cache_bytes, cfg.execution_mode)
        log_dir = (
            cfg.log_dir
            or self._environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
            or tempfile.mkdtemp(prefix="sleepwake-fake-vllm-")
        )
        os.makedirs(log_dir, exist_ok=True)
        fd, self.log_path = tempfile.mkstemp(
            prefix=f"vllm-{cfg.runner}-{cfg.execution_mode}-", suffix=".log", dir=log_dir
        )
        os.close(fd)
        try:
            self._host = fake_host_memory.HostProcess()
            fake = fake_vllm.FakeVllm(
                float(self._environ.get("SLEEPWAKE_FAKE_TOKEN_DELAY_S", _DEFAULT_TOKEN_DELAY_S)),
                defects,
                memory,
                self._environ.get("SLEEPWAKE_FAKE_VLLM_VERSION", _DEFAULT_VERSION),
                cfg.port,
                checkpoint,
                fake_host_memory.PinnedHostMemory(self._host),
                self._log,
                cfg.front_door,
            )
            self._fake = fake.start()
            self.start_mode = "fake"
            self._port = int(fake.url.rsplit(":", 1)[1])
            self.command = ["fake_vllm"] + build_command(cfg, self._port)[3:]  # vLLM's flags, no interpreter
            self._log(
                f"# sleepwake fake server (in-process FakeVllm {fake.version}), "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n# argv: {json.dumps(self.command)}\n"
                f"# memory: {memory}\n# checkpoint: {checkpoint.path} (digest {checkpoint.digest})"
            )
            if env["VLLM_USE_V2_MODEL_RUNNER"] == "1":
                self._log(V2_MARKER)
            template = sleepwake_mutants.ACTIVATION if defects else sleepwake_mutants.NO_MUTANT
            self._log(template.format(name=",".join(defects), pid=os.getpid()))
            check_runner(cfg.runner, read_log(self.log_path))
        except BaseException:
            self.stop()
            raise

    def _log(self, line: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


if TYPE_CHECKING:  # the suite's interface, which mypy (//tools/lint:types_test) holds this server to
    _factory: ServerFactory = VllmServer
    _server: Server = VllmServer(ServerConfig())


class FakeTrainer:
    """The trainer beside a fake server (lib/trainer.py Trainer): no GPU, so no CUDA-IPC handles; it hands
    over the checkpoint's path in their place, which the fake's worker extension opens as the real one
    opens handles (fake_vllm.PUSHES), so the fake tier runs every push way's code path but the GPU's."""

    def __init__(self, phases: MemoryPhases) -> None:
        self._phases = phases

    def ipc_handles(self, checkpoint: str) -> str:
        with self._phases.allocation("trainer"):
            return weight_receiver.encode_handles([(fake_vllm.FAKE_IPC_TENSOR, (checkpoint,))])

    def native_update_info(self, checkpoint: str) -> dict:
        return {"names": [fake_vllm.FAKE_IPC_TENSOR], "dtype_names": [], "shapes": [], "checkpoint": checkpoint}

    def close(self) -> None:
        pass


Trainer = FakeTrainer  # what lib/servers.py trainer_class() takes from the module SLEEPWAKE_SERVER_MODULE names
