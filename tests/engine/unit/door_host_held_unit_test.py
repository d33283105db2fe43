"""The completion test_door_host.py holds at level 0: only the door host's answer ends it for the oracle
requests.held_while_paused; no answer, a refused connection or a bug in the test is raised as itself
(errored), never that oracle's kill. A call of its that gets no answer of a live door host (_answer) is
liveness.NoAnswer, never an answer for api.status to compare."""

import pytest
import requests

from tests.engine.test_door_host import _answer, _held_completion  # the test module's helpers, a stand-in client
from tests.core import liveness, oracle


class _Client:
    """A SleepWakeClient whose completion raises `error` at once; /load counts it taken."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def complete(self, prompt, max_tokens):
        raise self.error

    def load(self) -> int:
        return 1


@pytest.mark.parametrize(
    "error",
    [
        liveness.NoAnswer("POST /v1/completions: no answer within 60 s"),
        requests.ConnectionError("connection refused"),
        TypeError("complete() got an unexpected keyword argument 'max_token'"),
    ],
    ids=["no_answer", "refused", "test_bug"],
)
def test_what_is_no_answer_of_the_door_host_is_raised_as_itself(error):
    with pytest.raises(type(error)) as raised:
        _held_completion(_Client(error))
    assert raised.value is error


def test_an_error_answer_ends_the_hold():
    answer = oracle.OracleFailure("api.status", "POST /v1/completions", "HTTP 500", "2xx", "")
    with pytest.raises(oracle.OracleFailure) as raised:
        _held_completion(_Client(answer))
    assert raised.value.oracle_id == "requests.held_while_paused"


class _Unanswering:
    """A SleepWakeClient of a live door host (GET /health 200) that answers no call within its timeout."""

    def raw(self, method, path, **kw):
        raise requests.ReadTimeout(f"{method} {path}: read timed out")

    def confirm_live(self, what: str) -> None:
        pass


def test_a_call_the_live_door_host_never_answers_is_no_answer_not_an_answer():
    with pytest.raises(liveness.NoAnswer) as raised:
        _answer(_Unanswering(), "GET", "/is_sleeping")
    assert raised.value.liveness == "api.answers"
