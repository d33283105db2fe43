"""The async front door, `vllm.v1.engine.async_llm.AsyncLLM`, as NeMo-RL's and verl's rollout actors hold
it: AsyncLLM, its AsyncMPClient and an EngineCoreProc in a forked process, driven around the fake worker
(engines.build_async_llm; the worker answers through collective_rpc, fakes/child_worker.py).

The contracts those actors rely on between rollouts: await sleep(level) / wake_up(tags) / is_sleeping()
at levels 0, 1 and 2 with the staged wake and the reload between; reset_prefix_cache; pause_generation's
modes with a request in flight in a generate() async generator; the same tokens after a level-2 reload.
Each check compares with what vLLM documents. Where the door answers otherwise, the difference is pinned per
release (thresholds.KNOWN_DIVERGENCES, entries named async_door_*), as the llm door's are, never skipped: a
call awaiting the engine when its process dies never returns (async_door_pending_call_never_fails).
"""

import asyncio

import pytest
import vllm

from tests.engine.fakes.worker import TAGS
from tests.engine.lib import checks
from tests.core import liveness, oracle, thresholds
from vllm import SamplingParams

# Two full KV blocks (block_size 16): a repeat of it hits 32 cached tokens unless the cache was emptied.
PROMPT = {"prompt_token_ids": list(range(1, 41))}
TOKENS = 8


def _params() -> SamplingParams:
    return SamplingParams(max_tokens=TOKENS, ignore_eos=True)


async def _sleeping(door, expected: bool, where: str) -> None:
    got = await door.call("AsyncLLM.is_sleeping()", door.llm.is_sleeping())
    oracle.equal("flags.is_sleeping", got, expected, f"AsyncLLM.is_sleeping() {where}")


async def _paused(door, expected: bool, where: str) -> None:
    got = await door.call("AsyncLLM.is_paused()", door.llm.is_paused())
    oracle.equal("flags.is_paused", got, expected, f"AsyncLLM.is_paused() {where}")


async def _end(door, request, what: str) -> dict:
    """What the request's caller got once its generator ended. A wait for that end is a wall-clock wait:
    one that runs out (request_completion_s_max) is never an oracle's failure but liveness.EngineDead if
    the engine process died, else liveness.NoAnswer (errored, api.answers: a hang and a host too loaded
    look alike; only a catalogued hang may count it)."""
    bound = thresholds.get("request_completion_s_max")
    if not await request.ended_within(bound):
        if door.llm.errored:
            raise liveness.EngineDead(f"{what}: not ended within {bound:g} s, its engine dead", "server.healthy")
        raise liveness.NoAnswer(f"{what}: not ended within {bound:g} s on a live engine")
    return request.end()


async def _finished(door, request, oracle_id: str, what: str) -> dict:
    """The request's end (_end), which must be by length (oracle_id)."""
    end = await _end(door, request, what)
    oracle.equal(
        oracle_id,
        (end["error"], end["finish_reason"], len(end["token_ids"])),
        (None, "length", TOKENS),
        f"{what}: (error, finish reason, tokens)",
    )
    return end


async def _generate(door, what: str) -> dict:
    return await _finished(door, door.generate(PROMPT, _params()), "output.finish_length", what)


def _mine(event, request) -> bool:
    """Whether the event names the request (the engine's id is the caller's with a suffix: input_processor.py)."""
    return any(str(d).startswith(request.id + "-") for d in event.detail)


def _forwards(report, request) -> int:
    return sum(_mine(e, request) for e in report.timeline.of("forward"))


async def _held(door, request, oracle_id: str, where: str) -> None:
    """The request neither reaches its caller nor a forward pass over held_request_window_s."""
    window = thresholds.get("held_request_window_s")
    if await request.ended_within(window) or request.outputs:
        # Read before the engine: a forward on released memory kills it, and this is the verdict then.
        oracle.fail(oracle_id, f"{where}, within {window} s: what reached the caller", request.end(), "nothing")
    report = await door.report()
    oracle.equal(
        oracle_id,
        _forwards(report, request),
        0,
        f"{where}, over {window} s: its forward passes; timeline: {report.timeline}",
    )


