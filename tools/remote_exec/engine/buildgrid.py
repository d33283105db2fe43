"""BuildGrid's server and the stand-in Bots workers: their commands, config and schema.

BuildGrid needs its own Python (/opt/sleepwake/remote-exec-venv, tools/remote_exec/install.sh), so
everything here runs that interpreter: `bgd migrate`, `bgd server start` and testing/bots_worker.py.
"""

from __future__ import annotations

import dataclasses
import pathlib

from tools.nested_bazel import fill
from tools.remote_exec.engine import processes

_PACKAGE = pathlib.Path(__file__).absolute().parent.parent
CONFIG_TEMPLATE = _PACKAGE / "buildgrid.yml.in"
BOTS_WORKER = _PACKAGE / "testing" / "bots_worker.py"
INSTANCE = "main"
# Every action a stand-in worker runs sees this variable, naming the worker: how a test tells from an
# action's own output which pool ran it.
EXECUTOR_ENV = "SLEEPWAKE_EXECUTOR"
# What a worker logs once the server has registered its session (bots_worker.py).
WORKER_READY_LINE = "holds session "


@dataclasses.dataclass(frozen=True)
class Worker:
    bot_id: str
    properties: dict[str, str]


def migrate(python: pathlib.Path, database_url: str, log_dir: pathlib.Path) -> None:
    """Creates BuildGrid's schema in an empty database (the server does not)."""
    processes.run_to_completion(
        "bgd migrate apply",
        [str(python.parent / "bgd"), "migrate", "apply", database_url],
        log_dir / "bgd-migrate.log",
        timeout=120,
    )


def server_command(python: pathlib.Path, database_url: str, port: int, workdir: pathlib.Path) -> list[str]:
    """Writes the server's config (buildgrid.yml.in, CAS under workdir) and returns its command line."""
    config = workdir / "buildgrid.yml"
    config.write_text(fill(CONFIG_TEMPLATE, PORT=port, DATABASE_URL=database_url, CAS_DIR=workdir / "cas"))
    return [str(python.parent / "bgd"), "server", "start", str(config)]


def worker_command(python: pathlib.Path, url: str, spec: Worker, scratch: pathlib.Path) -> list[str]:
    return [
        str(python),
        str(BOTS_WORKER),
        f"--server={url}",
        f"--instance={INSTANCE}",
        f"--bot_id={spec.bot_id}",
        f"--scratch_dir={scratch}",
        f"--env={EXECUTOR_ENV}={spec.bot_id}",
        *[f"--property={k}={v}" for k, v in spec.properties.items()],
    ]
