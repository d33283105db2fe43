"""A wall-clock wait of the engine tier that runs out on a live engine is liveness.NoAnswer (errored, api.answers:
a hang and a host too loaded look alike, so only a catalogued hang may count it), never an oracle's failure:
a walk step's request that does not end (engine_walk._ended), a wait for the engine (EngineServer.wait_for), a
utility call the busy loop does not answer (QueueEngineClient), a route whose engine call got no answer (not a
500 for api.status) and a terminal probe's request where its pin predicts an end. Where the pin predicts that the
request waits, the window is the observation, compared with the pin. On stand-ins that never answer."""

import queue
import types

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.engine.lib import engine_client, engine_server
from tests.engine.lib.engine_server import EngineServer, RouteClient
from tests.engine.lib.engine_walk import EngineSubject, Open
from tests.core import liveness, oracle
from tests.core.walk import model, observations
from tests.core.walk import operations as ops
from vllm.entrypoints.serve.dev.sleep.api_router import attach_router as attach_sleep_router

AWAKE = model.State()
ASLEEP = model.State(level=1, asleep_tags=frozenset(model.TAGS), pause=model.PAUSE_ALL, gauge_level=1)


class _Live:
    """A live EngineServer (its busy loop runs) whose requests never end and whose routes answer `status`."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.timeline = "<timeline>"
        self.client = types.SimpleNamespace(last_failure=None)
        self.record = types.SimpleNamespace(end=lambda rid: None, wait_ended=lambda ids, timeout_s=None: False)

    def alive(self) -> BaseException | None:
        return None

    def settle(self) -> None:
        pass

    def send(self, prompt, max_tokens, seed=None, kind="req") -> str:
        return f"{kind}-0"

    def abort(self, request_ids) -> None:
        pass

    def post(self, path, params=None, json=None):
        return types.SimpleNamespace(status_code=self.status, text="", content=b"")

    def http_is_sleeping(self):
        return True


def _tier(server) -> EngineSubject:
    return EngineSubject(server, "0.26.0", {})


def _no_answer(raised) -> None:
    assert isinstance(raised.value, liveness.NoAnswer), repr(raised.value)
    assert raised.value.liveness == "api.answers"
    assert "\n" not in str(raised.value)  # one line: what did not end, in how long


def test_a_waiting_request_an_abort_sleep_leaves_open_is_no_answer_not_requests_abort_aborts():
    """abort_spares_waiting's symptom in the walk: the request sent while paused is never ended."""
    paused = model.State(level=0, pause=model.PAUSE_NEW, gauge_level=0)
    tier = _tier(_Live())
    tier.open = [Open(["plain-0"], "plain", "generate_fresh", 4)]
    with pytest.raises((liveness.NoAnswer, oracle.OracleFailure)) as raised:
        tier.sleep(ops.Operation("sleep", (1, "abort", 0)), paused, ASLEEP, "step 2")
    _no_answer(raised)


def test_a_generate_whose_request_never_ends_is_no_answer_not_output_finish_length():
    with pytest.raises((liveness.NoAnswer, oracle.OracleFailure)) as raised:
        _tier(_Live()).generate(ops.Operation("generate_fresh", ()), AWAKE, AWAKE, "step 1")
    _no_answer(raised)


def _live_engine_server() -> EngineServer:
    server = EngineServer.__new__(EngineServer)
    server.loop = types.SimpleNamespace(error=None)  # type: ignore[assignment]  # a busy loop that runs
    server.record = types.SimpleNamespace(dead=False)  # type: ignore[assignment]
    server.timeline = "<timeline>"  # type: ignore[assignment]
    return server


def test_a_wait_for_the_engine_that_runs_out_on_a_live_engine_is_no_answer(monkeypatch):
    monkeypatch.setattr(engine_server, "WAIT_S", 0.01)
    with pytest.raises((liveness.NoAnswer, oracle.Precondition)) as raised:
        _live_engine_server().wait_for(lambda: False, "walk step 5: the in-flight request's prefill")
    _no_answer(raised)


@pytest.fixture
def unanswering(monkeypatch):
    """A RouteClient on an engine whose busy loop runs but never answers (nothing reads its input queue)."""
    monkeypatch.setattr(engine_client, "CALL_TIMEOUT_S", 0.05)
    proc = types.SimpleNamespace(input_queue=queue.Queue(), output_queue=queue.Queue())
    client = RouteClient(proc)  # the stand-in engine's two queues
    yield client
    client.close()


def test_a_utility_call_never_answered_is_no_answer(unanswering):
    with pytest.raises(Exception) as raised:  # noqa: B017  the old code raised TimeoutError
        unanswering.call("is_scheduler_paused")
    _no_answer(raised)


def test_a_route_whose_engine_call_got_no_answer_is_no_answer_not_api_status(unanswering):
    app = FastAPI()
    attach_sleep_router(app)
    app.state.engine_client = unanswering
    server = _live_engine_server()
    server.client = unanswering
    with TestClient(app, raise_server_exceptions=False) as http:
        server.http = http
        with pytest.raises((liveness.NoAnswer, oracle.OracleFailure)) as raised:
            _tier(server).sleep(ops.Operation("sleep", (1, "abort", 0)), AWAKE, ASLEEP, "step 1")
    _no_answer(raised)


def _pin(request: str):
    expected = {"status": 500, "is_sleeping": True, "health": 200, "request": request}
    return types.SimpleNamespace(
        entry=types.SimpleNamespace(name=ops.RELOAD_ASLEEP), expected=expected, describe=lambda: "a stand-in pin"
    )


RELOAD = types.SimpleNamespace(name="reload", params=(None,))


def _probe(tier, pin) -> None:
    """A terminal probe as the driver makes it: the tier observes, the core judges (observations.check_terminal)."""
    observations.check_terminal(
        tier.terminal(RELOAD, ASLEEP, pin, "terminal"), pin, ASLEEP, tier.version, "terminal", tier.judged
    )


def test_a_terminal_request_that_never_ends_where_the_pin_predicts_an_end_is_no_answer():
    with pytest.raises((liveness.NoAnswer, oracle.OracleFailure)) as raised:
        _probe(_tier(_Live(status=500)), _pin("ended"))
    _no_answer(raised)


def test_a_terminal_request_held_as_its_pin_predicts_is_the_observed_outcome():
    _probe(_tier(_Live(status=500)), _pin("held"))  # as pinned: passes
