"""A throwaway PostgreSQL cluster on loopback: the BuildGrid scheduler's database, fresh every time.

A fresh cluster matters: bot sessions persisted by an earlier server run keep receiving jobs until
their keepalive expires. PostgreSQL refuses to run as root; as root the server runs in a user
namespace where it is an ordinary user (the files stay root's outside), so its data directory can sit
in the test's own TEST_TMPDIR, which other accounts cannot reach.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
from typing import Iterator

from tools.remote_exec.engine import processes

DEBIAN_PG_BIN = pathlib.Path("/usr/lib/postgresql/15/bin")
_USER = "buildgrid"
# The uid PostgreSQL sees itself as inside the namespace; any non-zero one.
_NAMESPACE_UID = 1000


def _as_non_root() -> list[str]:
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if not unshare:
        raise processes.ServiceError("PostgreSQL cannot run as root and `unshare` (util-linux) is missing: "
                                     "apt-get install util-linux, or run as a non-root user")
    return [unshare, "--user", f"--map-user={_NAMESPACE_UID}", f"--map-group={_NAMESPACE_UID}"]


@contextlib.contextmanager
def throwaway_cluster(workdir: pathlib.Path, port: int, log_dir: pathlib.Path,
                      pg_bin: pathlib.Path = DEBIAN_PG_BIN) -> Iterator[str]:
    """Initialises a cluster under workdir, serves it on 127.0.0.1:port, yields its SQLAlchemy URL."""
    for tool in ("initdb", "postgres"):
        if not (pg_bin / tool).exists():
            raise processes.ServiceError(f"{pg_bin / tool} is missing: install Debian's postgresql "
                                         "(tools/remote_exec/install.sh does)")
    data = workdir / "pgdata"
    prefix = _as_non_root()
    processes.run_to_completion(
        "initdb", [*prefix, str(pg_bin / "initdb"), "-D", str(data), "-U", _USER, "--auth=trust",
                   "-E", "UTF8", "--no-locale", "--no-sync"],
        log_dir / "initdb.log", timeout=120)
    log = log_dir / "postgres.log"
    # Durability is worthless for a database that is deleted with the test.
    server = [*prefix, str(pg_bin / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
              "-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "synchronous_commit=off",
              "-c", "full_page_writes=off"]
    # SIGINT is PostgreSQL's fast shutdown: it ends the sessions instead of waiting for them.
    with processes.started("PostgreSQL", server, log, timeout=60, stop_signal=signal.SIGINT,
                           ready=processes.log_contains(log, "database system is ready to accept connections")):
        # psycopg2 named explicitly: SQLAlchemy 2.1 maps postgresql:// to psycopg 3 (see buildgrid.yml.in).
        yield f"postgresql+psycopg2://{_USER}@127.0.0.1:{port}/postgres"
