"""The scheduler gate of vLLM #44483: after a partial wake nothing is scheduled until every tag is back.

#44395: EngineCore.wake_up resumed the scheduler after any wake, so a weights-only wake let the next
step run a forward pass on the released KV cache (an illegal memory access on a GPU). #44483 resumes
only once the executor has no sleeping tag. The fake worker raises on a forward pass while a pool is
released, so a regression fails here on the CPU; over HTTP alone it is invisible (/is_sleeping reads
true after a partial wake with or without the fix).
"""

import pytest

from tests.engine.lib.requests import add
from tests.engine.lib.steps import run_until_finished, steps
from vllm.v1.engine import FinishReason

HELD_STEPS = 3  # the scheduler schedules a waiting request on its first step; three leave no doubt


def _sleep_with_held_request(core):
    core.engine.sleep(level=1)
    assert core.worker.resident == {"weights": False, "kv_cache": False}, core.timeline
    add(core.engine, "held")


def _assert_held(core, after: str):
    assert core.engine.is_scheduler_paused(), (
        f"scheduler resumed after {after} while memory is still released (#44483); "
        f"resident: {core.worker.resident}")
    assert core.engine.is_sleeping(), f"is_sleeping() false after {after} (#44483)"
    steps(core.engine, HELD_STEPS)
    assert not core.timeline.forwarded("held"), (
        f"a forward pass ran after {after} (#44483); timeline: {core.timeline}")


def _assert_served_after_full_residency(core):
    assert not core.engine.is_scheduler_paused(), "scheduler still paused with every tag resident"
    assert not core.engine.is_sleeping()
    done = run_until_finished(core.engine, ["held"], core.timeline)
    assert done["held"].finish_reason == FinishReason.LENGTH
    events = core.timeline.events
    last_wake = core.timeline.index("wake_up", last=True)
    assert all(e.kind != "forward" for e in events[:last_wake]), (
        f"a forward pass came before the last wake; timeline: {core.timeline}")


@pytest.mark.parametrize("first,second", [("weights", "kv_cache"), ("kv_cache", "weights")],
                         ids=["weights_first", "kv_cache_first"])
def test_partial_wake_keeps_scheduling_paused(core, first, second):
    _sleep_with_held_request(core)
    core.engine.wake_up([first])
    assert core.worker.resident == {first: True, second: False}
    assert core.engine.model_executor.sleeping_tags == {second}
    _assert_held(core, f"a {first}-only wake")
    core.engine.wake_up([second])
    _assert_served_after_full_residency(core)


def test_scheduling_tag_does_not_resume_a_partial_wake(core):
    # "scheduling" is the level-0 wake; EngineCore.wake_up strips it before the executor sees tags.
    _sleep_with_held_request(core)
    core.engine.wake_up(["scheduling"])
    assert core.timeline.of("wake_up") == [], "the scheduling tag reached the worker"
    _assert_held(core, "a scheduling-only wake of a level-1 sleep")
    core.engine.wake_up(["scheduling", "weights"])
    _assert_held(core, "a scheduling+weights wake")
    core.engine.wake_up(["scheduling", "kv_cache"])
    assert [e.detail for e in core.timeline.of("wake_up")] == [("weights",), ("kv_cache",)]
    _assert_served_after_full_residency(core)


@pytest.mark.parametrize("level", [1, 2])
def test_full_wake_resumes_scheduling(core, level):
    core.engine.sleep(level=level)
    add(core.engine, "held")
    _assert_held(core, f"a level-{level} sleep")
    core.engine.wake_up()
    assert core.worker.resident == {"weights": True, "kv_cache": True}
    assert [e.detail for e in core.timeline.of("sleep")] == [(level,)]
    # Level 2 discarded the weights: the engine serves again, but on weights that need
    # collective_rpc("reload_weights") (#29341); the GPU matrix checks the output.
    assert core.worker.weights_intact == (level == 1)
    _assert_served_after_full_residency(core)
