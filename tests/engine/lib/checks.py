"""The engine tests' checks, each an oracle of tests/core/oracle.py with the id the GPU tier
fails for the same defect (as lib/engine_walk.py does): a pool's residency is the device_bytes oracle of
that state's band, an engine call that raises what vLLM answers a failed call with is a live engine's
error answer (api.status), a request scheduled while it must wait is the held oracle of the state.
"""

from __future__ import annotations

from tests.engine.fakes.worker import TAGS, ReleasedMemoryAccess
from tests.engine.lib.steps import steps
from tests.core import liveness, oracle
from vllm.v1.engine.exceptions import EngineDeadError

# What vLLM reports a failed call with: the multiprocess client re-raises the engine core's failure as a
# bare Exception ("Call to <method> failed: ...", core_client._process_utility_output); in process the
# engine's own RuntimeError (a worker's CUDA error, NotImplementedError), ValueError (a refused argument or
# mode) or AssertionError (gpu_worker's memory check) reaches the caller. A TypeError, AttributeError,
# KeyError... is a call the test got wrong, never the engine's answer, so it propagates: an error, not a kill.
ERROR_ANSWERS = (RuntimeError, ValueError, AssertionError)


def residency_oracle(asleep: set, tag: str, level: int = 1) -> str:
    """The device_bytes oracle whose band a wrong residency of `tag` breaks on a GPU, with `asleep` the
    tags that should be asleep (after a sleep of `level`)."""
    if not asleep:
        return "device_bytes.wake_shortfall"  # a pool not mapped back by the wake
    if asleep == set(TAGS):
        return "device_bytes.level1_asleep" if level == 1 else "device_bytes.level2_asleep"
    if asleep == {"kv_cache"}:
        return "device_bytes.weights_wake_mapped" if tag == "weights" else "device_bytes.weights_wake_kv_unmapped"
    return "device_bytes.kv_wake_mapped" if tag == "kv_cache" else "device_bytes.kv_wake_weights_unmapped"


def resident(worker, asleep: set, where: str, level: int = 1) -> None:
    """The fake worker's pools: every tag of `asleep` released, every other one mapped."""
    with oracle.together():
        for tag in TAGS:
            oracle.equal(
                residency_oracle(asleep, tag, level),
                worker.resident[tag],
                tag not in asleep,
                f"{where}: the fake worker's {tag} pool resident (a GPU's mapped bytes)",
            )


def is_error_answer(e: BaseException) -> bool:
    """Whether `e` is what vLLM answers a failed call on a live engine with (ERROR_ANSWERS, or the
    multiprocess client's bare Exception): never EngineDeadError, an oracle's own failure, a liveness
    error or the test's own error (a TypeError, AttributeError, KeyError...)."""
    return type(e) is Exception or (isinstance(e, ERROR_ANSWERS) and not isinstance(e, oracle.OracleFailure))


def _dead(what: str, e: BaseException) -> liveness.EngineDead:
    return liveness.EngineDead(
        f"{what} raised {e!r}: the engine died, which proves nothing about the call; its cause is in the "
        "engine's log above",
        "api.status",
    )


def error_answer(what: str, e: Exception) -> None:
    """Raises what the exception `e` of the engine call `what` stands for: the oracle api.status for a live
    engine's error answer (a GPU's 5xx), liveness.EngineDead for a dead engine (errored; charged to
    api.status as the GPU tier's client charges a dead engine's 5xx); returns for anything else, which the
    caller re-raises unchanged."""
    if isinstance(e, EngineDeadError):
        raise _dead(what, e) from e
    if is_error_answer(e):
        oracle.fail("api.status", what, f"raised {e!r}", "no error", "")


def answered(what: str, e: BaseException, dead_answers: bool = False) -> str:
    """The name of the exception `e` that the engine call `what` raised, for an oracle that compares the
    door's answer with a pinned one, where `e` is that answer: a live engine's error answer; with
    dead_answers (a call on an engine the test killed on purpose) EngineDeadError too. Otherwise a dead
    engine is liveness.EngineDead (errored), and anything else (the test's own error, an oracle's or a
    liveness failure) is raised as it is: never recorded as the door's answer."""
    if isinstance(e, EngineDeadError):
        if dead_answers:
            return type(e).__name__
        raise _dead(what, e) from e
    if is_error_answer(e):
        return type(e).__name__
    raise e


def answers(what: str, call, *args, **kwargs):
    """call(*args, **kwargs)'s result; an exception is judged by error_answer (an error answer, a dead
    engine, or the test's own error, re-raised as it is)."""
    try:
        return call(*args, **kwargs)
    except Exception as e:
        error_answer(what, e)
        raise


def raises(oracle_id: str, what: str, expected: type[BaseException], match: str, call, *args) -> None:
    """A call that must raise `expected` with `match` in its text (a failure vLLM lets reach the caller)."""
    try:
        call(*args)
    except expected as e:
        oracle.holds(oracle_id, match in str(e), what, repr(e), f"{expected.__name__}: {match}")
        return
    oracle.fail(oracle_id, what, "returned", f"raises {expected.__name__}: {match}", "")


def unscheduled(oracle_id: str, core, request_id: str, count: int, where: str) -> None:
    """`count` steps leave `request_id` without a forward pass: the fake worker records a pass before it
    raises on released memory, so one scheduled on it fails the oracle with the worker's error."""
    try:
        steps(core.engine, count)
    except ReleasedMemoryAccess as e:
        oracle.fail(
            oracle_id,
            f"{where}: a forward pass on released memory; timeline: {core.timeline}",
            repr(e),
            "no forward pass",
            "",
        )
    oracle.holds(
        oracle_id,
        not core.timeline.forwarded(request_id),
        f"{where}: forward passes of {request_id!r}; timeline: {core.timeline}",
        "forwarded",
        "none",
    )


def worker_calls(timeline, kind: str, expected: list, where: str) -> None:
    """The details of the worker calls of `kind` (sleep: (level,); wake_up: tags) are `expected`."""
    oracle.equal(
        "executor.worker_calls",
        [e.detail for e in timeline.of(kind)],
        expected,
        f"{where}: the {kind} calls that reached the worker; timeline: {timeline}",
    )
