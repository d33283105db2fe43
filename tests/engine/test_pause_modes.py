"""What sleep does with requests: level 0 (a pause only) and the pause modes abort, keep and wait.

Since #34528, sleep(level, mode) = pause_scheduler(mode) + executor.sleep(level) for level >= 1;
level 0 (#33195) is the pause alone. "wait" drains in-flight requests before the offload (the
answer to #45520, where /sleep during decoding unmapped memory a running request still used) and
exists only on EngineCoreProc; "abort" ends in-flight requests and must tell the front end (#45326).
"""

from concurrent.futures import Future

from tests.engine.lib.loop import drive
from tests.engine.lib.requests import add, send
from tests.engine.lib.steps import run_until_finished, step, steps
from vllm.v1.engine import FinishReason

HELD_STEPS = 3


def test_level0_pauses_without_touching_the_executor(core):
    core.engine.sleep(level=0)
    executor = core.engine.model_executor
    assert core.timeline.events == [], f"level 0 reached the worker: {core.timeline}"
    assert not executor.is_sleeping and executor.sleeping_tags == set()
    assert core.engine.is_sleeping(), "level 0 must read as sleeping: the scheduler is paused (#33195)"
    add(core.engine, "held")
    steps(core.engine, HELD_STEPS)
    assert not core.timeline.forwarded("held"), f"a paused engine ran a request: {core.timeline}"
    core.engine.wake_up(["scheduling"])
    assert core.timeline.of("wake_up") == [], "the level-0 wake reached the worker"
    assert not core.engine.is_sleeping()
    done = run_until_finished(core.engine, ["held"], core.timeline)
    assert done["held"].finish_reason == FinishReason.LENGTH


def test_level0_keep_freezes_a_running_request(core):
    add(core.engine, "running", max_tokens=4)
    step(core.engine)  # prefill: the request is running now
    assert core.timeline.forwarded("running")
    forwards_before = len(core.timeline.of("forward"))
    core.engine.sleep(level=0, mode="keep")
    finished = steps(core.engine, HELD_STEPS)
    assert "running" not in finished, "mode=keep ended the request instead of freezing it"
    assert len(core.timeline.of("forward")) == forwards_before, (
        f"mode=keep (PAUSED_ALL) still scheduled the running request: {core.timeline}")
    core.engine.wake_up(["scheduling"])
    done = run_until_finished(core.engine, ["running"], core.timeline)
    assert done["running"].finish_reason == FinishReason.LENGTH
    assert len(done["running"].new_token_ids) >= 1


def test_abort_mode_sends_abort_outputs_before_offload(proc):
    engine, timeline = proc.engine, proc.timeline
    send(engine, "inflight", max_tokens=50)
    drive(engine, lambda: timeline.forwarded("inflight"), "the request's first forward", timeline)
    result = engine.sleep(level=1, mode="abort")
    if isinstance(result, Future):  # the aborted ids still go out with one more (empty) step
        drive(engine, result.done, "the abort-mode sleep", timeline)
        result.result()
    aborts = [i for i, e in enumerate(timeline.events)
              if e.kind == "output" and e.detail == ("inflight", "ABORT")]
    assert aborts, (f"no abort output for the in-flight request before or after the offload: its "
                    f"client would wait forever (#45326); timeline: {timeline}")
    assert aborts[0] < timeline.index("sleep"), (
        f"the abort output left after the offload (#45326); timeline: {timeline}")
    assert engine.is_sleeping() and proc.worker.resident["kv_cache"] is False


def test_wait_mode_drains_before_offload(proc):
    engine, timeline = proc.engine, proc.timeline
    send(engine, "inflight", max_tokens=4)
    drive(engine, lambda: timeline.forwarded("inflight"), "the request's first forward", timeline)
    pending = engine.sleep(level=1, mode="wait")
    assert isinstance(pending, Future) and not pending.done() and timeline.index("sleep") < 0, (
        f"sleep(mode='wait') returned {pending!r} while a request was decoding: the offload came "
        f"before the drain (#45520); timeline: {timeline}")
    send(engine, "arrived_during_drain")
    drive(engine, pending.done, "the drain", timeline)
    assert pending.result() is None
    sleep_at = timeline.index("sleep")
    assert timeline.index("forward", last=True) < sleep_at, (
        f"a forward pass came after the sleep RPC (#45520); timeline: {timeline}")
    assert ("inflight", "LENGTH") in [e.detail for e in timeline.events[:sleep_at]
                                      if e.kind == "output"], f"drain did not finish it: {timeline}"
    assert not timeline.forwarded("arrived_during_drain"), (
        f"a request that arrived during the drain was scheduled (mode=wait queues it): {timeline}")
    assert engine.is_sleeping()
    engine.wake_up()
    drive(engine, lambda: ("arrived_during_drain", "LENGTH") in [e.detail for e in timeline.of("output")],
          "the queued request after the wake", timeline)
    assert timeline.index("wake_up") < timeline.index("forward", last=True)
