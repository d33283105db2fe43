"""The offline front door, `vllm.LLM`, as colocated RL trainers hold it: the engine core in the caller's
process (VLLM_ENABLE_V1_MULTIPROCESSING=0, vLLM's InprocClient), driven through LLM.sleep, wake_up,
enqueue, wait_for_completion and collective_rpc around the fake worker (engines.build_llm).

This is other code than the HTTP server's: the in-process client has no busy loop and no output queue,
so what the server's EngineCoreProc does for a pause mode (drain, send the abort outputs) it cannot.
Where the door answers otherwise than the API documents, the difference is pinned per release
(thresholds.KNOWN_DIVERGENCES, the entries named llm_door_*), as the GPU tier pins the server's.
"""

import vllm

from tests.engine.fakes.worker import TAGS
from tests.engine.lib import checks
from tests.core import oracle, thresholds
from vllm import SamplingParams

PROMPT = {"prompt_token_ids": [1, 2, 3, 4]}
TOKENS = 4
# The steps that one wait_for_completion iteration makes, counted: a request the engine ended reaches
# the caller by the first of them; after this many the loop `while has_unfinished_requests(): step()`
# has nothing left to do but spin.
SPIN_STEPS = 20


def _params() -> SamplingParams:
    return SamplingParams(max_tokens=TOKENS, ignore_eos=True)


def _generate(llm, what: str):
    """LLM.generate of one greedy request; its output (ended by length, the oracle output.finish_length)."""
    [out] = checks.answers(what, llm.generate, [PROMPT], _params(), use_tqdm=False)
    oracle.equal(
        "output.finish_length",
        (out.finished, out.outputs[0].finish_reason, len(out.outputs[0].token_ids)),
        (True, "length", TOKENS),
        f"{what}: (finished, finish reason, tokens)",
    )
    return out


def _sleeping(llm, expected: bool, where: str) -> None:
    oracle.equal("flags.is_sleeping", llm.llm_engine.is_sleeping(), expected, f"LLM's is_sleeping() {where}")


def _enqueue(llm) -> tuple[str, str]:
    """LLM.enqueue of one request: (its id in the engine, the id its outputs carry)."""
    [engine_id] = llm.enqueue([PROMPT], _params(), use_tqdm=False)
    return engine_id, llm.llm_engine.output_processor.request_states[engine_id].external_req_id


def _ends(llm, request_id: str) -> dict:
    """What wait_for_completion's loop sees of an enqueued request: whether an output ending it comes
    within SPIN_STEPS steps, with its finish reason, and how many requests stay unfinished after."""
    engine = llm.llm_engine
    for _ in range(SPIN_STEPS):
        for out in engine.step():
            if out.request_id == request_id and out.finished:
                return {
                    "ended": True,
                    "finish_reason": out.outputs[0].finish_reason,
                    "unfinished": engine.get_num_unfinished_requests(),
                }
    return {"ended": False, "finish_reason": None, "unfinished": engine.get_num_unfinished_requests()}


def _wake_and_finish(llm, request_id: str, oracle_id: str, what: str) -> None:
    """The level-0 wake, then the request that waited ends by length (oracle_id)."""
    checks.answers("LLM.wake_up(['scheduling'])", llm.wake_up, ["scheduling"])
    _sleeping(llm, False, "after the level-0 wake")
    ended = _ends(llm, request_id)
    oracle.equal(
        oracle_id,
        (ended["ended"], ended["finish_reason"]),
        (True, "length"),
        f"{what} after the wake: (ended, finish reason)",
    )


