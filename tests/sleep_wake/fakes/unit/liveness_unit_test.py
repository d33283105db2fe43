"""No answer, a dead engine, a broken connection or a bug in the test is never an oracle's verdict: the
client, expect and the JUnit hook raise or mark them errored (tests/core/liveness.py), against FakeVllm."""

import concurrent.futures
import os

import pytest

from tests.core import expect, liveness, measure, oracle
from tests.core.client import SleepWakeClient, StreamResult
from tests.core.unit import inner_pytest
from tests.sleep_wake.fakes.fake_vllm import FakeVllm

WORKSPACE = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
)


@pytest.fixture
def fake():
    with FakeVllm() as f:
        yield f


@pytest.fixture
def client(fake):
    return SleepWakeClient(fake.url, timeout_s=2)


def _future(value=None, error=None, done=True) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    if done:
        future.set_exception(error) if error is not None else future.set_result(value)
    return future


def test_an_error_answer_of_a_dead_engine_is_errored_not_api_status(fake, client):
    fake.engine.dead = True  # vLLM with VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1: 500 to every call, /health 503
    with pytest.raises(liveness.EngineDead, match="GET /is_sleeping answered HTTP 500.*GET /health then answered 503"):
        client.is_sleeping()
    with pytest.raises(liveness.EngineDead) as e:
        client.sleep(level=1)
    assert e.value.liveness == "api.status" and not isinstance(e.value, oracle.OracleFailure)


def test_an_error_answer_of_a_live_server_fails_api_status(client):
    with pytest.raises(oracle.OracleFailure) as e:
        client.sleep(level="abc")
    assert e.value.oracle_id == "api.status"


def test_a_held_request_still_open_is_no_answer_never_an_oracle(fake, client):
    """A request still open past its bound is a timeout: on a live server no answer (api.answers, which
    only a catalogued hang may count), on a dead one what the server is. It used to fail
    requests.completes on a live server, so an overloaded host killed mutants."""
    with pytest.raises(liveness.NoAnswer, match="a held request to end: not after 0.1 s on a live server") as e:
        expect.result(_future(done=False), 0.1, client=client, step="the wake")
    assert e.value.liveness == "api.answers" and not isinstance(e.value, oracle.OracleFailure)
    fake.engine.dead = True
    with pytest.raises(liveness.EngineDead, match="a held request to end: not after 0.1 s"):
        expect.result(_future(done=False), 0.1, client=client, step="the wake")


def test_a_wait_on_the_server_that_runs_out_is_no_answer(fake, client):
    """measure.wait_for_server: /load that never drains, a request never accepted: no oracle fires."""
    with pytest.raises(liveness.NoAnswer, match="/load back to 0: not after 0.1 s on a live server"):
        measure.wait_for_server(lambda: False, 0.1, "/load back to 0", client.confirm_live, poll_s=0.02)
    fake.engine.dead = True
    with pytest.raises(liveness.EngineDead):
        measure.wait_for_server(lambda: False, 0.1, "/load back to 0", client.confirm_live, poll_s=0.02)


@pytest.mark.parametrize(
    "error",
    [
        TypeError("complete() got an unexpected keyword argument 'prmopt'"),
        liveness.NoAnswer("POST /v1/completions: no answer within 60 s"),
        ConnectionError("refused"),
    ],
    ids=["bug", "no_answer", "refused"],
)
def test_a_held_request_that_raised_anything_but_an_answer_is_errored(client, error):
    """A bug in the test (or no answer, or no connection) around a background request used to fail
    requests.completes."""
    with pytest.raises(type(error)):
        expect.result(_future(error=error), 1, client=client, step="the wake")


