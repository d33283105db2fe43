"""What an exception of an engine call stands for (checks.answers, AsyncLlmLoop.call): only the engine's own
error answer fails the oracle api.status; a dead engine is errored (liveness.EngineDead), and a bug in the
test propagates as itself, so neither becomes a kill of a mutant whose defect is an error answer."""

import asyncio

import pytest

from tests.engine.fakes.timeline import Timeline
from tests.engine.fakes.worker import FakeWorker, ReleasedMemoryAccess
from tests.engine.lib import checks
from tests.engine.lib.async_llm_loop import AsyncLlmLoop
from tests.core import liveness, oracle
from tools.results.testlogs import ERRORED_PROPERTY, LIVENESS_PROPERTY
from vllm.v1.engine import UtilityOutput
from vllm.v1.engine.core import EngineCore
from vllm.v1.engine.core_client import _process_utility_output
from vllm.v1.engine.exceptions import EngineDeadError


class _Engine:
    """The signature of an engine method, for a test that calls it wrong."""

    def sleep(self, level: int = 1) -> None:
        return None


def _dead() -> None:
    raise EngineDeadError()


def _second_sleep() -> None:
    """The fake worker's refusal of a sleep whose pools are released (what no_double_sleep_guard reaches)."""
    worker = FakeWorker.__new__(FakeWorker)  # its state alone, without a vLLM config to build it from
    worker.resident, worker.timeline = {"weights": False, "kv_cache": False}, Timeline()
    worker.sleep(1)


def _oracle_of_the_call() -> None:
    oracle.fail("requests.completes", "an oracle inside the call", "open", "ended")


# --- checks.answers (EngineCore, vllm.LLM in process) ----------------------------------------------------
def test_a_wrong_keyword_of_the_test_propagates_as_itself():
    with pytest.raises(TypeError, match="levl"):
        checks.answers("sleep(levl=1)", _Engine().sleep, levl=1)


def test_a_dead_engine_is_errored_not_an_error_answer():
    with pytest.raises(liveness.EngineDead) as raised:
        checks.answers("sleep(level=1)", _dead)
    assert oracle.properties(raised.value) == [(ERRORED_PROPERTY, "engine dead"), (LIVENESS_PROPERTY, "api.status")]


def test_an_oracle_the_call_failed_keeps_its_id():
    with pytest.raises(oracle.OracleFailure) as raised:
        checks.answers("a helper that judges", _oracle_of_the_call)
    assert raised.value.oracle_id == "requests.completes"


def test_the_workers_refusal_is_the_error_answer():
    with pytest.raises(oracle.OracleFailure) as raised:
        checks.answers("a second sleep(level=1)", _second_sleep)
    assert raised.value.oracle_id == "api.status" and ReleasedMemoryAccess.__name__ in str(raised.value)


def test_vllms_refusal_of_an_argument_is_the_error_answer():
    with pytest.raises(oracle.OracleFailure) as raised:
        checks.answers("pause_scheduler(mode='wait') in process", EngineCore.pause_scheduler, None, mode="wait")
    assert raised.value.oracle_id == "api.status" and "inproc-engine" in str(raised.value)


# --- AsyncLlmLoop.call (AsyncLLM, its engine core in another process) ---------------------------------------
def _call(coro):
    return asyncio.run(AsyncLlmLoop.__new__(AsyncLlmLoop).call("the call", coro))


async def _utility_failure(message: str):
    """A utility call the engine core answered with a failure, as vLLM's multiprocess client raises it."""
    future = asyncio.get_running_loop().create_future()
    _process_utility_output(UtilityOutput(1, failure_message=message), {1: future})
    return await future


async def _raises(error: BaseException):
    raise error


def test_an_async_call_that_the_test_got_wrong_propagates_as_itself():
    with pytest.raises(KeyError, match="results"):
        _call(_raises(KeyError("results")))


def test_an_async_call_to_a_dead_engine_is_errored():
    with pytest.raises(liveness.EngineDead) as raised:
        _call(_raises(EngineDeadError()))
    assert raised.value.liveness == "api.status"


def test_the_engine_cores_failure_through_the_client_is_the_error_answer():
    with pytest.raises(oracle.OracleFailure) as raised:
        _call(_utility_failure("Call to wake_up method failed: wake_up called while awake"))
    assert raised.value.oracle_id == "api.status" and "wake_up called while awake" in str(raised.value)
