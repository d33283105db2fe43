"""The executor's sleep bookkeeping (vllm/v1/executor/abstract.py) and EngineCore.is_sleeping.

Executor.sleep ignores a sleep while asleep; Executor.wake_up ignores a wake while awake and, when
any requested tag is not asleep, ignores the whole call (#31618 reported this; 0.26.0 still does
it). A worker failure inside sleep reaches the caller and leaves a documented inconsistent state.
"""

import pytest

from tests.engine.fakes.worker import ReleasedMemoryAccess
from tests.engine.lib.requests import add
from tests.engine.lib.steps import run_until_finished
from vllm.v1.engine import FinishReason

BOTH = {"weights", "kv_cache"}


def _serves(core, request_id="after"):
    add(core.engine, request_id)
    done = run_until_finished(core.engine, [request_id], core.timeline)
    assert done[request_id].finish_reason == FinishReason.LENGTH


@pytest.mark.parametrize("second_level", [1, 2])
def test_second_sleep_is_a_no_op(core, second_level):
    # The guard keeps a second /sleep (an RL loop retrying, #48310's idempotency) off the workers:
    # there it would unmap released memory, and a level 2 would drop level 1's weight backup.
    core.engine.sleep(level=1)
    core.engine.sleep(level=second_level)
    assert [e.detail for e in core.timeline.of("sleep")] == [(1,)], core.timeline
    executor = core.engine.model_executor
    assert executor.is_sleeping and executor.sleeping_tags == BOTH
    core.engine.wake_up()
    assert core.worker.weights_intact, "the second sleep discarded the level-1 weight backup"
    _serves(core)


def test_wake_while_awake_is_a_no_op(core):
    core.engine.wake_up()
    core.engine.wake_up(["weights"])
    assert core.timeline.of("wake_up") == [], "a wake of an awake engine reached the worker (#31618)"
    assert not core.engine.is_sleeping()
    _serves(core)


def test_unknown_tag_is_ignored(core):
    core.engine.sleep(level=1)
    core.engine.wake_up(["bogus"])
    assert core.timeline.of("wake_up") == []
    assert core.engine.model_executor.sleeping_tags == BOTH
    assert core.engine.is_sleeping() and core.engine.is_scheduler_paused(), (
        "an ignored wake resumed scheduling with the memory still released (#44483)")


def test_known_and_unknown_tags_together_wake_nothing(core):
    core.engine.sleep(level=1)
    core.engine.wake_up(["weights", "bogus"])
    assert core.timeline.of("wake_up") == [], "0.26.0 ignores the whole wake (#31618 item 1)"
    assert core.worker.resident == {"weights": False, "kv_cache": False}
    assert core.engine.model_executor.sleeping_tags == BOTH
    core.engine.wake_up(["weights", "kv_cache"])
    _serves(core)


def test_an_awake_tag_beside_a_sleeping_one_wakes_neither(core):
    # #31618's example: weights already awake, kv_cache asleep, wake_up([weights, kv_cache]).
    core.engine.sleep(level=1)
    core.engine.wake_up(["weights"])
    core.engine.wake_up(["weights", "kv_cache"])
    assert core.worker.resident == {"weights": True, "kv_cache": False}, core.timeline
    assert core.engine.model_executor.sleeping_tags == {"kv_cache"}
    assert core.engine.is_scheduler_paused(), "scheduling resumed with the KV cache released (#44483)"
    core.engine.wake_up(["kv_cache"])
    _serves(core)


def test_failing_worker_sleep_reaches_the_caller(core):
    # gpu_worker.Worker.sleep asserts, after releasing memory, that the device's free memory grew;
    # another process allocating meanwhile fails it (the shared-GPU case in README.md).
    core.worker.fail_next_sleep = "Memory usage increased after sleeping."
    with pytest.raises(AssertionError, match="Memory usage increased after sleeping"):
        core.engine.sleep(level=1)
    # The state it leaves: the scheduler paused, the executor's flags untouched (the RPC raised
    # before Executor.sleep set them), the worker's memory released.
    executor = core.engine.model_executor
    assert core.engine.is_scheduler_paused() and core.engine.is_sleeping()
    assert not executor.is_sleeping and executor.sleeping_tags == set()
    assert core.worker.resident == {"weights": False, "kv_cache": False}
    # A wake then believes the executor awake: it sends no RPC and resumes the scheduler onto the
    # released memory, so the next request's forward pass touches it.
    core.engine.wake_up()
    assert core.timeline.of("wake_up") == [] and not core.engine.is_sleeping()
    add(core.engine, "after")
    with pytest.raises(ReleasedMemoryAccess):
        run_until_finished(core.engine, ["after"], core.timeline)


def test_is_sleeping_reads_the_executor(core):
    # AsyncLLM.resume_generation (the engine's resume_scheduler) on a sleeping engine unpauses the
    # scheduler while the memory stays released: is_sleeping must still say so.
    core.engine.sleep(level=1)
    core.engine.resume_scheduler()
    assert not core.engine.is_scheduler_paused()
    assert core.engine.is_sleeping(), (
        "is_sleeping() must stay true while the executor sleeps (#34528): it read false with the "
        f"scheduler resumed and sleeping tags {core.engine.model_executor.sleeping_tags}")
    core.engine.wake_up()
    assert not core.engine.is_sleeping()
