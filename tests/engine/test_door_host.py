"""The door host (tools/launcher/door_host.py): vLLM's in-process front doors, `vllm.LLM` (TRL) and `AsyncLLM`
(NeMo-RL, verl), driven over HTTP by the GPU tier's SleepWakeClient, unchanged.

Each test starts the door host for one door on the engine tier's fake worker (lib/door_host_process.py) and makes
the calls an RL trainer makes between rollouts: sleep at levels 0, 1 and 2, the staged wake (weights, then
the KV cache; scheduling after level 0), is_sleeping and the sleep gauge, collective_rpc reload_weights,
reset_prefix_cache, a completion before and after. The door host answers each with what the door's method
returned, so these are the doors' own answers; what a door cannot do it answers 501 with the reason that
door_host.CANNOT declares, and the last tests hold it to that.
"""

import threading
import time
import types
from typing import Any

import pytest
import requests

from tests.engine.fakes.worker import TAGS
from tests.engine.lib import checks
from tests.engine.lib.door_host_process import DoorZygote, DoorHostProcess
from tests.core import liveness, metrics, oracle, thresholds
from tests.core.client import ServerResponseError
from tools.launcher import door_host

# Two full KV blocks (block_size 16): a repeat of it hits 32 cached tokens unless the cache was emptied.
PROMPT = list(range(1, 41))
TOKENS = 8
POLL_S = 0.05


@pytest.fixture(scope="session")
def zygote(tmp_path_factory):
    with DoorZygote(str(tmp_path_factory.mktemp("door_zygote"))) as started:
        yield started


@pytest.fixture(params=door_host.DOORS)
def hosted(request, model_dir, tmp_path, zygote):
    door = DoorHostProcess(request.param, model_dir, str(tmp_path / f"door_host_{request.param}"), zygote)
    try:
        yield door.start()
    finally:
        door.stop()


def _complete(client, what: str):
    done = client.complete(PROMPT, max_tokens=TOKENS)
    oracle.equal(
        "output.finish_length",
        (done.finish_reasons, [len(t) for t in done.token_ids]),
        (["length"], [TOKENS]),
        f"{what}: (finish reasons, tokens per choice)",
    )
    return done


def _cached_before_sleep(client):
    """A completion and its repeat: the repeat must hit cached tokens, or a later zero proves nothing."""
    first = _complete(client, "a completion before any sleep")
    if not _complete(client, "its repeat").cached_tokens:
        raise oracle.Precondition(f"the repeat of a {len(PROMPT)}-token prompt hit no cached token")
    return first


def _state(client, is_sleeping: bool, gauge: dict, where: str) -> None:
    state = client.state()
    oracle.equal("flags.is_sleeping", state.is_sleeping, is_sleeping, f"/is_sleeping {where}")
    oracle.equal("flags.gauge", state.gauge, gauge, f"vllm:engine_sleep_state {where}")


def _report(client) -> dict:
    """The fake worker's report, through the door's collective_rpc (the only way into the host's process)."""
    resp = client.raw("POST", "/collective_rpc", json={"method": "sleepwake_report"})
    oracle.equal("api.status", resp.status_code, 200, f"collective_rpc('sleepwake_report'): {resp.text[:300]}")
    [report] = resp.json()["results"]
    return report


def _resident(client, asleep: set, where: str, level: int) -> None:
    checks.resident(types.SimpleNamespace(resident=_report(client)["resident"]), asleep, where, level)


def _reloads(report: dict) -> int:
    return sum(1 for kind, *_ in report["events"] if kind == "reload_weights")


