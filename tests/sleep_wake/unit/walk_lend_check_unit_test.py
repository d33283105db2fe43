"""The walk's check of a lent server (test_state_walk.py lend_check, the LEND_CHECK of its shards) on the fake
server: a server reset after a class slept at level 1 and pushed B is lent, and the walk starts it with the
level-1 copy's pinned block cached, as the model's host bands show; a server that still serves B after its
reset (the fake's reload_weights_noop: the reset's reload of A does nothing) is refused by the walk's own
check, A's goldens, before the walk could judge a step against the wrong checkpoint."""

import contextlib
import dataclasses
import os

import pytest
import sleepwake_mutants

from tests.core import cells, measure, oracle, pushes, server_reuse, servers
from tests.core.client import client_of
from tests.core.walk import model
from tests.sleep_wake import test_state_walk as walk
from tools.launcher.config import resolve_model


@pytest.fixture
def lent_of(tmp_path):
    """A started fake server (SLEEPWAKE_MUTANT: `defect`, if any) with its fresh readings, as the fixtures
    lend it."""
    started = contextlib.ExitStack()

    def start(defect: str | None = None) -> server_reuse.Lent:
        cell = cells.cell_from_env()
        environ = dict(os.environ)
        environ.pop(sleepwake_mutants.ENV, None)
        if defect:
            environ[sleepwake_mutants.ENV] = defect
        server = servers.server_class()(cell.server_config(str(tmp_path)), environ=environ)  # the fake cell's
        started.enter_context(server)  # the interface's start and stop (tools/launcher/interface.py)
        client = client_of(server)
        fresh = server_reuse.read_fresh(cell, server, client, resolve_model(server.config.model))
        return server_reuse.Lent(server, server, fresh)

    with started:
        yield start


def _recorder() -> measure.Recorder:
    return measure.Recorder(cell_id=cells.cell_from_env().id)


def _push_b(client) -> None:
    pushes.TensorLoad(cells.cell_from_env().door).push(client, resolve_model(os.environ["SLEEPWAKE_MODEL_B"]))


def test_a_server_reset_after_a_level1_sleep_and_a_push_is_lent_with_its_pinned_block(lent_of):
    lent = lent_of()
    client = client_of(lent.server)
    client.sleep(1)
    client.wake_up()
    _push_b(client)
    assert server_reuse.lend(cells.cell_from_env(), lent, client, _recorder(), walk.lend_check) is None
    assert lent.initial == dataclasses.replace(model.INITIAL, host_cached=True)


def test_a_server_still_serving_b_after_its_reset_fails_the_walks_check(lent_of):
    lent = lent_of("reload_weights_noop")
    client = client_of(lent.server)
    _push_b(client)
    server_reuse.reset(client, lent.fresh.checkpoint)  # its reload of A does nothing: B still serves
    with pytest.raises(oracle.OracleFailure) as failed:
        walk.lend_check(cells.cell_from_env(), lent, client, _recorder())
    assert failed.value.oracle_id == "output.golden_tokens"
    assert lent.initial is None
