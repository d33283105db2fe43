"""FakeEngine's state machine and memory model, directly (the fake tier runs the classes through it)."""

import threading
import time

import pytest

from tests.core import metrics, server_log
from tests.sleep_wake.fakes import fake_checkpoint
from tests.sleep_wake.fakes.fake_defects import DEFECTS
from tests.sleep_wake.fakes.fake_engine import EngineDeadError, FakeEngine, GpuMemory

MiB = 1 << 20
GiB = 1 << 30
EAGER = GpuMemory.for_mode(weights=500 * MiB, kv_cache=2048 * MiB, mode="eager")
GRAPH = GpuMemory.for_mode(weights=500 * MiB, kv_cache=2048 * MiB, mode="graph")


def test_bytes_follow_the_resident_tags():
    e = FakeEngine(EAGER)
    awake = e.gpu_bytes()
    assert awake == EAGER.context + EAGER.weights + EAGER.kv_cache + EAGER.activations
    e.sleep(1, "abort")
    assert e.gpu_bytes() == EAGER.context
    e.wake_up(["weights"])
    assert e.gpu_bytes() == EAGER.context + EAGER.weights
    e.wake_up(["kv_cache"])
    # The activation blocks come back with the next forward, not with the wake.
    assert e.gpu_bytes() == awake - EAGER.activations
    e.prefill("a prompt")
    assert e.gpu_bytes() == awake
    assert e.device_used_bytes() == awake + EAGER.device_other


def test_graph_mode_keeps_its_pool_asleep():
    e = FakeEngine(GRAPH)
    e.sleep(1, "abort")
    assert e.gpu_bytes() == GRAPH.context + GRAPH.graph_pool and GRAPH.graph_pool > 0


def test_scheduling_resumes_only_when_every_tag_is_awake():
    e = FakeEngine(EAGER)
    e.sleep(1, "abort")
    e.wake_up(["weights", "scheduling"])
    assert e.paused and e.is_sleeping() and e.gauge_values() == metrics.GAUGE_AWAKE
    e.wake_up(["no_such_tag"])
    assert e.sleeping_tags == {"kv_cache"}
    e.wake_up(["kv_cache"])
    assert not e.paused and not e.is_sleeping()


@pytest.mark.parametrize(
    "level,gauge,kept",
    [
        (0, metrics.GAUGE_LEVEL0, True),
        (1, metrics.GAUGE_LEVEL1, True),
        (2, metrics.GAUGE_LEVEL2, False),
        (3, metrics.GAUGE_LEVEL0, False),
    ],
)
def test_levels(level, gauge, kept):
    e = FakeEngine(EAGER)
    before = e.weights
    e.sleep(level, "abort")
    assert e.gauge_values() == gauge
    assert e.sleeping_tags == (set() if level == 0 else {"weights", "kv_cache"})
    e.wake_up(None)
    assert (e.weights == before) is kept and (e.weights is None) is not kept


def test_defects_change_what_they_name():
    kept = FakeEngine(EAGER, defects=["kv_cache_kept_on_sleep"])
    kept.sleep(1, "abort")
    assert kept.gpu_bytes() == EAGER.context + EAGER.kv_cache
    leaky = FakeEngine(EAGER, defects=["leak_per_wake"])
    for _ in range(3):
        leaky.sleep(1, "abort")
        leaky.wake_up(None)
    assert leaky.leaked == 3 * leaky.sizes.leak_per_wake
    noop = FakeEngine(EAGER, defects=["reload_weights_noop"])
    noop.sleep(2, "abort")
    noop.wake_up(["weights"])
    noop.reload_weights()
    assert noop.weights is None


def test_unknown_defect_is_refused():
    with pytest.raises(ValueError, match="unknown fake defects"):
        FakeEngine(EAGER, defects=["no_such_bug"])
    assert "gauge_tracks_tags" in DEFECTS


def test_reload_while_weights_asleep_fails():
    e = FakeEngine(EAGER)
    e.sleep(2, "abort")
    with pytest.raises(RuntimeError, match="asleep"):
        e.reload_weights()


def _decode_all(e, prompt, epoch):
    """One request through the engine, as fake_vllm's handler runs it."""
    assert e.wait_scheduled(epoch)
    e.prefill(prompt)
    choices = e.plan(prompt, 4, 1, None)
    try:
        while choices[0].finish_reason is None:
            e.decode_step(choices, epoch)
    finally:
        e.end_decode(epoch)
    return choices[0]