async def _cached_before_sleep(door) -> dict:
    """A request and its repeat: the repeat must hit cached tokens, or a later zero proves nothing."""
    first = await _generate(door, "generate before any sleep")
    repeat = await _generate(door, "its repeat")
    if not repeat["cached"]:
        raise oracle.Precondition(f"the repeat of a {len(PROMPT['prompt_token_ids'])}-token prompt hit no cached token")
    return first


def test_async_level0_pauses_scheduling_and_holds_a_request_until_it_wakes(async_llm_door):
    door = async_llm_door

    async def scenario():
        await door.call("AsyncLLM.sleep(0)", door.llm.sleep(0))
        await _sleeping(door, True, "at level 0 (the scheduler paused)")
        report = await door.report()
        checks.worker_calls(report.timeline, "sleep", [], "AsyncLLM.sleep(0)")
        checks.resident(report, set(), "at level 0: nothing released")
        request = door.generate(PROMPT, _params())
        await _held(door, request, "requests.held_while_paused", "a request sent at level 0")
        await door.call("AsyncLLM.wake_up(['scheduling'])", door.llm.wake_up(["scheduling"]))
        await _sleeping(door, False, "after the level-0 wake")
        await _finished(door, request, "requests.completes", "the request held at level 0, after the wake")

    door.run(scenario())


@pytest.mark.parametrize("level", [1, 2])
def test_async_sleep_and_staged_wake_serve_the_tokens_of_before(async_llm_door, level):
    door = async_llm_door

    async def scenario():
        before = await _cached_before_sleep(door)
        await door.call(f"AsyncLLM.sleep({level})", door.llm.sleep(level))
        await _sleeping(door, True, f"after sleep({level})")
        report = await door.report()
        checks.worker_calls(report.timeline, "sleep", [(level,)], f"AsyncLLM.sleep({level})")
        checks.resident(report, set(TAGS), f"after sleep({level})", level)
        await door.call("AsyncLLM.wake_up(['weights'])", door.llm.wake_up(["weights"]))
        await _sleeping(door, True, f"after a wake of the weights alone (level {level}): the KV cache sleeps")
        checks.resident(await door.report(), {"kv_cache"}, "after the wake of the weights", level)
        request = door.generate(PROMPT, _params())
        await _held(door, request, "requests.held_until_resident", "a request sent after the weights woke (#44483)")
        if level == 2:  # the level-2 recipe: the weights' pool back, the trainer's weights into it, the KV cache
            await _reload(door)
        await door.call("AsyncLLM.wake_up(['kv_cache'])", door.llm.wake_up(["kv_cache"]))
        await _sleeping(door, False, f"after every tag woke (level {level})")
        checks.resident(await door.report(), set(), f"after the wakes from level {level}", level)
        after = await _finished(door, request, "requests.completes", "the request held by the partial wake")
        oracle.equal(
            "prefix_cache.reset_after_discard",
            after["cached"],
            0,
            f"prompt tokens the first request after sleep({level}) found cached",
        )
        oracle.equal(
            "output.golden_tokens",
            after["token_ids"],
            before["token_ids"],
            f"token ids after sleep({level}) and the staged wake vs before",
        )

    door.run(scenario())


async def _reload(door) -> None:
    """collective_rpc('reload_weights') as the walk sends it (no arguments: the checkpoint started on)."""
    reloads = len((await door.report()).timeline.of("reload_weights"))
    await door.call("AsyncLLM.collective_rpc('reload_weights')", door.llm.collective_rpc("reload_weights"))
    report = await door.report()
    oracle.equal(
        "weights.reload_reaches_worker",
        (len(report.timeline.of("reload_weights")) - reloads, report.weights_intact),
        (1, True),
        "(reload_weights calls that reached the worker, its weights intact after)",
    )