def test_held_fires_for_a_request_a_live_server_answered_and_raises_any_other_end(client):
    client.sleep(level=1)
    with pytest.raises(oracle.OracleFailure) as e:
        expect.held("requests.held_while_asleep", client, [_future(value="a completion")], 1, "held")
    assert e.value.oracle_id == "requests.held_while_asleep"
    for error in (liveness.NoAnswer("no answer"), ConnectionError("refused"), KeyError("bug")):
        with pytest.raises(type(error)):
            expect.held("requests.held_while_asleep", client, [_future(error=error)], 1, "held")
    # A stream that broke off or went silent returns a value, not an exception: still no answer.
    broken = StreamResult([None], [[]], 0, "transport error: ConnectionResetError", transport=True, status=200)
    with pytest.raises(liveness.Unreachable, match="ConnectionResetError"):
        expect.held("requests.held_while_asleep", client, [_future(value=broken)], 1, "held")
    silent = StreamResult([None], [[]], 0, "timeout after 60 s", timed_out=True, status=200)
    with pytest.raises(liveness.NoAnswer, match="timeout after 60 s"):
        expect.held("requests.held_while_asleep", client, [_future(value=silent)], 1, "held")


def test_a_stream_s_trouble_is_a_verdict_only_when_a_live_server_sent_it(fake, client):
    broken = StreamResult([None], [[]], 0, "transport error: ChunkedEncodingError(...)", transport=True, status=200)
    with pytest.raises(liveness.Unreachable, match="ChunkedEncodingError"):
        client.check_stream(broken, "the stream")
    hung = StreamResult([None], [[]], 0, "stream still open after 60 s", timed_out=True, status=200)
    with pytest.raises(liveness.NoAnswer, match="the stream: stream still open after 60 s, on a live server"):
        client.check_stream(hung, "the stream")  # a hang of one request and an overloaded host look the same
    client.check_stream(StreamResult(["abort"], [[1]], 1, "error event: aborted"), "the stream")
    answered = StreamResult([None], [[]], 0, "HTTP 500: EngineDeadError", status=500)
    client.check_stream(answered, "the stream")  # a live server's error answer: the oracles judge it
    fake.engine.dead = True
    with pytest.raises(liveness.EngineDead, match="the stream: stream still open after 60 s"):
        client.check_stream(hung, "the stream")
    with pytest.raises(liveness.EngineDead) as e:
        client.check_stream(answered, "the stream")
    assert e.value.liveness == "api.status"


def test_health_of_a_server_that_does_not_answer_is_no_answer(fake):
    fake.hang_paths.add("/health")
    client = SleepWakeClient(fake.url, timeout_s=0.3)
    assert client.health() is False
    with pytest.raises(liveness.NoAnswer):
        client.health_status()
    with pytest.raises(liveness.NoAnswer) as e:
        client.confirm_live("after the oracle")
    assert e.value.liveness == "api.answers"


_INNER = """
import pytest

from tests.sleep_wake.fakes.fake_vllm import FakeVllm
from tests.core import liveness, oracle

@pytest.fixture
def watched():
    # As the conftest's servers: watched while the test and its report run (the call's report comes
    # before the fixture's teardown).
    with FakeVllm() as fake:
        liveness.watch(fake.url, 2)
        yield fake
        liveness.unwatch(fake.url)

def test_no_answer():
    raise liveness.NoAnswer("POST /sleep: no answer within 60 s")

def test_oracle_on_a_dead_server(watched):
    watched.engine.dead = True
    oracle.equal("requests.held_while_asleep", "ended", "pending", "a held request")

def test_oracle_on_a_live_server(watched):
    oracle.equal("flags.gauge", "(1,0,0)", "(0,1,0)", "gauge")
"""


def test_the_junit_xml_marks_errored_cases_and_their_liveness_oracle(tmp_path):
    cases = inner_pytest.junit_properties(tmp_path, _INNER)
    assert cases["test_no_answer"] == [("errored", "no answer"), ("liveness", "api.answers")]
    dead = cases["test_oracle_on_a_dead_server"]
    assert ("oracle", "requests.held_while_asleep") in dead
    assert ("errored", "engine dead") in dead and ("liveness", "server.healthy") in dead
    live = cases["test_oracle_on_a_live_server"]
    assert ("oracle", "flags.gauge") in live and not [n for n, _ in live if n in ("errored", "liveness")]