@pytest.mark.parametrize("level", [1, 2])
def test_door_sleeps_and_the_staged_wake_serves_the_tokens_of_before(hosted, level):
    client = hosted.client
    before = _cached_before_sleep(client)
    _state(client, False, metrics.GAUGE_AWAKE, "before any sleep")
    client.sleep(level)
    _state(client, True, metrics.GAUGE_BY_LEVEL[level], f"after /sleep?level={level}")
    oracle.equal(
        "executor.worker_calls",
        [detail for kind, *detail in _report(client)["events"] if kind == "sleep"],
        [[level]],
        f"the worker's sleep calls after /sleep?level={level}",
    )
    _resident(client, set(TAGS), f"after /sleep?level={level}", level)
    client.wake_up(["weights"])
    partial = thresholds.divergence("gauge_awake_while_partially_asleep", client.version())
    _state(
        client,
        True,
        partial.expected[level],
        f"after a wake of the weights alone (level {level}): {partial.describe()}",
    )
    _resident(client, {"kv_cache"}, "after the wake of the weights", level)
    if level == 2:  # the level-2 recipe: the weights' pool back, the trainer's weights into it, the KV cache
        reloads = _reloads(_report(client))
        client.reload_weights()
        report = _report(client)
        oracle.equal(
            "weights.reload_reaches_worker",
            (_reloads(report) - reloads, report["weights_intact"]),
            (1, True),
            "(reload_weights calls that reached the worker, its weights intact after)",
        )
    client.wake_up(["kv_cache"])
    _state(client, False, metrics.GAUGE_AWAKE, f"after every tag woke (level {level})")
    _resident(client, set(), f"after the staged wake from level {level}", level)
    after = _complete(client, f"a completion after the staged wake from level {level}")
    oracle.equal(
        "prefix_cache.reset_after_discard",
        after.cached_tokens,
        0,
        f"prompt tokens the first completion after /sleep?level={level} found cached",
    )
    oracle.equal(
        "output.golden_tokens",
        after.token_ids,
        before.token_ids,
        f"token ids after /sleep?level={level} and the staged wake vs before",
    )


def test_door_level0_pauses_scheduling_until_the_scheduling_wake(hosted):
    client = hosted.client
    client.sleep(0)
    _state(client, True, metrics.GAUGE_LEVEL0, "at level 0 (the scheduler paused)")
    oracle.equal(
        "executor.worker_calls",
        [kind for kind, *_ in _report(client)["events"] if kind == "sleep"],
        [],
        "the worker's sleep calls at level 0: nothing released",
    )
    held = None
    if "concurrent_calls" not in door_host.CANNOT[hosted.door]:
        held = _held_completion(client)
    client.wake_up(["scheduling"])
    _state(client, False, metrics.GAUGE_AWAKE, "after the scheduling wake")
    if held is not None:
        thread, got = held
        bound = thresholds.get("request_completion_s_max")
        _joined(thread, got, bound + POLL_S)  # past the client's own bound, whose NoAnswer _joined raises
        if thread.is_alive():  # a wait that ran out: never the oracle's failure
            what = f"the completion held at level 0: not ended within {bound:g} s of the scheduling wake"
            client.confirm_live(what)
            raise liveness.NoAnswer(what)
        oracle.equal(
            "requests.completes",
            (got.get("finish_reasons"), got.get("error")),
            (["length"], None),
            "the completion held at level 0, after the scheduling wake: (finish reasons, error)",
        )
        oracle.equal("requests.load_drains", client.load(), 0, "/load once the held completion ended")
    _complete(client, "a completion after the level-0 wake")


# What ends a completion as the live door host's answer, for the held oracles to judge: an error status the
# client read on a live server (its oracle api.status, after /health answered 200) or a malformed 2xx body. No
# answer, a refused connection, a dead engine (liveness.Errored, requests' own errors) and a bug in the test
# prove nothing about the hold: _joined raises them in the test's thread, as they are.
_ANSWERS = (oracle.OracleFailure, ServerResponseError)


def _held_completion(client):
    """A completion sent at level 0 from a thread of its own: it must not end while the scheduler is paused."""
    got: dict = {}

    def send() -> None:
        try:
            got["finish_reasons"] = client.complete(PROMPT, max_tokens=TOKENS).finish_reasons
        except _ANSWERS as e:  # the door host's answer: compared by the oracles
            got["error"] = repr(e)
        except Exception as e:  # noqa: BLE001  no answer of a live door host: _joined raises it
            got["raised"] = e

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    window = thresholds.get("held_request_window_s")
    _joined(thread, got, window)
    oracle.equal(
        "requests.held_while_paused",
        (thread.is_alive(), got),
        (True, {}),
        f"a completion sent at level 0, over {window} s: (still open, what it got)",
    )
    # As vLLM's server counts it: the front has taken the request and not answered it.
    oracle.equal("requests.accepted", client.load(), 1, "/load while the completion is held at level 0")
    return thread, got


