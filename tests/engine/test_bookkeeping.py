"""The executor's sleep bookkeeping (vllm/v1/executor/abstract.py) and EngineCore.is_sleeping.

Executor.sleep ignores a sleep while asleep; Executor.wake_up ignores a wake while awake and, when
any requested tag is not asleep, ignores the whole call (#31618 reported this; 0.26.0 still does
it). A worker failure inside sleep reaches the caller and leaves a documented inconsistent state.
"""

import pytest

from tests.engine.fakes.worker import ReleasedMemoryAccess
from tests.engine.lib import checks
from tests.engine.lib.engine_requests import add
from tests.engine.lib.steps import run_until_finished
from tests.core import oracle
from vllm.v1.engine import FinishReason

BOTH = {"weights", "kv_cache"}


def _serves(core, request_id="after"):
    add(core.engine, request_id)
    done = run_until_finished(core.engine, [request_id], core.timeline)
    oracle.equal(
        "output.finish_length",
        done[request_id].finish_reason,
        FinishReason.LENGTH,
        f"request {request_id!r} after the wake",
    )


def _executor(core, is_sleeping: bool, tags: set, where: str) -> None:
    executor = core.engine.model_executor
    oracle.equal(
        "flags.is_sleeping",
        (executor.is_sleeping, set(executor.sleeping_tags)),
        (is_sleeping, tags),
        f"{where}: the executor's (is_sleeping, sleeping_tags)",
    )


@pytest.mark.parametrize("second_level", [1, 2])
def test_second_sleep_is_a_no_op(core, second_level):
    # The guard keeps a second /sleep (an RL loop retrying, #48310's idempotency) off the workers:
    # there it would unmap released memory, and a level 2 would drop level 1's weight backup.
    checks.answers("sleep(level=1)", core.engine.sleep, level=1)
    checks.answers(f"a second sleep(level={second_level})", core.engine.sleep, level=second_level)
    checks.worker_calls(core.timeline, "sleep", [(1,)], f"sleep(level=1), then sleep(level={second_level})")
    _executor(core, True, BOTH, "after the second sleep")
    checks.answers("wake_up()", core.engine.wake_up)
    oracle.equal(
        "output.golden_tokens",
        core.worker.weights_intact,
        True,
        "the level-1 weight backup after a second sleep and a wake",
    )
    _serves(core)


def test_wake_while_awake_is_a_no_op(core):
    checks.answers("wake_up() while awake", core.engine.wake_up)
    checks.answers("wake_up(['weights']) while awake", core.engine.wake_up, ["weights"])
    checks.worker_calls(core.timeline, "wake_up", [], "wakes of an awake engine (#31618)")
    oracle.equal("flags.is_sleeping", core.engine.is_sleeping(), False, "is_sleeping() after wakes while awake")
    _serves(core)


def test_unknown_tag_is_ignored(core):
    checks.answers("sleep(level=1)", core.engine.sleep, level=1)
    checks.answers("wake_up(['bogus'])", core.engine.wake_up, ["bogus"])
    checks.worker_calls(core.timeline, "wake_up", [], "a wake of an unknown tag")
    _executor(core, True, BOTH, "after a wake of an unknown tag")
    oracle.equal("flags.is_sleeping", core.engine.is_sleeping(), True, "is_sleeping() after an ignored wake")
    oracle.holds(
        "requests.held_while_asleep",
        core.engine.is_scheduler_paused(),
        "the scheduler after an ignored wake, with the memory still released (#44483)",
        "resumed",
        "paused",
    )


def test_known_and_unknown_tags_together_wake_nothing(core):
    checks.answers("sleep(level=1)", core.engine.sleep, level=1)
    checks.answers("wake_up(['weights', 'bogus'])", core.engine.wake_up, ["weights", "bogus"])
    checks.worker_calls(
        core.timeline,
        "wake_up",
        [],
        "a wake of a known and an unknown tag (0.26.0 ignores the whole wake, #31618 item 1)",
    )
    checks.resident(core.worker, BOTH, "after a wake of a known and an unknown tag")
    _executor(core, True, BOTH, "after a wake of a known and an unknown tag")
    checks.answers("wake_up(['weights', 'kv_cache'])", core.engine.wake_up, ["weights", "kv_cache"])
    _serves(core)