def test_async_reset_prefix_cache_empties_the_cache(async_llm_door):
    door = async_llm_door

    async def scenario():
        await _cached_before_sleep(door)
        reset = await door.call("AsyncLLM.reset_prefix_cache()", door.llm.reset_prefix_cache())
        oracle.equal("api.reset_prefix_cache_result", reset, True, "AsyncLLM.reset_prefix_cache() on an idle engine")
        after = await _generate(door, "the prompt again after reset_prefix_cache()")
        oracle.equal(
            "prefix_cache.hit_iff_cached", after["cached"], 0, "prompt tokens found cached after reset_prefix_cache()"
        )

    door.run(scenario())


async def _in_flight(door, die: bool = False):
    """A request that has reached its caller once and whose next forward pass waits for the test's call
    (and with die, then kills the engine: fakes/child_worker.py)."""
    await door.call(
        "collective_rpc('sleepwake_hold_in_flight')",
        door.llm.collective_rpc("sleepwake_hold_in_flight", kwargs={"die": die}),
    )
    request = door.generate(PROMPT, _params())
    started = asyncio.ensure_future(request.started.wait())
    bound = thresholds.get("request_completion_s_max")
    await asyncio.wait({started, request.task}, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    if not request.started.is_set() and not request.task.done():
        raise liveness.NoAnswer(f"the first output of a request on an awake engine: none in {bound} s")
    if not request.started.is_set():
        oracle.fail("api.answers", "the first output of a request on an awake engine", request.end(), "an output")
    return request


async def _landed_mid_decode(door, request) -> None:
    report = await door.report()
    if report.hold_timed_out or _forwards(report, request) >= TOKENS:
        raise oracle.Precondition(f"the call did not land mid-decode (the worker's hold let go); {report.timeline}")


def test_async_pause_abort_ends_the_request_in_flight_for_its_caller(async_llm_door):
    door = async_llm_door

    async def scenario():
        request = await _in_flight(door)
        await door.call("AsyncLLM.pause_generation(mode='abort')", door.llm.pause_generation(mode="abort"))
        await _landed_mid_decode(door, request)
        await _paused(door, True, "after pause_generation(mode='abort')")
        end = await _end(door, request, "the request in flight at pause_generation(mode='abort')")
        oracle.equal(
            "requests.abort_reaches_caller",
            {"finish_reason": end["finish_reason"], "error": end["error"]},
            {"finish_reason": "abort", "error": None},
            "the caller's generator of the request in flight, after pause_generation(mode='abort')",
        )
        # Paused: a new rollout request waits; clear_cache (the default) emptied the prefix cache that the
        # aborted request's prefill filled.
        waiting = door.generate(PROMPT, _params())
        await _held(door, waiting, "requests.held_while_paused", "a request sent after pause_generation(mode='abort')")
        await door.call("AsyncLLM.resume_generation()", door.llm.resume_generation())
        await _paused(door, False, "after resume_generation()")
        after = await _finished(door, waiting, "requests.completes", "the request held by the pause, resumed")
        oracle.equal(
            "prefix_cache.hit_iff_cached",
            after["cached"],
            0,
            "prompt tokens found cached after pause_generation(mode='abort') cleared the cache",
        )

    door.run(scenario())


def test_async_pause_wait_drains_the_request_in_flight(async_llm_door):
    door = async_llm_door

    async def scenario():
        request = await _in_flight(door)
        await door.call("AsyncLLM.pause_generation(mode='wait')", door.llm.pause_generation(mode="wait"))
        report = await door.report()  # its own answer leaves the engine after the snapshot
        events = report.timeline.events
        ends = [i for i, e in enumerate(events) if e.kind == "output" and _mine(e, request)]
        answered = max((i for i, e in enumerate(events) if e.kind == "answer"), default=-1)  # the pause's answer
        oracle.equal(
            "requests.ends_in_race",
            ([events[i].detail[1] for i in ends], bool(ends) and ends[0] < answered),
            (["LENGTH"], True),
            "the request in flight at pause_generation(mode='wait'): (its ends that left the engine, the end "
            f"before the call's answer); timeline: {report.timeline}",
        )
        await _finished(door, request, "output.finish_length", "the drained request, at its caller")
        await _paused(door, True, "after pause_generation(mode='wait')")
        await door.call("AsyncLLM.resume_generation()", door.llm.resume_generation())
        await _paused(door, False, "after resume_generation()")
        await _generate(door, "a request after resume_generation()")

    door.run(scenario())


# How a trainer freezes a rollout (mode keep) and lets it go: pause_generation / resume_generation, or
# the level-0 sleep and the scheduling tag's wake.
KEEP = {
    "pause": (lambda llm: llm.pause_generation(mode="keep"), lambda llm: llm.resume_generation()),
    "sleep0": (lambda llm: llm.sleep(0, mode="keep"), lambda llm: llm.wake_up(["scheduling"])),
}


@pytest.mark.parametrize("how", sorted(KEEP))
def test_async_keep_freezes_the_request_in_flight_and_it_resumes(async_llm_door, how):
    door = async_llm_door
    freeze, release = KEEP[how]

    async def scenario():
        request = await _in_flight(door)
        await door.call(f"{how} with mode keep", freeze(door.llm))
        await _landed_mid_decode(door, request)
        frozen = _forwards(await door.report(), request)
        window = thresholds.get("held_request_window_s")
        if await request.ended_within(window):
            oracle.fail(
                "requests.held_while_paused", f"the request kept by {how}, within {window} s", request.end(), "open"
            )
        report = await door.report()
        oracle.equal(
            "requests.held_while_paused",
            _forwards(report, request) - frozen,
            0,
            f"the request kept by {how}, over {window} s: its forward passes; timeline: {report.timeline}",
        )
        await _paused(door, True, f"after {how} with mode keep")
        await door.call(f"the release of {how}", release(door.llm))
        await _sleeping(door, False, f"after the release of {how}")
        await _paused(door, False, f"after the release of {how}")
        await _finished(door, request, "requests.resumes_after_keep", f"the request kept by {how}, released")

    door.run(scenario())


@pytest.mark.parametrize("clear_cache", [True, False])
def test_async_pause_keep_clear_cache_decides_whether_the_frozen_request_keeps_its_kv(async_llm_door, clear_cache):
    """pause_generation(mode="keep", clear_cache): once the engine is idle (at once under PAUSED_ALL),
    clear_cache resets the caches with reset_running_requests (v1/engine/core.py EngineCoreProc.pause_scheduler,
    _reset_caches), which preempts the frozen request: its KV blocks freed, it computes its prompt and
    tokens so far again after resume_generation(), on whatever weights serve then (OpenRLHF's partial
    rollout). Without it the request keeps its blocks, a plain reset_prefix_cache() is refused while it
    holds them (scheduler.py reset_prefix_cache), and it decodes on after the resume (SkyRL's fully async
    pause). The /pause route's docstring says clear_cache is ignored with mode keep; the code does not."""
    door = async_llm_door

    async def scenario():
        request = await _in_flight(door)
        await door.call(
            f"AsyncLLM.pause_generation(mode='keep', clear_cache={clear_cache})",
            door.llm.pause_generation(mode="keep", clear_cache=clear_cache),
        )
        await _landed_mid_decode(door, request)
        await _paused(door, True, f"after pause_generation(mode='keep', clear_cache={clear_cache})")
        reset = await door.call("AsyncLLM.reset_prefix_cache() while paused", door.llm.reset_prefix_cache())
        oracle.equal(
            "api.reset_prefix_cache_result",
            reset,
            clear_cache,
            f"reset_prefix_cache() during pause_generation(mode='keep', clear_cache={clear_cache}): the frozen "
            "request's blocks were freed by the pause's preemption (True), or it holds them (False)",
        )
        await door.call("AsyncLLM.resume_generation()", door.llm.resume_generation())
        await _paused(door, False, "after resume_generation()")
        end = await _end(door, request, "the request frozen by pause_generation(mode='keep'), resumed")
        report = await door.report()
        [counts] = [n for rid, n in report.scheduled.items() if rid.startswith(request.id + "-")]
        oracle.equal(
            "requests.resumes_after_keep",
            {"end": (end["error"], end["finish_reason"], len(end["token_ids"])), "computed again": max(counts[1:]) > 1},
            {"end": (None, "length", TOKENS), "computed again": clear_cache},
            f"the frozen request after resume_generation(): how it ended, and whether a forward pass after its "
            f"prefill computed more than one token (its prompt and tokens so far, KV dropped); tokens a pass: {counts}",
        )

    door.run(scenario())


@pytest.mark.parametrize("mode", ["abort", "wait", "keep"])
@pytest.mark.parametrize("clear_cache", [True, False])
def test_async_pause_clear_cache_decides_the_prefix_cache(async_llm_door, mode, clear_cache):
    """pause_generation(mode, clear_cache) on an idle engine: is_paused() until resume_generation(), and
    the prompt's cached blocks gone after it iff clear_cache (the caches reset once idle, in every mode)."""
    door = async_llm_door

    async def scenario():
        await _cached_before_sleep(door)
        call = f"AsyncLLM.pause_generation(mode={mode!r}, clear_cache={clear_cache})"
        await door.call(call, door.llm.pause_generation(mode=mode, clear_cache=clear_cache))
        await _paused(door, True, f"after {call}")
        await _sleeping(door, True, f"after {call} (is_sleeping reads the scheduler's pause)")
        await door.call("AsyncLLM.resume_generation()", door.llm.resume_generation())
        await _paused(door, False, "after resume_generation()")
        after = await _generate(door, f"the prompt again after {call} and resume_generation()")
        oracle.equal(
            "prefix_cache.hit_iff_cached",
            after["cached"] > 0,
            not clear_cache,
            f"whether the prompt's repeat after {call} found cached tokens ({after['cached']})",
        )

    door.run(scenario())


def test_async_resume_while_the_kv_cache_sleeps_as_pinned(async_llm_door):
    """resume_generation() after sleep(1) and a wake of the weights alone: EngineCore.resume_scheduler
    unpauses with no look at the executor's sleeping tags (v1/engine/core.py:852), so the next request is
    scheduled and its forward pass reads the released KV cache: the fake worker refuses it, as a GPU's
    illegal memory access kills the engine core (pinned: resume_while_kv_cache_asleep)."""
    door = async_llm_door
    pin = thresholds.divergence("resume_while_kv_cache_asleep", vllm.__version__, "async_llm")

    async def scenario():
        await door.call("AsyncLLM.sleep(1)", door.llm.sleep(1))
        await door.call("AsyncLLM.wake_up(['weights'])", door.llm.wake_up(["weights"]))
        await door.call("AsyncLLM.resume_generation() with the KV cache asleep", door.llm.resume_generation())
        is_paused = await door.call("AsyncLLM.is_paused()", door.llm.is_paused())
        request = door.generate(PROMPT, _params())
        window = thresholds.get("held_request_window_s")
        if not await request.ended_within(window):
            outcome = "held"
        else:
            end = request.end()
            outcome = "engine dead" if "EngineDeadError" in str(end["error"]) else "served"
        oracle.equal(
            "api.resume_while_asleep",
            {"is_paused": is_paused, "request": outcome},
            pin.expected,
            f"resume_generation() with the KV cache asleep, then a request: {pin.describe()}",
        )

    door.run(scenario())


def test_async_sleep_with_mode_wait_drains_then_sleeps(async_llm_door):
    door = async_llm_door

    async def scenario():
        request = await _in_flight(door)
        bound = thresholds.get("request_completion_s_max")
        try:
            await asyncio.wait_for(door.llm.sleep(1, mode="wait"), bound)
            raised = None
        except asyncio.TimeoutError:  # before Exception: it is one
            raise liveness.NoAnswer(f"AsyncLLM.sleep(1, mode='wait'): no answer in {bound} s") from None
        except Exception as e:  # noqa: BLE001  the engine's error answer is compared below; its death is
            # errored and the test's own error propagates (checks.answered)
            raised = checks.answered("AsyncLLM.sleep(1, mode='wait')", e)
        is_sleeping = await door.call("AsyncLLM.is_sleeping()", door.llm.is_sleeping())
        oracle.equal(
            "api.wait_mode",
            {"raised": raised, "is_sleeping": is_sleeping},
            {"raised": None, "is_sleeping": True},
            "AsyncLLM.sleep(1, mode='wait') with a request in flight",
        )
        await _finished(door, request, "requests.ends_in_race", "the request in flight at sleep(1, mode='wait')")
        await door.call("AsyncLLM.wake_up()", door.llm.wake_up())
        await _sleeping(door, False, "after the wake")

    door.run(scenario())


def test_async_call_in_flight_when_the_engine_dies_as_pinned(async_llm_door):
    door = async_llm_door
    pin = thresholds.divergence("async_door_pending_call_never_fails", vllm.__version__)

    async def scenario():
        request = await _in_flight(door, die=True)
        sleeping = door.spawn(door.llm.sleep(1))  # queued behind the forward pass that kills the engine
        bound = thresholds.get("request_completion_s_max")
        # The request's generator raises once the front end has read the engine's death: from then on a
        # pending call has had every chance to be failed too.
        if not await request.ended_within(bound):
            raise liveness.NoAnswer(f"the request in flight when the engine was killed: not ended within {bound:g} s")
        if "EngineDeadError" not in str(request.end()["error"]):
            raise oracle.Precondition(f"the engine did not die: {request.end()}")
        # Where the pin predicts no answer (the pending call's hang), held_request_window_s is an observation
        # window (an answer must come at once); where it predicts an answer, none within bound is a wait that
        # ran out (liveness.NoAnswer), never the oracle's failure.
        window = thresholds.get("held_request_window_s")
        done, _ = await asyncio.wait({sleeping}, timeout=bound if pin.expected["answered"] else window)
        if not done and pin.expected["answered"]:
            raise liveness.NoAnswer(f"the AsyncLLM.sleep(1) queued when the engine died: no answer in {bound:g} s")
        error = sleeping.exception() if done else None
        # The engine was killed on purpose: EngineDeadError is an answer here, as is an error answer; any
        # other exception is the test's own and propagates, never recorded as the door's (checks.answered).
        raised = checks.answered("the queued AsyncLLM.sleep(1)", error, dead_answers=True) if error else None
        unanswered_pinned = pin.expected["later_call"] == "no answer"
        try:
            await asyncio.wait_for(door.llm.is_sleeping(), window if unanswered_pinned else bound)
            later = None
        except asyncio.TimeoutError:  # before Exception: it is one
            if not unanswered_pinned:
                raise liveness.NoAnswer(f"AsyncLLM.is_sleeping() after the death: no answer in {bound:g} s") from None
            later = "no answer"
        except Exception as e:  # noqa: BLE001  the door's answer, compared below (checks.answered)
            later = checks.answered("AsyncLLM.is_sleeping() after the death", e, dead_answers=True)
        oracle.equal(
            "api.dead_engine_call",
            {"answered": bool(done), "raised": raised, "later_call": later},
            pin.expected,
            f"await sleep(1) queued when the engine died, over {window} s after its requests failed, and an "
            f"is_sleeping() after: {pin.describe()}",
        )

    door.run(scenario())