def _joined(thread: threading.Thread, got: dict, timeout_s: float) -> None:
    """Waits up to timeout_s for the held completion's thread; raises, unchanged, what it raised that was
    no answer of the door host."""
    thread.join(timeout_s)
    if "raised" in got:
        raise got["raised"]


def test_door_returns_every_choice_of_a_parallel_sample(hosted):
    """n > 1: the answer holds all n choices, each to its length, as vLLM's server answers (a door call that
    kept only the engine's last output would hold the choices that finished last)."""
    done = hosted.client.complete(PROMPT, max_tokens=TOKENS, temperature=1.0, seed=7, n=4)
    oracle.equal(
        "output.finish_length",
        (sorted(done.finish_reasons), [len(t) for t in done.token_ids]),
        (["length"] * 4, [TOKENS] * 4),
        "a seeded n=4 sample: (finish reasons, tokens per choice)",
    )


def test_door_reset_prefix_cache_empties_the_cache(hosted):
    client = hosted.client
    _cached_before_sleep(client)
    oracle.equal(
        "api.reset_prefix_cache_result", client.reset_prefix_cache(), True, "/reset_prefix_cache on an idle engine"
    )
    after = _complete(client, "the prompt again after /reset_prefix_cache")
    oracle.equal("prefix_cache.hit_iff_cached", after.cached_tokens, 0, "prompt tokens found cached after the reset")


def test_door_answers_what_its_method_raised(hosted):
    """A worker method the fake lacks: the door's collective_rpc raises, and the host answers that, a 500 with
    the door's message, on a live engine (/health 200)."""
    client = hosted.client
    missing = "sleepwake_no_such_method"
    answer = _answer(client, "POST", "/collective_rpc", json={"method": missing})
    oracle.equal(
        "api.status",
        (answer[0], missing in str(answer[1]), client.health_status()),
        (500, True, 200),
        f"collective_rpc({missing!r}): (status, the door's message in it, /health after); answer: {answer}",
    )


# What a test sends to need each declared capability: (method, path, request keywords).
NEEDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "stream": ("POST", "/v1/completions", {"json": {"prompt": PROMPT, "max_tokens": TOKENS, "stream": True}}),
    "pause": ("POST", "/pause", {}),
    "in_process_load": ("POST", "/load_weights", {"json": {"checkpoint": "/nonexistent"}}),
    "enqueue": ("POST", "/enqueue", {"json": {"prompt": PROMPT, "max_tokens": TOKENS}}),
}
# Declared capabilities that one request alone cannot need: test_llm_door_refuses_a_second_call_in_flight.
UNREACHED = {"concurrent_calls"}


def test_door_answers_what_it_cannot_as_declared(hosted):
    declared = door_host.CANNOT[hosted.door]
    unrequested = set(declared) - set(NEEDS) - UNREACHED
    if unrequested:
        raise oracle.Precondition(
            f"capabilities declared with no request in NEEDS to check them: {sorted(unrequested)}"
        )
    answers = {}
    for capability in sorted(set(declared) & set(NEEDS)):
        method, path, kw = NEEDS[capability]
        resp = hosted.client.raw(method, path, **kw)
        answers[capability] = (resp.status_code, (resp.json().get("error") or {}).get("message", ""))
    oracle.equal(
        "api.status",
        answers,
        {c: (door_host.NOT_IMPLEMENTED, str(door_host.Cannot(hosted.door, c))) for c in answers},
        f"the {hosted.door} door's answers to requests that need what it declares it cannot do",
    )


def test_door_serves_what_it_does_not_declare(hosted):
    """The requests of NEEDS whose capability the door has: answered by the door, not refused."""
    client = hosted.client
    declared = door_host.CANNOT[hosted.door]
    if "stream" not in declared:
        stream = client.complete_stream(PROMPT, max_tokens=TOKENS)
        client.check_stream(stream, "a streamed completion")
        oracle.equal(
            "output.finish_length",
            (stream.error, stream.finish_reasons, [len(t) for t in stream.token_ids]),
            (None, ["length"], [TOKENS]),
            "a streamed completion: (error, finish reasons, tokens per choice)",
        )
    if "pause" not in declared:
        paused = [client.raw("POST", "/pause").status_code, _json(client, "/is_paused")]
        resumed = [client.raw("POST", "/resume").status_code, _json(client, "/is_paused")]
        oracle.equal(
            "api.status",
            (paused, resumed),
            ([200, {"is_paused": True}], [200, {"is_paused": False}]),
            "(/pause, /is_paused after it), (/resume, /is_paused after it)",
        )
        _complete(client, "a completion after /resume")
    if "enqueue" not in declared:
        _enqueued_waits_for_the_scheduling_wake(client)


