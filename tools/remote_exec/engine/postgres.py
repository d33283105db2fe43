"""A throwaway PostgreSQL cluster on loopback: the BuildGrid scheduler's database, fresh every time.

A fresh cluster matters: bot sessions persisted by an earlier server run keep receiving jobs until
their keepalive expires. PostgreSQL refuses to run as root; as root the server runs in a user
namespace where it is an ordinary user (the files stay root's outside), so its data directory can sit
in the test's own TEST_TMPDIR, which other accounts cannot reach. Where user namespaces are not
allowed (many containers, the GPU machine perhaps), root hands the data directory to `nobody` and
runs the server as that account, which needs a workdir every account can traverse.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

from tools.remote_exec.engine import processes

DEBIAN_PG_BIN = pathlib.Path("/usr/lib/postgresql/15/bin")
_USER = "buildgrid"
# The uid PostgreSQL sees itself as inside the namespace; any non-zero one.
_NAMESPACE_UID = 1000
# The account the server runs as where no user namespace can be made: nobody on Debian and Ubuntu.
UNPRIVILEGED_UID = 65534
# Replaces itself with argv[1:] after dropping root: a prefix like `unshare ...`, so that signals
# reach PostgreSQL itself. Python, because it is the one interpreter every machine here has.
_DROP_ROOT = (
    "import os, sys; uid = int(sys.argv[1]); os.setgroups([]); os.setgid(uid); os.setuid(uid); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def _namespace_prefix() -> list[str] | None:
    """`unshare` mapping this root to an ordinary user, if user namespaces work here (containers often
    forbid them); else None."""
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    prefix = [unshare, "--user", f"--map-user={_NAMESPACE_UID}", f"--map-group={_NAMESPACE_UID}"]
    try:
        works = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    return prefix if works else None


def _as_non_root(data: pathlib.Path, namespaces: bool | None) -> list[str]:
    """The command prefix that runs PostgreSQL as an ordinary user; may hand `data` to that user.
    namespaces: use a user namespace (True), run as nobody (False), or whichever works here (None)."""
    if os.geteuid() != 0:
        return []
    if namespaces is not False:
        prefix = _namespace_prefix()
        if prefix:
            return prefix
        if namespaces:
            raise processes.ServiceError(
                "PostgreSQL cannot run as root and `unshare --user` does not work here: "
                "install util-linux, allow user namespaces, or run as a non-root user"
            )
    data.mkdir(parents=True, exist_ok=True)
    os.chown(data, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    for parent in data.parents:
        if not os.stat(parent).st_mode & 0o001:
            raise processes.ServiceError(
                f"PostgreSQL must run as uid {UNPRIVILEGED_UID} here (no user namespaces), "
                f"which cannot enter {parent}: give the engine a workdir under /tmp"
            )
    return [sys.executable, "-c", _DROP_ROOT, str(UNPRIVILEGED_UID)]


@contextlib.contextmanager
def throwaway_cluster(
    workdir: pathlib.Path,
    port: int,
    log_dir: pathlib.Path,
    pg_bin: pathlib.Path = DEBIAN_PG_BIN,
    namespaces: bool | None = None,
) -> Iterator[str]:
    """Initialises a cluster under workdir, serves it on 127.0.0.1:port, yields its SQLAlchemy URL.

    namespaces: run as root inside a user namespace (True) or as nobody (False); None asks the machine.
    """
    for tool in ("initdb", "postgres"):
        if not (pg_bin / tool).exists():
            raise processes.ServiceError(
                f"{pg_bin / tool} is missing: install Debian's postgresql (tools/remote_exec/install.sh does)"
            )
    data = workdir / "pgdata"
    prefix = _as_non_root(data, namespaces)
    processes.run_to_completion(
        "initdb",
        [
            *prefix,
            str(pg_bin / "initdb"),
            "-D",
            str(data),
            "-U",
            _USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ],
        log_dir / "initdb.log",
        timeout=120,
    )
    log = log_dir / "postgres.log"
    # Durability is worthless for a database that is deleted with the test.
    server = [
        *prefix,
        str(pg_bin / "postgres"),
        "-D",
        str(data),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-c",
        "unix_socket_directories=",
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
    ]
    # SIGINT is PostgreSQL's fast shutdown: it ends the sessions instead of waiting for them.
    with processes.started(
        "PostgreSQL",
        server,
        log,
        timeout=60,
        stop_signal=signal.SIGINT,
        ready=processes.log_contains(log, "database system is ready to accept connections"),
    ):
        # psycopg2 named explicitly: SQLAlchemy 2.1 maps postgresql:// to psycopg 3 (see buildgrid.yml.in).
        yield f"postgresql+psycopg2://{_USER}@127.0.0.1:{port}/postgres"