def test_prefix_cache_hits_whole_blocks_of_all_but_the_last_token():
    e = FakeEngine(EAGER)
    for n, hit in ((16, 0), (17, 16), (32, 16), (33, 32), (67, 64)):
        prompt = " ".join(f"w{n}_{i}" for i in range(n))
        assert e.prefill(prompt) == (n, 0)
        assert e.prefill(prompt) == (n, hit), n
    prompt = " ".join(f"x{i}" for i in range(40))
    e.prefill(prompt)
    e.sleep(0, "abort")
    assert e.prefill(prompt)[1] == 32  # level 0 only pauses
    e.sleep(1, "abort")
    assert e.prefill(prompt)[1] == 0


def test_keep_freezes_requests_in_flight_and_wait_drains_them():
    e = FakeEngine(EAGER, token_delay_s=0.01)
    epoch = e.accept()
    fresh = FakeEngine(EAGER)
    reference = _decode_all(fresh, "p", fresh.accept()).token_ids
    assert e.wait_scheduled(epoch)
    choices = e.plan("p", 4, 1, None)
    e.decode_step(choices, epoch)
    e.sleep(0, "keep")
    stepped = threading.Thread(target=e.decode_step, args=(choices, epoch))
    stepped.start()
    stepped.join(0.3)
    assert stepped.is_alive() and len(choices[0].token_ids) == 1  # frozen where it was
    e.wake_up(["scheduling"])
    stepped.join(5)
    while choices[0].finish_reason is None:
        e.decode_step(choices, epoch)
    assert choices[0].token_ids == reference and choices[0].finish_reason == "length"
    e.end_decode()

    drained = FakeEngine(EAGER, token_delay_s=0.01)
    epoch = drained.accept()
    request = threading.Thread(target=_decode_all, args=(drained, "p", epoch))
    request.start()
    while not drained.running:
        time.sleep(0.001)
    drained.sleep(1, "wait")  # returns once the request in flight has ended
    assert not drained.running and not request.is_alive()
    with pytest.raises(ValueError, match="Invalid pause mode"):
        drained.sleep(1, "drop")


def test_sleep_logs_vllms_lines():
    lines: list[str] = []
    e = FakeEngine(EAGER, log=lines.append)
    awake = e.device_used_bytes()
    e.sleep(1, "abort")
    log = "\n".join(lines)
    (allocator,) = server_log.allocator_sleeps(log)
    (worker,) = server_log.worker_sleeps(log)
    assert abs(allocator.total_bytes - EAGER.weights - EAGER.kv_cache) < 0.01 * GiB
    assert abs(allocator.backed_up_bytes - EAGER.weights) < 0.01 * GiB
    assert abs(worker.freed_bytes - (awake - e.device_used_bytes())) < 0.01 * GiB
    e.sleep(1, "abort")  # the executor is asleep already: nothing is logged
    assert len(server_log.allocator_sleeps("\n".join(lines))) == 1


