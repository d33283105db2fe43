"""The state walk's engine tier when its engine dies: a death is liveness.EngineDead (errored: liveness
server.healthy, or api.status for a route's error answer), never an oracle's failure, except where a
terminal probe's pin predicts it (its health not 200): there the death is the observed outcome, compared with
the pin. A forward pass of a request that must wait is still the held oracle's, the death it caused or not.
On a stand-in server whose busy loop died (or lives)."""

import types

import pytest

from tests.engine.lib.engine_server import EngineServer
from tests.engine.lib.engine_walk import EngineSubject
from tests.core import liveness, oracle
from tests.core.walk import model, observations
from tests.core.walk import operations as ops

DIED = RuntimeError("forward pass of requests ['probe-0'] scheduled while kv_cache released")
ASLEEP = model.State(level=1, asleep_tags=frozenset(model.TAGS), pause=model.PAUSE_ALL, gauge_level=1)


class _Server:
    """An EngineServer whose busy loop died of `error` (None: alive); its request has had `forwards` passes
    and no end; every route answers `status`."""

    def __init__(self, error: BaseException | None = DIED, forwards: int = 0, status: int = 500) -> None:
        self.error, self._forwards, self.status = error, forwards, status
        self.timeline = "<timeline>"
        self.client = types.SimpleNamespace(last_failure="sleep(): EngineDeadError" if error else None)
        self.record = types.SimpleNamespace(end=lambda rid: None, wait_ended=lambda ids, timeout_s=None: False)

    def alive(self) -> BaseException | None:
        return self.error

    def settle(self) -> None:
        pass

    def send(self, prompt, max_tokens, seed=None, kind="req") -> str:
        return f"{kind}-0"

    def forwards(self, request_id: str) -> int:
        return self._forwards

    def abort(self, request_ids) -> None:
        pass

    def post(self, path, params=None, json=None):
        return types.SimpleNamespace(status_code=self.status, text="Internal Server Error", content=b"")

    def http_is_sleeping(self):
        return True if self.error is None else "HTTP 500"


def _tier(server: _Server) -> EngineSubject:
    return EngineSubject(server, "0.26.0", {})  # type: ignore[arg-type]  # the stand-in


def _errored(raised, liveness_id: str = "server.healthy") -> None:
    assert isinstance(raised.value, liveness.EngineDead) and raised.value.liveness == liveness_id


# --- the non-pinned paths: errored ------------------------------------------------------------------
def test_a_dead_engine_between_steps_is_errored():
    with pytest.raises(liveness.EngineDead) as raised:
        _tier(_Server()).check_state(ASLEEP, "step 3")
    _errored(raised)


def test_a_request_that_cannot_end_on_a_dead_engine_is_errored_not_its_steps_oracle():
    with pytest.raises(liveness.EngineDead) as raised:
        _tier(_Server())._ended(["fresh-0"], "walk step 2")
    _errored(raised)


def test_a_routes_error_answer_from_a_dead_engine_is_errored():
    with pytest.raises(liveness.EngineDead) as raised:
        _tier(_Server())._status(types.SimpleNamespace(status_code=500, text="Internal Server Error"), "walk step 1")
    _errored(raised, "api.status")


def test_a_routes_error_answer_from_a_live_engine_stays_api_status():
    with pytest.raises(oracle.OracleFailure) as raised:
        _tier(_Server(error=None))._status(types.SimpleNamespace(status_code=500, text="refused"), "walk step 1")
    assert raised.value.oracle_id == "api.status"


def test_a_death_in_the_held_probe_without_a_forward_pass_is_errored():
    with pytest.raises(liveness.EngineDead) as raised:
        _tier(_Server(forwards=0))._held_probe(ASLEEP, "walk step 4")
    _errored(raised)


def test_a_forward_pass_of_the_held_probe_is_the_held_oracle_even_if_it_killed_the_engine():
    with pytest.raises(oracle.OracleFailure) as raised:
        _tier(_Server(forwards=1))._held_probe(ASLEEP, "walk step 4")
    assert raised.value.oracle_id == model.held_oracle(ASLEEP)


def test_a_dead_engine_in_a_wait_of_the_server_is_errored():
    server = EngineServer.__new__(EngineServer)
    server.loop = types.SimpleNamespace(error=DIED)  # type: ignore[assignment]  # a busy loop that died
    with pytest.raises(liveness.EngineDead) as raised:
        server.wait_for(lambda: False, "walk step 5: the in-flight request's prefill")
    _errored(raised)


# --- terminal probes: the pin decides -----------------------------------------------------------------
def _pin(health: int):
    expected = {"status": 500, "is_sleeping": True, "health": health}
    return types.SimpleNamespace(
        entry=types.SimpleNamespace(name=ops.RELOAD_ASLEEP), expected=expected, describe=lambda: "a stand-in pin"
    )


RELOAD = types.SimpleNamespace(name="reload", params=(None,))


def _probe(tier, pin) -> None:
    """A terminal probe as the driver makes it: the tier observes, the core judges (observations.check_terminal)."""
    observations.check_terminal(
        tier.terminal(RELOAD, ASLEEP, pin, "terminal"), pin, ASLEEP, tier.version, "terminal", tier.judged
    )


def test_a_death_the_pin_does_not_predict_is_errored():
    with pytest.raises(liveness.EngineDead) as raised:
        _probe(_tier(_Server()), _pin(200))
    _errored(raised)


def test_a_death_the_pin_predicts_is_its_observed_outcome():
    server = _Server()
    server.http_is_sleeping = lambda: True  # type: ignore[method-assign]  # as pinned
    _probe(_tier(server), _pin(500))  # as pinned: passes


def test_a_live_engine_where_the_pin_predicts_death_fails_the_terminal_oracle():
    with pytest.raises(oracle.OracleFailure) as raised:
        _probe(_tier(_Server(error=None)), _pin(500))
    assert raised.value.oracle_id == ops.TERMINAL_ORACLES[ops.RELOAD_ASLEEP]
    assert raised.value.measured["health"] == 200
