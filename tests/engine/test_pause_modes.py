"""What sleep does with requests: level 0 (a pause only) and the pause modes abort, keep and wait.

Since #34528, sleep(level, mode) = pause_scheduler(mode) + executor.sleep(level) for level >= 1;
level 0 (#33195) is the pause alone. "wait" drains in-flight requests before the offload (the
answer to #45520, where /sleep during decoding unmapped memory a running request still used) and
exists only on EngineCoreProc; "abort" ends in-flight requests and must tell the front end (#45326).
"""

from concurrent.futures import Future

from tests.engine.lib import checks
from tests.engine.lib.loop import drive
from tests.engine.lib.engine_requests import add, send
from tests.engine.lib.steps import run_until_finished, step, steps
from tests.core import oracle
from vllm.v1.engine import FinishReason

HELD_STEPS = 3


def test_level0_pauses_without_touching_the_executor(core):
    checks.answers("sleep(level=0)", core.engine.sleep, level=0)
    executor = core.engine.model_executor
    oracle.equal("executor.worker_calls", core.timeline.events, [], f"level 0 reached the worker: {core.timeline}")
    oracle.equal(
        "flags.is_sleeping",
        (executor.is_sleeping, set(executor.sleeping_tags)),
        (False, set()),
        "the executor's (is_sleeping, sleeping_tags) at level 0",
    )
    oracle.equal(
        "flags.is_sleeping",
        core.engine.is_sleeping(),
        True,
        "is_sleeping() at level 0: the scheduler is paused (#33195)",
    )
    add(core.engine, "held")
    checks.unscheduled("requests.held_while_paused", core, "held", HELD_STEPS, "a request sent at level 0")
    checks.answers("wake_up(['scheduling'])", core.engine.wake_up, ["scheduling"])
    checks.worker_calls(core.timeline, "wake_up", [], "the level-0 wake")
    oracle.equal("flags.is_sleeping", core.engine.is_sleeping(), False, "is_sleeping() after the level-0 wake")
    done = run_until_finished(core.engine, ["held"], core.timeline)
    oracle.equal(
        "output.finish_length",
        done["held"].finish_reason,
        FinishReason.LENGTH,
        "the request held by level 0, after the wake",
    )


def test_level0_keep_freezes_a_running_request(core):
    add(core.engine, "running", max_tokens=4)
    step(core.engine)  # prefill: the request is running now
    if not core.timeline.forwarded("running"):
        raise oracle.Precondition(f"the request did not start on the first step: {core.timeline}")
    forwards_before = len(core.timeline.of("forward"))
    checks.answers("sleep(level=0, mode='keep')", core.engine.sleep, level=0, mode="keep")
    finished = steps(core.engine, HELD_STEPS)
    oracle.equal(
        "requests.held_while_paused",
        ("running" in finished, len(core.timeline.of("forward"))),
        (False, forwards_before),
        f"mode=keep (PAUSED_ALL) freezes the running request: (ended, forward passes); timeline: {core.timeline}",
    )
    checks.answers("wake_up(['scheduling'])", core.engine.wake_up, ["scheduling"])
    done = run_until_finished(core.engine, ["running"], core.timeline)
    resumed = done["running"]
    oracle.equal(
        "requests.resumes_after_keep",
        (resumed.finish_reason, len(resumed.new_token_ids) >= 1),
        (FinishReason.LENGTH, True),
        "the frozen request after the wake: (finish reason, tokens in its last output)",
    )


def test_abort_mode_sends_abort_outputs_before_offload(proc):
    engine, timeline = proc.engine, proc.timeline
    send(engine, "inflight", max_tokens=50)
    drive(engine, lambda: timeline.forwarded("inflight"), "the request's first forward", timeline)
    result = checks.answers("sleep(level=1, mode='abort')", engine.sleep, level=1, mode="abort")
    if isinstance(result, Future):  # the aborted ids still go out with one more (empty) step
        drive(engine, result.done, "the abort-mode sleep", timeline, oracle_id="api.answers")
        checks.answers("the abort-mode sleep's result", result.result)
    aborts = [i for i, e in enumerate(timeline.events) if e.kind == "output" and e.detail == ("inflight", "ABORT")]
    oracle.holds(
        "requests.abort_aborts",
        bool(aborts),
        f"the abort output of the in-flight request: without it "
        f"its client would wait forever (#45326); timeline: {timeline}",
        "none",
        "sent",
    )
    oracle.holds(
        "requests.clean_end",
        aborts[0] < timeline.index("sleep"),
        f"the abort output before the offload (#45326); timeline: {timeline}",
        "after",
        "before",
    )
    oracle.equal("flags.is_sleeping", engine.is_sleeping(), True, "is_sleeping() after the abort-mode sleep")
    checks.resident(proc.worker, {"weights", "kv_cache"}, "after the abort-mode sleep")


