"""A whole REAPI engine on loopback: a throwaway PostgreSQL, BuildGrid, and stand-in workers per pool.

Used by //tools/remote_exec/unit:remote_exec_test, and from the command line to try `--config=remote` against
an engine on this machine (a GPU worker advertising `pool_properties.py`'s line runs the GPU cells here):

    python3 -m tools.remote_exec.engine.local_engine --workdir=/tmp/engine \
        --buildgrid_python=/opt/sleepwake/remote-exec-venv/bin/python3 \
        --worker=gpu-0:OSFamily=Linux,gpu=nvidia,vllm_build=0.26.0+1f2e3d4c5b6a7980

It prints `READY grpc://127.0.0.1:PORT` once every worker holds a session, and runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import signal
import sys
from collections.abc import Iterator

from tools.nested_bazel import free_port
from tools.remote_exec.engine import buildgrid, postgres, processes

DEFAULT_BUILDGRID_PYTHON = pathlib.Path("/opt/sleepwake/remote-exec-venv/bin/python3")
INSTALL_HINT = "run tools/remote_exec/install.sh as root (tools/setup.sh does)"


def check_installed(buildgrid_python: pathlib.Path) -> None:
    """Raises ServiceError naming the install step when BuildGrid's venv is missing."""
    if not (buildgrid_python.exists() and (buildgrid_python.parent / "bgd").exists()):
        raise processes.ServiceError(
            f"BuildGrid is not installed ({buildgrid_python} or the bgd beside it is missing): {INSTALL_HINT}"
        )


@contextlib.contextmanager
def local_engine(
    workdir: pathlib.Path,
    workers: list[buildgrid.Worker],
    log_dir: pathlib.Path,
    buildgrid_python: pathlib.Path = DEFAULT_BUILDGRID_PYTHON,
    pg_bin: pathlib.Path = postgres.DEBIAN_PG_BIN,
) -> Iterator[str]:
    """Yields the engine's gRPC URL (instance buildgrid.INSTANCE) once every worker holds a session."""
    check_installed(buildgrid_python)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"grpc://127.0.0.1:{port}"
    with (
        postgres.throwaway_cluster(workdir, free_port(), log_dir, pg_bin) as database_url,
        contextlib.ExitStack() as stack,
    ):
        buildgrid.migrate(buildgrid_python, database_url, log_dir)
        server_log = log_dir / "bgd-server.log"
        server = stack.enter_context(
            processes.spawned(buildgrid.server_command(buildgrid_python, database_url, port, workdir), server_log)
        )
        # The workers start with the server (their first call waits for it), so the two start-ups
        # overlap; the ExitStack stops the workers before the server.
        started = []
        for spec in workers:
            scratch = workdir / f"worker-{spec.bot_id}"
            scratch.mkdir(exist_ok=True)
            log = log_dir / f"worker-{spec.bot_id}.log"
            cmd = buildgrid.worker_command(buildgrid_python, url, spec, scratch)
            started.append((spec.bot_id, stack.enter_context(processes.spawned(cmd, log)), log))
        processes.wait_until("BuildGrid server", processes.port_open(port), server, server_log, timeout=120)
        for bot_id, proc, log in started:
            processes.wait_until(
                f"worker {bot_id}", processes.log_contains(log, buildgrid.WORKER_READY_LINE), proc, log, timeout=120
            )
        yield url


def _worker(text: str) -> buildgrid.Worker:
    bot_id, sep, props = text.partition(":")
    pairs = [p.partition("=") for p in props.split(",") if p]
    if not sep or not bot_id or any(not eq or not k for k, eq, _ in pairs):
        raise argparse.ArgumentTypeError(f"expected BOT_ID:KEY=VALUE[,KEY=VALUE...], got {text!r}")
    return buildgrid.Worker(bot_id, {k: v for k, _, v in pairs})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workdir",
        type=pathlib.Path,
        required=True,
        help="fresh directory for the database, the CAS and the workers' scratch space",
    )
    parser.add_argument(
        "--worker",
        type=_worker,
        action="append",
        required=True,
        metavar="BOT_ID:KEY=VALUE,...",
        help="a worker and the platform properties it advertises (repeat)",
    )
    parser.add_argument("--log_dir", type=pathlib.Path, default=None, help="service logs (default: WORKDIR/logs)")
    parser.add_argument(
        "--buildgrid_python",
        type=pathlib.Path,
        default=DEFAULT_BUILDGRID_PYTHON,
        help="the Python of a venv with BuildGrid (and its `bgd` beside it)",
    )
    parser.add_argument(
        "--pg_bin",
        type=pathlib.Path,
        default=postgres.DEBIAN_PG_BIN,
        help="directory with PostgreSQL's initdb and postgres",
    )
    args = parser.parse_args(argv)
    # SIGTERM unwinds the context managers like Ctrl-C does, so every service is stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with local_engine(
            args.workdir, args.worker, args.log_dir or args.workdir / "logs", args.buildgrid_python, args.pg_bin
        ) as url:
            print(f"READY {url}", flush=True)
            signal.pause()
    except processes.ServiceError as e:
        print(f"local_engine: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
