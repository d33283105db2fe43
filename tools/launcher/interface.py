"""What the suite uses of a server: the interface server.py's VllmServer and the fake tier's server
(tests/sleep_wake/fakes/fake_server.py) both implement.

The suite (tests/sleep_wake/conftest.py, lib/, goldens/take_golden.py, the test classes) makes a server
through a ServerFactory, the class SLEEPWAKE_SERVER_MODULE names (tests/core/servers.py),
enters it as a context manager and then uses only Server's members. Each implementation declares
itself a ServerFactory under TYPE_CHECKING, and mypy (//tools/lint:types_test) holds it to that: a
member the suite needs that a server lacks, or a signature that differs, fails there on a CPU, not
first on a GPU. Nothing else of a server is the suite's to use: the real one's restart, wait, lease
and start internals stay the launcher's.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

from tools.launcher.config import ServerConfig
from tools.launcher.timings import ServerTimings


class Server(Protocol):
    """A started server, as the fixtures and the suite's library see it."""

    # Read-only to the suite: properties, so that an implementation may hold them as plain attributes.
    @property
    def config(self) -> ServerConfig:
        """What it was started with (the memory classes read kv_cache_bytes and model)."""

    @property
    def url(self) -> str:
        """http://host:port, once started."""

    @property
    def command(self) -> list[str] | None:
        """The argv it runs (vLLM's flags), once started; recorded with the start time."""

    @property
    def log_path(self) -> str | None:
        """Its log, once started: the classes read vLLM's lines in it."""

    @property
    def start_mode(self) -> str | None:
        """How it was started (zygote, plain, fake), once started."""

    @property
    def timings(self) -> ServerTimings:
        """Where its starts, stops and memory-phase waits went, which the fixtures record at stop."""

    @property
    def brackets_calls(self) -> bool:
        """Whether its worker takes the memory phase around its own sleeps, wakes and reloads, so that
        its client need not (tests/core/client.py client_of)."""

    @property
    def borrowed(self) -> dict | None:
        """For a server another test process gave back and this one took over (it was started
        before): what the giver passed to park() for it; None for a server this process started."""

    def park(self, suite: dict) -> str | None:
        """Hands the running server to the next test process that asks for one of its configuration,
        with suite (JSON) for it; returns where it waits. None: it cannot be handed over, and is still
        running and the caller's to stop."""

    def __enter__(self) -> Server:
        """Starts it; returns it once GET /health answers 200."""

    def __exit__(self, *exc: object) -> None:
        """Stops it and checks that it let go of what it held."""

    def pids(self) -> list[int]:
        """Its process tree now, whose host memory the host-memory class reads."""

    def gpu_bytes(self) -> int:
        """Device bytes its processes hold now (NVML's per-process figure)."""

    def device_used_bytes(self) -> int:
        """Device-wide used bytes now (what vLLM judges a sleep by)."""

    def memory_phase(self, kind: str, what: str = "") -> AbstractContextManager[float]:
        """Orders a memory phase against GPU neighbours (gpu_lease.memory_phase kinds); yields the
        seconds it waited."""

    def neighbour_in_start_step(self) -> bool:
        """Whether a server sharing its GPU is in a start step now (the latency oracles' own bounds)."""


class ServerFactory(Protocol):
    """How the suite makes a server: VllmServer(config, lease=True[, environ=...]), not yet started."""

    def __call__(
        self, config: ServerConfig, lease: bool = False, *, environ: Mapping[str, str] | None = None
    ) -> Server: ...