def test_abort_mode_ends_the_waiting_requests_too(proc):
    """A request sent while paused waits in the scheduler's queue; a later abort sleep ends it with the
    running ones (pause_scheduler finishes every request, core.py), else it would run after the wake, on
    whatever weights then serve (#51476)."""
    engine, timeline = proc.engine, proc.timeline
    checks.answers("sleep(level=0, mode='abort')", engine.sleep, level=0, mode="abort")
    send(engine, "queued")
    drive(engine, lambda: "queued" in engine.scheduler.requests, "the request queued while paused", timeline)
    oracle.holds(
        "requests.held_while_paused",
        not timeline.forwarded("queued"),
        f"the request sent while paused; timeline: {timeline}",
        "scheduled",
        "queued",
    )
    result = checks.answers("sleep(level=1, mode='abort')", engine.sleep, level=1, mode="abort")
    if isinstance(result, Future):
        drive(engine, result.done, "the abort-mode sleep", timeline, oracle_id="api.answers")
        checks.answers("the abort-mode sleep's result", result.result)
    oracle.holds(
        "requests.abort_aborts",
        ("queued", "ABORT") in [e.detail for e in timeline.of("output")],
        f"the abort output of the request that waited: without it its client waits for the wake and "
        f"then gets a completion; timeline: {timeline}",
        "none",
        "sent",
    )


def test_wait_mode_drains_before_offload(proc):
    engine, timeline = proc.engine, proc.timeline
    send(engine, "inflight", max_tokens=4)
    drive(engine, lambda: timeline.forwarded("inflight"), "the request's first forward", timeline)
    pending = checks.answers("sleep(level=1, mode='wait')", engine.sleep, level=1, mode="wait")
    oracle.holds(
        "requests.ends_in_race",
        isinstance(pending, Future) and not pending.done() and timeline.index("sleep") < 0,
        f"sleep(mode='wait') while a request decodes waits for the drain before the offload (#45520); "
        f"timeline: {timeline}",
        repr(pending),
        "a pending Future, no sleep call yet",
    )
    send(engine, "arrived_during_drain")
    drive(engine, pending.done, "the drain", timeline, oracle_id="requests.ends_in_race")
    oracle.equal(
        "api.status",
        checks.answers("the wait-mode sleep's result", pending.result),
        None,
        "the wait-mode sleep's result",
    )
    sleep_at = timeline.index("sleep")
    oracle.holds(
        "requests.ends_in_race",
        timeline.index("forward", last=True) < sleep_at,
        f"the last forward pass before the sleep call (#45520); timeline: {timeline}",
        "after",
        "before",
    )
    oracle.holds(
        "output.finish_length",
        ("inflight", "LENGTH") in [e.detail for e in timeline.events[:sleep_at] if e.kind == "output"],
        f"the drained request ends by length before the sleep call; timeline: {timeline}",
        "not",
        "by length",
    )
    oracle.holds(
        "requests.held_while_asleep",
        not timeline.forwarded("arrived_during_drain"),
        f"a request that arrived during the drain (mode=wait queues it); timeline: {timeline}",
        "scheduled",
        "queued",
    )
    oracle.equal("flags.is_sleeping", engine.is_sleeping(), True, "is_sleeping() after the wait-mode sleep")
    checks.answers("wake_up()", engine.wake_up)
    drive(
        engine,
        lambda: ("arrived_during_drain", "LENGTH") in [e.detail for e in timeline.of("output")],
        "the queued request after the wake",
        timeline,
        oracle_id="requests.completes",
    )
    oracle.holds(
        "requests.held_while_asleep",
        timeline.index("wake_up") < timeline.index("forward", last=True),
        f"the queued request's forward after the wake; timeline: {timeline}",
        "before",
        "after",
    )