def test_llm_sleeps_and_wakes_at_each_level_and_serves_after(llm_door):
    llm, built = llm_door
    _generate(llm, "LLM.generate before any sleep")
    for level in (1, 2):
        checks.answers(f"LLM.sleep(level={level})", llm.sleep, level=level)
        checks.worker_calls(built.timeline, "sleep", [(n,) for n in range(1, level + 1)], f"LLM.sleep(level={level})")
        _sleeping(llm, True, f"after LLM.sleep(level={level})")
        checks.resident(built.worker, set(TAGS), f"after LLM.sleep(level={level})", level)
        checks.answers("LLM.wake_up(['weights'])", llm.wake_up, ["weights"])
        _sleeping(llm, True, f"after a wake of the weights alone (level {level}): the KV cache sleeps")
        if level == 2:  # the level-2 recipe: the weights' pool back, then the trainer's weights into it
            reloads = len(built.timeline.of("reload_weights"))
            checks.answers("LLM.collective_rpc('reload_weights')", llm.collective_rpc, "reload_weights")
            oracle.equal(
                "weights.reload_reaches_worker",
                len(built.timeline.of("reload_weights")) - reloads,
                1,
                "reload_weights calls that reached the worker",
            )
        checks.answers("LLM.wake_up(['kv_cache'])", llm.wake_up, ["kv_cache"])
        _sleeping(llm, False, f"after every tag woke (level {level})")
        checks.resident(built.worker, set(), f"after the wakes from level {level}", level)
        _generate(llm, f"LLM.generate after the sleep at level {level}")


def test_llm_level0_holds_enqueued_requests_until_scheduling_wakes(llm_door):
    llm, built = llm_door
    checks.answers("LLM.sleep(level=0)", llm.sleep, level=0)
    _sleeping(llm, True, "at level 0 (the scheduler paused)")
    engine_id, request_id = _enqueue(llm)
    held = _ends(llm, request_id)
    oracle.equal(
        "requests.held_while_paused",
        (held["ended"], built.timeline.forwarded(engine_id)),
        (False, False),
        f"a request enqueued at level 0, over {SPIN_STEPS} steps: (ended, scheduled); timeline: {built.timeline}",
    )
    _wake_and_finish(llm, request_id, "requests.completes", "the held request")


def test_llm_keep_freezes_an_enqueued_request_and_it_resumes(llm_door):
    llm, _ = llm_door
    _, request_id = _enqueue(llm)
    checks.answers("LLM.sleep(level=0, mode='keep')", llm.sleep, level=0, mode="keep")
    frozen = _ends(llm, request_id)
    oracle.equal("requests.held_while_paused", frozen["ended"], False, "the request kept at level 0")
    _wake_and_finish(llm, request_id, "requests.resumes_after_keep", "the kept request")


def test_llm_sleep_with_mode_wait_is_pinned(llm_door):
    llm, _ = llm_door
    # The engine tier's vllm.LLM runs its engine core in-process, as the GPU's colocated door does.
    pin = thresholds.divergence("llm_door_wait_mode_refused", vllm.__version__, "llm_colocate")
    try:
        llm.sleep(level=1, mode="wait")
        raised = None
    except ValueError:
        raised = "ValueError"
    oracle.equal(
        "api.wait_mode",
        {"raised": raised, "is_sleeping": llm.llm_engine.is_sleeping()},
        pin.expected,
        f"LLM.sleep(level=1, mode='wait') with nothing in flight: {pin.describe()}",
    )


def test_llm_abort_sleep_ends_an_enqueued_request_for_its_caller_as_pinned(llm_door):
    llm, _ = llm_door
    # The engine tier's vllm.LLM runs its engine core in-process, as the GPU's colocated door does.
    pin = thresholds.divergence("llm_door_abort_end_lost", vllm.__version__, "llm_colocate")
    _, request_id = _enqueue(llm)
    checks.answers("LLM.sleep(level=1) (mode abort)", llm.sleep, level=1)
    checks.answers("LLM.wake_up()", llm.wake_up)
    oracle.equal(
        "requests.abort_reaches_caller",
        _ends(llm, request_id),
        pin.expected,
        f"the request enqueued before LLM.sleep(level=1), over {SPIN_STEPS} steps after the wake: {pin.describe()}",
    )
