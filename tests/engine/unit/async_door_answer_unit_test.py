"""What test_async_llm_door.py records as the AsyncLLM door's answer for the oracles that compare it with
a pinned one (api.wait_mode, api.dead_engine_call): only the engine's own answer (checks.answered). On a
live engine its death is errored (liveness.EngineDead) and a bug in the test propagates as itself; on the
engine the test kills on purpose EngineDeadError is the answer, and any other exception still propagates.
The scenarios are the test module's own, on a stand-in door whose calls answer at once."""

import asyncio

import pytest

from tests.engine import test_async_llm_door as door_tests  # a module: its tests stay engine_test's
from tests.core import liveness, oracle
from vllm.v1.engine.exceptions import EngineDeadError


class _Request:
    """A request in flight at once (its first output reached the caller); with `error`, its generator has
    raised it already (what the caller's generator raises once the engine died)."""

    def __init__(self, error: BaseException | None) -> None:
        self.id = "req0"
        self.outputs: list = []
        self.started = asyncio.Event()
        self.started.set()
        self.task = asyncio.get_running_loop().create_future()
        if error is not None:
            self.task.set_exception(error)

    async def ended_within(self, seconds: float) -> bool:
        return self.task.done()

    def end(self) -> dict:
        error = self.task.exception() if self.task.done() else None
        return {"finish_reason": None, "token_ids": [], "error": repr(error) if error else None}


class _LLM:
    """AsyncLLM's calls: sleep raises `sleep_raises` (or answers None), is_sleeping raises `later_raises`
    (or answers True)."""

    def __init__(self, sleep_raises=None, later_raises=None) -> None:
        self.sleep_raises, self.later_raises = sleep_raises, later_raises

    async def collective_rpc(self, method, kwargs=None):
        return [None]

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        if self.sleep_raises is not None:
            raise self.sleep_raises

    async def is_sleeping(self) -> bool:
        if self.later_raises is not None:
            raise self.later_raises
        return True


class _Door:
    def __init__(self, llm: _LLM, request_error: BaseException | None = None) -> None:
        self.llm = llm
        self.request_error = request_error

    def run(self, coro):
        return asyncio.run(coro)

    async def call(self, what: str, coro):
        return await coro

    def spawn(self, awaitable):
        return asyncio.ensure_future(awaitable)

    def generate(self, prompt, params) -> _Request:
        return _Request(self.request_error)


# --- api.wait_mode: sleep(1, mode='wait') on a live engine --------------------------------------------------
@pytest.mark.parametrize(
    "error",
    [TypeError("sleep() got an unexpected keyword argument 'mode'"), AttributeError("no attribute 'sleep'")],
    ids=["type_error", "attribute_error"],
)
def test_a_test_bug_in_the_wait_sleep_propagates_as_itself(error):
    with pytest.raises(type(error)) as raised:
        door_tests.test_async_sleep_with_mode_wait_drains_then_sleeps(_Door(_LLM(sleep_raises=error)))
    assert raised.value is error


def test_the_engines_death_in_the_wait_sleep_is_errored():
    with pytest.raises(liveness.EngineDead) as raised:
        door_tests.test_async_sleep_with_mode_wait_drains_then_sleeps(_Door(_LLM(sleep_raises=EngineDeadError())))
    assert raised.value.liveness == "api.status"


def test_the_doors_refusal_of_the_wait_sleep_is_compared():
    with pytest.raises(oracle.OracleFailure) as raised:
        door_tests.test_async_sleep_with_mode_wait_drains_then_sleeps(
            _Door(_LLM(sleep_raises=ValueError("mode wait refused")))
        )
    assert raised.value.oracle_id == "api.wait_mode" and raised.value.measured["raised"] == "ValueError"


# --- api.dead_engine_call: calls on the engine the test killed ---------------------------------------------
def _dead_engine_door(sleep_raises, later_raises) -> _Door:
    return _Door(_LLM(sleep_raises, later_raises), request_error=EngineDeadError())


@pytest.mark.parametrize(
    "sleep_raises, later_raises, bug",
    [
        (TypeError("sleep() takes 1 positional argument"), EngineDeadError(), "sleep"),
        (EngineDeadError(), AttributeError("'AsyncLLM' object has no attribute 'is_sleepin'"), "later"),
    ],
    ids=["queued_call", "later_call"],
)
def test_a_test_bug_on_the_dead_engine_propagates_as_itself(sleep_raises, later_raises, bug):
    error = sleep_raises if bug == "sleep" else later_raises
    with pytest.raises(type(error)) as raised:
        door_tests.test_async_call_in_flight_when_the_engine_dies_as_pinned(
            _dead_engine_door(sleep_raises, later_raises)
        )
    assert raised.value is error


def test_engine_dead_error_of_the_killed_engine_is_its_answer():
    """Both calls failed with EngineDeadError (what vLLM documents, not the pinned hang): compared as the
    door's answer, never errored."""
    with pytest.raises(oracle.OracleFailure) as raised:
        door_tests.test_async_call_in_flight_when_the_engine_dies_as_pinned(
            _dead_engine_door(EngineDeadError(), EngineDeadError())
        )
    assert raised.value.oracle_id == "api.dead_engine_call"
    assert raised.value.measured == {"answered": True, "raised": "EngineDeadError", "later_call": "EngineDeadError"}


# --- a request's end: a wait that runs out is errored, never its oracle's failure ----------------------------
async def _finished_of_a_request_that_never_ends(errored: bool):
    door = _Door(_LLM())
    door.llm.errored = errored  # type: ignore[attr-defined]  # AsyncLLM.errored: its engine process died
    return await door_tests._finished(door, _Request(None), "requests.completes", "the request held at level 0")


def test_a_request_that_never_ends_on_a_live_engine_is_no_answer_not_its_oracle():
    with pytest.raises((liveness.NoAnswer, oracle.OracleFailure)) as raised:
        asyncio.run(_finished_of_a_request_that_never_ends(errored=False))
    assert isinstance(raised.value, liveness.NoAnswer) and raised.value.liveness == "api.answers"


def test_a_request_that_never_ends_on_a_dead_engine_is_errored():
    with pytest.raises(liveness.EngineDead):
        asyncio.run(_finished_of_a_request_that_never_ends(errored=True))
