"""The scheduler gate of vLLM #44483: after a partial wake nothing is scheduled until every tag is back.

#44395: EngineCore.wake_up resumed the scheduler after any wake, so a weights-only wake let the next
step run a forward pass on the released KV cache (an illegal memory access on a GPU). #44483 resumes
only once the executor has no sleeping tag. The fake worker raises on a forward pass while a pool is
released, so a regression fails here on the CPU; over HTTP alone it is invisible (/is_sleeping reads
true after a partial wake with or without the fix).
"""

import pytest

from tests.engine.lib import checks
from tests.engine.lib.engine_requests import add
from tests.engine.lib.steps import run_until_finished
from tests.core import oracle
from vllm.v1.engine import FinishReason

HELD_STEPS = 3  # the scheduler schedules a waiting request on its first step; three leave no doubt
BOTH = {"weights", "kv_cache"}


def _sleep_with_held_request(core):
    checks.answers("sleep(level=1)", core.engine.sleep, level=1)
    checks.resident(core.worker, BOTH, "after sleep(level=1)")
    add(core.engine, "held")


def _assert_held(core, after: str, held_oracle: str = "requests.held_until_resident"):
    oracle.holds(
        held_oracle,
        core.engine.is_scheduler_paused(),
        f"the scheduler after {after} while memory is still released (#44483); resident: {core.worker.resident}",
        "resumed",
        "paused",
    )
    oracle.equal("flags.is_sleeping", core.engine.is_sleeping(), True, f"is_sleeping() after {after} (#44483)")
    checks.unscheduled(held_oracle, core, "held", HELD_STEPS, f"after {after} (#44483)")


def _assert_served_after_full_residency(core, held_oracle: str = "requests.held_until_resident"):
    oracle.holds(
        "requests.completes",
        not core.engine.is_scheduler_paused(),
        "the scheduler with every tag resident",
        "paused",
        "resumed",
    )
    oracle.equal("flags.is_sleeping", core.engine.is_sleeping(), False, "is_sleeping() with every tag resident")
    done = run_until_finished(core.engine, ["held"], core.timeline)
    oracle.equal(
        "output.finish_length", done["held"].finish_reason, FinishReason.LENGTH, "the held request after the last wake"
    )
    events = core.timeline.events
    last_wake = core.timeline.index("wake_up", last=True)
    early = [e for e in events[:last_wake] if e.kind == "forward"]
    oracle.equal(held_oracle, early, [], f"forward passes before the last wake; timeline: {core.timeline}")


@pytest.mark.parametrize(
    "first,second", [("weights", "kv_cache"), ("kv_cache", "weights")], ids=["weights_first", "kv_cache_first"]
)
def test_partial_wake_keeps_scheduling_paused(core, first, second):
    _sleep_with_held_request(core)
    checks.answers(f"wake_up([{first!r}])", core.engine.wake_up, [first])
    checks.resident(core.worker, {second}, f"after a {first}-only wake")
    oracle.equal(
        "flags.is_sleeping",
        core.engine.model_executor.sleeping_tags,
        {second},
        f"the executor's sleeping tags after a {first}-only wake",
    )
    _assert_held(core, f"a {first}-only wake")
    checks.answers(f"wake_up([{second!r}])", core.engine.wake_up, [second])
    _assert_served_after_full_residency(core)


def test_scheduling_tag_does_not_resume_a_partial_wake(core):
    # "scheduling" is the level-0 wake; EngineCore.wake_up strips it before the executor sees tags.
    _sleep_with_held_request(core)
    checks.answers("wake_up(['scheduling'])", core.engine.wake_up, ["scheduling"])
    checks.worker_calls(core.timeline, "wake_up", [], "a scheduling-only wake (the tag must not reach it)")
    _assert_held(core, "a scheduling-only wake of a level-1 sleep", "requests.held_while_asleep")
    checks.answers("wake_up(['scheduling', 'weights'])", core.engine.wake_up, ["scheduling", "weights"])
    _assert_held(core, "a scheduling+weights wake")
    checks.answers("wake_up(['scheduling', 'kv_cache'])", core.engine.wake_up, ["scheduling", "kv_cache"])
    checks.worker_calls(core.timeline, "wake_up", [("weights",), ("kv_cache",)], "the two tagged wakes")
    _assert_served_after_full_residency(core)


@pytest.mark.parametrize("level", [1, 2])
def test_full_wake_resumes_scheduling(core, level):
    checks.answers(f"sleep(level={level})", core.engine.sleep, level=level)
    add(core.engine, "held")
    _assert_held(core, f"a level-{level} sleep", "requests.held_while_asleep")
    checks.answers("wake_up()", core.engine.wake_up)
    checks.resident(core.worker, set(), "after a full wake")
    checks.worker_calls(core.timeline, "sleep", [(level,)], f"a level-{level} sleep")
    # Level 2 discarded the weights: the engine serves again, but on weights that need
    # collective_rpc("reload_weights") (#29341); the GPU matrix checks the output.
    oracle.equal(
        "output.golden_tokens",
        core.worker.weights_intact,
        level == 1,
        f"the fake worker's weights intact after a level-{level} sleep and a full wake",
    )
    _assert_served_after_full_residency(core, "requests.held_while_asleep")
