"""The throwaway PostgreSQL as root where user namespaces are forbidden (the GPU machine's container
may be such a place): the server must run as nobody, and a workdir nobody cannot enter is named."""

import os
import pathlib
import shutil
import tempfile

import pytest

from tools.nested_bazel import free_port
from tools.remote_exec.engine import postgres, processes


@pytest.fixture
def world_traversable_dir():
    # Not TEST_TMPDIR: under Bazel it sits below /root (0700), which nobody cannot enter.
    path = pathlib.Path(tempfile.mkdtemp(prefix="sleepwake-pg-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_without_namespaces_the_cluster_runs_as_an_ordinary_user(world_traversable_dir):
    logs = world_traversable_dir / "logs"
    logs.mkdir()
    with postgres.throwaway_cluster(world_traversable_dir, free_port(), logs, namespaces=False) as url:
        assert url.startswith("postgresql+psycopg2://")
        owner = (world_traversable_dir / "pgdata" / "PG_VERSION").stat().st_uid
    # initdb wrote the cluster's files as the account the server runs as.
    assert owner == (postgres.UNPRIVILEGED_UID if os.geteuid() == 0 else os.geteuid())


def test_a_workdir_the_ordinary_user_cannot_enter_is_named(world_traversable_dir):
    locked = world_traversable_dir / "locked"
    locked.mkdir(mode=0o700)
    if os.geteuid() != 0:  # not root: nothing to drop, so nothing to check
        assert postgres._as_non_root(locked / "pgdata", namespaces=False) == []
        return
    with pytest.raises(processes.ServiceError, match="cannot enter .*locked"):
        postgres._as_non_root(locked / "pgdata", namespaces=False)