def _enqueued_waits_for_the_scheduling_wake(client) -> None:
    """vllm.LLM.enqueue at level 0 answers at once, so the scheduling wake can follow it; then
    wait_for_completion answers the request ended by length (the walk's paused generates on the llm doors)."""
    client.sleep(0)
    ids = client.enqueue(PROMPT, max_tokens=TOKENS)
    woke = client.raw("POST", "/wake_up", params={"tags": "scheduling"}).status_code
    [done] = client.wait_for_completion()
    oracle.equal(
        "requests.completes",
        (len(ids), woke, done.finish_reasons, [len(t) for t in done.token_ids]),
        (1, 200, ["length"], [TOKENS]),
        "a request enqueued at level 0, the scheduling wake, wait_for_completion: "
        "(ids, the wake's status, finish reasons, tokens per choice)",
    )


def _json(client, path: str):
    try:
        return client.raw("GET", path).json()
    except requests.RequestException as e:
        return repr(e)


@pytest.mark.parametrize("hosted", ["llm"], indirect=True)
def test_llm_door_refuses_a_second_call_in_flight(hosted):
    """LLM.generate while the scheduler is paused at level 0 steps until its request ends, which it never
    does (vllm/entrypoints/offline_utils.py LLM._run_engine): the completion stays in flight, and every call
    after it, the wake that would free it too, must be refused as CANNOT declares, never queued behind it."""
    client = hosted.client
    client.sleep(0)
    ends: list = []
    answer = _held_by_a_completion(client, ends)
    woke = _answer(client, "POST", "/wake_up", params={"tags": "scheduling"})
    expected = (door_host.NOT_IMPLEMENTED, str(door_host.Cannot(hosted.door, "concurrent_calls")))
    oracle.equal(
        "api.status",
        {"/is_sleeping": answer, "/wake_up": woke},
        {"/is_sleeping": expected, "/wake_up": expected},
        f"calls while a completion sent at level 0 holds the llm door (the completions that ended: {ends})",
    )


def _held_by_a_completion(client, ends: list) -> tuple:
    """The answer of /is_sleeping once a completion holds the door: the first probe that does not read
    (200, asleep). A completion that lands while a probe is on the door's thread is itself refused and
    ends at once; it is sent again until one holds, within request_completion_s_max."""
    deadline = time.monotonic() + thresholds.get("request_completion_s_max")
    answer = (200, {"is_sleeping": True})
    while time.monotonic() < deadline:
        sent = threading.Thread(target=_complete_quietly, args=(client, ends), daemon=True)
        sent.start()
        while sent.is_alive() and time.monotonic() < deadline:
            answer = _answer(client, "GET", "/is_sleeping")
            if answer != (200, {"is_sleeping": True}):
                return answer
            time.sleep(POLL_S)
    return answer


def _complete_quietly(client, ends: list) -> None:
    """A completion whose end (refused, or ended by the door host's stop) goes to `ends`, for the message."""
    try:
        ends.append(client.complete(PROMPT, max_tokens=TOKENS).finish_reasons)
    except Exception as e:  # noqa: BLE001  read by the test's message only
        ends.append(repr(e)[:200])


def _answer(client, method: str, path: str, **kw) -> tuple:
    """(200, its JSON body or None) or (status, the error's message). A call queued behind the completion
    instead of refused gets no answer: past request_completion_s_max that is a wait that ran out, never an
    oracle's failure (liveness.NoAnswer on a live door host; confirm_live raises what a host that is not is)."""
    bound = thresholds.get("request_completion_s_max")
    try:
        resp = client.raw(method, path, timeout=bound, **kw)
    except requests.Timeout:
        what = f"{method} {path}: no answer within {bound:g} s"
        client.confirm_live(what)
        raise liveness.NoAnswer(what) from None
    try:
        body = resp.json() if resp.content.strip() else None
    except ValueError:
        return (resp.status_code, resp.text[:300])
    if resp.status_code == 200:
        return (200, body)
    return (resp.status_code, ((body or {}).get("error") or {}).get("message", ""))