@pytest.mark.parametrize(
    "defect,level,extra",
    [
        ("residue_grows", 1, lambda s: s.residue),
        ("kv_cache_partly_kept", 1, lambda s: s.kv_cache // 2),
        ("kv_cache_mostly_kept", 1, lambda s: s.kv_cache * 2 // 3),
        ("kv_cache_mostly_kept", 2, lambda s: 0),
        ("kv_cache_partly_kept_level2", 1, lambda s: 0),
        ("kv_cache_partly_kept_level2", 2, lambda s: s.kv_cache // 2),
    ],
)
def test_device_defects_asleep(defect, level, extra):
    # Sizes come from the fake's own model (its weights and KV cache), not from the mutant catalogue.
    e = FakeEngine(EAGER, defects=[defect])
    e.sleep(level, "abort")
    assert e.gpu_bytes() == EAGER.context + extra(e.sizes)


def test_late_defects_hold_until_their_time_or_the_next_forward():
    late = FakeEngine(EAGER, defects=["late_release"])
    late.sleep(1, "abort")
    assert late.gpu_bytes() == EAGER.context + EAGER.kv_cache
    late.late_release_until = 0.0  # LATE_S later
    assert late.gpu_bytes() == EAGER.context
    remap = FakeEngine(EAGER, defects=["late_remap"])
    awake = remap.gpu_bytes()
    remap.sleep(1, "abort")
    remap.wake_up(None)
    assert remap.gpu_bytes() == awake - EAGER.activations - EAGER.kv_cache
    remap.prefill("p")
    assert remap.gpu_bytes() == awake
    assert remap.device_used_bytes() - EAGER.device_other == awake
    restore = FakeEngine(EAGER, defects=["late_restore"])
    golden = restore.plan("p", 4, 1, None)[0].planned
    restore.sleep(1, "abort")
    restore.wake_up(None)
    assert restore.plan("p", 4, 1, None)[0].planned == [0] * 4
    restore.restore_until = 0.0  # LATE_RESTORE_S later
    assert restore.plan("p", 4, 1, None)[0].planned == golden


def test_a_request_scheduled_while_asleep_computes_garbage():
    e = FakeEngine(EAGER, defects=["request_runs_while_asleep"])
    e.sleep(1, "abort")
    epoch = e.accept()
    assert e.wait_scheduled(epoch) and e.is_sleeping()
    assert e.plan("p", 4, 1, None)[0].planned == [0] * 4


def test_a_defect_logs_the_plugin_s_reached_line_when_its_switch_is_first_consulted():
    """The fake's stand-in for a patched function's first call (tests/core/verdict.py: a mutant never
    reached is not applied): nothing at start, one line at the first sleep, none for a defect no call
    consults (no wake of a tag ever happens here)."""
    import os

    import sleepwake_mutants

    lines: list[str] = []
    slow = FakeEngine(EAGER, defects=["slow_sleep"], log=lines.append)
    unreached = FakeEngine(EAGER, defects=["weights_wake_maps_more"], log=lines.append)
    assert lines == []  # nothing at start
    for engine in (slow, unreached):
        engine.sleep(0, "abort")
        engine.wake_up(["scheduling"])
    slow.sleep(1, "abort")
    slow.sleep(1, "abort")
    reached = [line for line in lines if line.startswith("sleepwake-mutant")]  # the server log holds more
    assert reached == [sleepwake_mutants.REACHED.format(name="slow_sleep", pid=os.getpid())]


@pytest.mark.parametrize("level", [1, 2])
def test_worker_level_sleep_passes_the_engine_by(level):
    """collective_rpc("sleep"): the pools unmapped, the engine not told (no pause, no executor tags, no
    gauge, no cache reset), so the engine's own wake is a no-op; the workers' wake maps them back."""
    e = FakeEngine(EAGER)
    before = e.weights
    cached = " ".join(f"c{i}" for i in range(40))
    e.prefill(cached)
    e.worker_sleep(level)
    assert not e.is_sleeping() and e.sleeping_tags == set() and e.gauge_values() == metrics.GAUGE_AWAKE
    assert e.gpu_bytes() == EAGER.context and e.prefix_cache
    e.wake_up(None)  # "Executor is not sleeping.": nothing mapped
    assert e.gpu_bytes() == EAGER.context
    with pytest.raises(RuntimeError, match="unmapped already"):
        e.worker_sleep(level)
    e.worker_wake_up(["weights"])
    assert e.gpu_bytes() == EAGER.context + EAGER.weights
    assert e.weights == (before if level == 1 else None)  # level 2 discarded them: garbage until a push
    with pytest.raises(RuntimeError, match="mapped already"):
        e.worker_wake_up(["weights"])  # cumem.py wake_up never reads is_asleep
    e.worker_wake_up(["kv_cache"])
    assert e.gpu_bytes() == EAGER.context + EAGER.weights + EAGER.kv_cache
    assert e.prefill(cached)[1] == 32  # no reset: the blocks' hashes outlived their KV


def test_worker_level_kv_first_wake_after_level2_and_a_request_meanwhile():
    e = FakeEngine(EAGER)
    e.worker_sleep(2)
    with pytest.raises(RuntimeError, match="model buffers"):
        e.worker_wake_up(["kv_cache"])  # the saved buffers go into the weights pool, still unmapped
    assert e.unmapped == {"weights", "kv_cache"}
    with pytest.raises(EngineDeadError):  # nothing pauses the scheduler: the forward reads unmapped memory
        e.wait_scheduled(e.accept())


def _in_flight(e, prompt="p", max_tokens=4):
    """A request scheduled and one token into its decode: (ticket, choices)."""
    ticket = e.accept()
    assert e.wait_scheduled(ticket)
    e.prefill(prompt)
    choices = e.plan(prompt, max_tokens, 1, None)
    e.decode_step(choices, ticket)
    return ticket, choices


def _decode_rest(e, ticket, choices):
    while choices[0].finish_reason is None:
        e.decode_step(choices, ticket)
    e.end_decode(ticket)
    return choices[0]


EAGER_WEIGHTS = FakeEngine(EAGER).weights


@pytest.mark.parametrize("clear_cache", [True, False])
def test_pause_keep_freezes_and_clear_cache_preempts(clear_cache):
    """pause(keep) freezes the request in flight; clear_cache resets the caches with
    reset_running_requests, which preempts it (KV dropped: it re-runs on the weights serving at resume),
    else it keeps its KV blocks and a plain reset is refused. Neither writes the gauge."""
    e = FakeEngine(EAGER)
    cached = " ".join(f"c{i}" for i in range(40))
    e.prefill(cached)
    ticket, choices = _in_flight(e)
    first = list(choices[0].token_ids)
    e.pause("keep", clear_cache)
    assert e.is_paused() and e.is_sleeping() and e.gauge_values() == metrics.GAUGE_AWAKE
    assert (e.preempted == 1) is clear_cache and (e.prefill(cached)[1] == 0) is clear_cache
    assert e.reset_prefix_cache() is clear_cache  # refused while the frozen request holds blocks
    e.weights = "pushed"  # a push while paused
    e.resume()
    assert not e.is_paused() and not e.is_sleeping()
    rest = _decode_rest(e, ticket, choices).token_ids[1:]
    weights = "pushed" if clear_cache else f"pushed over the KV cache of {EAGER_WEIGHTS}"
    assert rest == fake_checkpoint.tokens(weights, f"p w{first[0]}", 3, 0, None)


@pytest.mark.parametrize("mode,ends", [("abort", "abort"), ("wait", "length")])
def test_pause_abort_ends_and_wait_drains(mode, ends):
    e = FakeEngine(EAGER, token_delay_s=0.01)
    ticket = e.accept()
    request = threading.Thread(target=lambda: ended.append(_decode_all(e, "p", ticket)))
    ended: list = []
    request.start()
    while not e.running:
        time.sleep(0.001)
    e.pause(mode, clear_cache=True)  # wait: returns once the request has ended
    request.join(5)
    assert ended[0].finish_reason == ends and e.is_paused()
    queued = e.accept()
    held = threading.Thread(target=e.wait_scheduled, args=(queued,))
    held.start()
    held.join(0.2)
    assert held.is_alive()  # PAUSED_NEW: a new request waits
    e.wake_up(None)  # a full wake resumes a pause the caller set (core.py wake_up)
    held.join(5)
    assert not held.is_alive() and not e.is_paused()


def test_resume_while_the_kv_cache_sleeps_kills_the_engine_at_the_next_forward():
    """resume_scheduler has no guard: the next request is scheduled over the unmapped KV cache (the
    divergence resume_while_kv_cache_asleep: the engine core dies)."""
    e = FakeEngine(EAGER)
    e.sleep(1, "abort")
    e.wake_up(["weights"])
    e.resume()
    assert not e.is_paused() and e.is_sleeping()
    with pytest.raises(EngineDeadError):
        e.wait_scheduled(e.accept())
    assert e.dead
    healthy = FakeEngine(EAGER)  # the same calls, the KV cache woken before the request: served
    healthy.sleep(1, "abort")
    healthy.wake_up(["weights"])
    healthy.resume()
    healthy.wake_up(["kv_cache"])
    assert _decode_all(healthy, "p", healthy.accept()).finish_reason == "length"


def test_reset_prefix_cache_with_reset_running_requests_preempts_them():
    e = FakeEngine(EAGER)
    ticket, choices = _in_flight(e)
    assert e.reset_prefix_cache() is False
    assert e.reset_prefix_cache(reset_running_requests=True) is True
    assert e.preempted == 0 and ticket.resumes == "prefill"  # unpaused: scheduled again at once
    assert _decode_rest(e, ticket, choices).finish_reason == "length"


@pytest.mark.parametrize(
    "defect,call",
    [
        ("async_pause_keep_aborts", lambda e: e.pause("keep", True)),
        ("async_resume_does_nothing", lambda e: (e.pause("abort", True), e.resume())),
        ("pause_keep_ignores_clear_cache", lambda e: e.pause("keep", True)),
        ("async_pause_ignores_clear_cache", lambda e: e.pause("keep", False)),
        ("worker_wake_maps_nothing", lambda e: (e.worker_sleep(1), e.worker_wake_up(None))),
    ],
)
def test_pause_and_worker_defects_change_what_they_name(defect, call):
    healthy, broken = FakeEngine(EAGER), FakeEngine(EAGER, defects=[defect])
    for e in (healthy, broken):
        _in_flight(e)
        call(e)
    state = lambda e: (e.abort_epoch, e.paused, e.preempted, sorted(e.unmapped))  # noqa: E731
    assert state(healthy) != state(broken)