def test_an_awake_tag_beside_a_sleeping_one_wakes_neither(core):
    # #31618's example: weights already awake, kv_cache asleep, wake_up([weights, kv_cache]).
    checks.answers("sleep(level=1)", core.engine.sleep, level=1)
    checks.answers("wake_up(['weights'])", core.engine.wake_up, ["weights"])
    checks.answers("wake_up(['weights', 'kv_cache'])", core.engine.wake_up, ["weights", "kv_cache"])
    checks.resident(core.worker, {"kv_cache"}, "after wake_up([weights, kv_cache]) with the weights awake")
    _executor(core, True, {"kv_cache"}, "after wake_up([weights, kv_cache]) with the weights awake")
    oracle.holds(
        "requests.held_until_resident",
        core.engine.is_scheduler_paused(),
        "the scheduler with the KV cache released (#44483)",
        "resumed",
        "paused",
    )
    checks.answers("wake_up(['kv_cache'])", core.engine.wake_up, ["kv_cache"])
    _serves(core)


def test_failing_worker_sleep_reaches_the_caller(core):
    # gpu_worker.Worker.sleep asserts, after releasing memory, that the device's free memory grew;
    # another process allocating meanwhile fails it (the shared-GPU case in docs/configuration.md).
    pinned = "engine.failed_sleep_state"
    core.worker.fail_next_sleep = "Memory usage increased after sleeping."
    checks.raises(
        pinned,
        "sleep(level=1) whose worker fails",
        AssertionError,
        "Memory usage increased after sleeping",
        core.engine.sleep,
        1,
    )
    # The state it leaves: the scheduler paused, the executor's flags untouched (the RPC raised
    # before Executor.sleep set them), the worker's memory released.
    executor = core.engine.model_executor
    oracle.equal(
        pinned,
        (
            core.engine.is_scheduler_paused(),
            core.engine.is_sleeping(),
            executor.is_sleeping,
            set(executor.sleeping_tags),
            dict(core.worker.resident),
        ),
        (True, True, False, set(), {"weights": False, "kv_cache": False}),
        "after the failed sleep: (scheduler paused, is_sleeping(), the executor's is_sleeping and "
        "sleeping_tags, the worker's pools resident)",
    )
    # A wake then believes the executor awake: it sends no RPC and resumes the scheduler onto the
    # released memory, so the next request's forward pass touches it.
    checks.answers("wake_up() after the failed sleep", core.engine.wake_up)
    oracle.equal(
        pinned,
        (len(core.timeline.of("wake_up")), core.engine.is_sleeping()),
        (0, False),
        "after the wake: (wake calls that reached the worker, is_sleeping())",
    )
    add(core.engine, "after")
    checks.raises(
        pinned,
        "the next request's forward pass",
        ReleasedMemoryAccess,
        "released",
        run_until_finished,
        core.engine,
        ["after"],
        core.timeline,
    )


def test_is_sleeping_reads_the_executor(core):
    # AsyncLLM.resume_generation (the engine's resume_scheduler) on a sleeping engine unpauses the
    # scheduler while the memory stays released: is_sleeping must still say so.
    checks.answers("sleep(level=1)", core.engine.sleep, level=1)
    checks.answers("resume_scheduler()", core.engine.resume_scheduler)
    if core.engine.is_scheduler_paused():
        raise oracle.Precondition(
            "resume_scheduler() left the scheduler paused: the case this test needs "
            "(memory released, scheduler running) was not set up"
        )
    oracle.equal(
        "flags.is_sleeping",
        core.engine.is_sleeping(),
        True,
        "is_sleeping() must stay true while the executor sleeps (#34528): the scheduler resumed, "
        f"sleeping tags {core.engine.model_executor.sleeping_tags}",
    )
    checks.answers("wake_up()", core.engine.wake_up)
    oracle.equal("flags.is_sleeping", core.engine.is_sleeping(), False, "is_sleeping() after the wake")
