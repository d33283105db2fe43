import dataclasses

import pytest

from tests.core import host_memory, metrics, oracle, thresholds
from tests.core.walk import model, plan
from tests.core.walk import operations as ops
from tests.core.walk.model import INITIAL

V = "0.26.0"
# Sizes of the H200 run (thresholds' sources): 3609198592 awake bytes, 498641000 checkpoint bytes.
SIZES = model.Sizes(awake_bytes=3609198592, weights_bytes=498641000, kv_bytes=2 << 30)
GENERATE = ops.Operation("generate_fresh")
CACHED = ops.Operation("generate_cached")


def run(*steps, start=INITIAL):
    return plan.run(start, steps)


@pytest.fixture
def divergence_fixed(monkeypatch):
    """Makes vLLM 0.26.0 behave as documented for one known divergence."""

    def fix(name):
        entry = thresholds.KNOWN_DIVERGENCES[name]
        monkeypatch.setitem(
            thresholds.KNOWN_DIVERGENCES,
            name,
            dataclasses.replace(entry, versions=tuple(v for v in entry.versions if v != V)),
        )

    return fix


@pytest.mark.parametrize(
    "steps,sleeping,gauge",
    [
        ((), False, metrics.GAUGE_AWAKE),
        ((ops.sleep(0),), True, metrics.GAUGE_LEVEL0),
        ((ops.sleep(1),), True, metrics.GAUGE_LEVEL1),
        ((ops.sleep(2),), True, metrics.GAUGE_LEVEL2),
        ((ops.sleep(1), ops.wake()), False, metrics.GAUGE_AWAKE),
        ((ops.sleep(0), ops.wake(["scheduling"])), False, metrics.GAUGE_AWAKE),
        # partially asleep: the gauge reads awake (pinned), /is_sleeping stays true
        ((ops.sleep(1), ops.wake(["weights"])), True, metrics.GAUGE_AWAKE),
        ((ops.sleep(2), ops.wake(["weights"])), True, metrics.GAUGE_AWAKE),
        # an ignored wake still writes the awake gauge; a second sleep writes its own level's
        ((ops.sleep(1), ops.wake(["no_such_tag"])), True, metrics.GAUGE_AWAKE),
        ((ops.sleep(1), ops.wake(["scheduling"])), True, metrics.GAUGE_AWAKE),
        ((ops.sleep(1), ops.sleep(2)), True, metrics.GAUGE_LEVEL2),
        ((ops.sleep(1), ops.wake(["weights"]), ops.sleep(1)), True, metrics.GAUGE_LEVEL1),
        ((ops.wake(),), False, metrics.GAUGE_AWAKE),
    ],
)
def test_flags(steps, sleeping, gauge):
    assert model.flags(run(*steps), V) == (sleeping, gauge)


def test_partial_gauge_where_documented(divergence_fixed):
    divergence_fixed("gauge_awake_while_partially_asleep")
    assert model.flags(run(ops.sleep(2), ops.wake(["weights"])), V) == (True, metrics.GAUGE_LEVEL2)
    assert model.flags(run(ops.sleep(1), ops.wake(["kv_cache"])), V) == (True, metrics.GAUGE_LEVEL1)


def test_scheduling_resumes_only_with_every_tag_resident():
    partial = run(ops.sleep(1), ops.wake(["kv_cache"]))
    assert not model.can_run(partial) and partial.asleep_tags == {"weights"}
    assert not model.can_run(ops.wake(["scheduling"]).apply(partial))
    assert model.can_run(ops.wake(["weights"]).apply(partial))
    # at level 0 every wake resumes: the executor is awake
    for tags in ops.WAKE_TAGS:
        assert model.can_run(run(ops.sleep(0), ops.wake(tags)))


def test_level2_plain_wake_serves_garbage_until_reload():
    woken = run(ops.sleep(2), ops.wake())
    assert model.can_run(woken) and model.serves(woken) is None
    assert GENERATE.applicable(woken) and model.golden_of(woken, "short") is None  # no golden: count and finish
    assert "output.golden_tokens" not in GENERATE.oracles(woken) and "output.finish_length" in GENERATE.oracles(woken)
    for steps in [(ops.sleep(1),), (ops.sleep(0),), (ops.wake(),)]:
        assert model.serves(run(*steps, start=woken)) is None
    assert model.serves(ops.reload().apply(woken)) == "A"
    assert model.serves(run(ops.sleep(1), ops.wake())) == "A"  # level 1 keeps a host copy


def test_pushed_checkpoint_is_what_a_plain_reload_loads():
    pin = thresholds.divergence("reload_without_path_loads_last_pushed", V)
    assert pin.expected == "checkpoint B"  # the transitions assume it
    pushed = run(ops.sleep(1), ops.wake(["weights"]), ops.reload("B"), ops.wake(["kv_cache"]))
    assert model.serves(pushed) == "B" and model.golden_oracle(pushed) == "weights.pushed_checkpoint_golden"
    recovered = run(ops.sleep(2), ops.wake(["weights"]), ops.reload(), ops.wake(["kv_cache"]), start=pushed)
    assert model.serves(recovered) == "B"
    assert model.serves(run(ops.reload("A"), ops.sleep(2), ops.wake(), ops.reload(), start=pushed)) == "A"


def test_terminal_pairs_are_left_to_the_probes():
    level2 = run(ops.sleep(2))
    assert ops.terminal(ops.wake(["kv_cache"]), level2) == ops.KV_FIRST_AFTER_LEVEL2
    assert ops.terminal(ops.wake(["kv_cache", "scheduling"]), level2) == ops.KV_FIRST_AFTER_LEVEL2
    assert "known divergence" in (ops.wake(["kv_cache"]).why_not(level2) or "")
    assert ops.wake(["kv_cache"]).applicable(run(ops.sleep(1)))  # level 1 saves no buffers
    assert ops.terminal(ops.reload("B"), level2) == ops.RELOAD_ASLEEP
    assert ops.terminal(ops.reload(), run(ops.sleep(1), ops.wake(["kv_cache"]))) == ops.RELOAD_ASLEEP
    assert ops.terminal(ops.wake(), run(ops.sleep(1), ops.wake(["weights"]))) == ops.FULL_WAKE_REMAPS
    with pytest.raises(ValueError, match="not applicable"):
        ops.reload("B").apply(level2)


def test_requests_sent_while_paused_wait_for_the_wake_that_resumes_scheduling():
    paused = run(ops.sleep(1), GENERATE, CACHED)
    assert paused.queued == {"plain", "long"} and not model.can_run(paused)
    assert "requests.held_while_asleep" in GENERATE.oracles(run(ops.sleep(1)))
    # A second long prompt waits beside the first; when both run, all but one hit cached blocks.
    pair = run(CACHED, start=paused)
    assert pair.queued == {"plain", "long", "long_pair"} and run(CACHED, start=pair) == pair
    assert run(ops.wake(), start=pair).prefix == "A"
    assert [model.long_prompts_hit(2, cached) for cached in (False, True)] == [1, 2]
    assert model.long_prompts_hit(1, False) == 0
    staged = run(ops.wake(["weights"]), start=paused)
    assert staged.queued == paused.queued  # a partial wake runs nothing (#44483)
    assert run(ops.wake(["scheduling"]), start=staged).queued == paused.queued
    resumed = run(ops.wake(["kv_cache"]), start=staged)
    assert not resumed.queued and resumed.prefix == "A"  # the waiting long prompt ran and cached its blocks
    assert not run(ops.sleep(1, "abort"), start=paused).queued  # an abort sleep ends them
    assert run(ops.sleep(1, "wait"), start=paused).queued == paused.queued  # waiting ones are not drained
    assert run(ops.sleep(1, "keep"), start=paused).queued == paused.queued


def test_pause_modes_while_paused():
    held = run(ops.sleep(0, "keep", 1))
    assert held.pause == model.PAUSE_ALL and held.held == "A" and held.held_kv
    drained = ops.sleep(0, "wait").apply(held)
    assert drained.held is None and drained.pause == model.PAUSE_NEW  # PAUSED_NEW steps the running request
    assert ops.sleep(0, "abort").apply(held).held is None
    assert ops.sleep(0, "keep").apply(held) == dataclasses.replace(held, gauge_level=0)
    preempted = ops.sleep(1, "keep").apply(held)
    assert preempted.held == "A" and not preempted.held_kv and preempted.asleep_tags == set(model.TAGS)
    # a preempted request waits like a new one: a wait sleep does not run it
    assert ops.sleep(1, "wait").apply(preempted).held == "A"
    assert not model.resets_prefix_cache(held) and model.resets_prefix_cache(preempted)
    assert model.reset_prefix_cache_result("0.26.0", "http", False) is False
    assert model.reset_prefix_cache_result("0.25.0", "http", False) is None
    # The router drops the result; the in-process doors return the engine's bool on every release.
    assert model.reset_prefix_cache_result("0.25.0", "async_llm", False) is False
    assert model.reset_prefix_cache_result("0.24.0", "llm") is True


def test_keep_with_a_request_in_flight_at_every_level():
    for level in model.LEVELS:
        held = run(ops.sleep(level, "keep", 1))
        assert held.held == "A" and held.held_kv == (level == 0)
        assert model.in_flight_outcome("keep", level).ends == "held"
    garbage = run(ops.sleep(2, "keep", 1), ops.wake())
    assert not garbage.held  # it ran on garbage weights: no golden, a count and a finish
    assert model.resumed_golden(garbage, "A") is None
    reloaded = run(ops.sleep(2, "keep", 1), ops.wake(["weights"]), ops.reload())
    assert model.resumed_golden(ops.wake(["kv_cache"]).apply(reloaded), "A") == "A"
    pushed = run(ops.sleep(2, "keep", 1), ops.wake(["weights"]), ops.reload("B"), ops.wake(["kv_cache"]))
    assert model.resumed_golden(pushed, "A") is None  # its tokens mix A and B


def test_a_request_arriving_during_a_wait_drain_waits():
    late = run(ops.sleep(1, "wait", 2))
    assert late.queued == {"plain"} and late.held is None
    assert "sleep:1:wait:2" in ops.BY_TOKEN and "sleep:1:abort:2" not in ops.BY_TOKEN
    assert "requests.held_while_asleep" in ops.sleep(1, "wait", 2).oracles(INITIAL)
    assert "requests.held_while_paused" in ops.sleep(0, "wait", 2).oracles(INITIAL)


def test_a_reload_keeps_the_prefix_cache_which_goes_stale():
    cached = run(CACHED)
    stale = ops.reload("B").apply(cached)
    assert stale.prefix == "A" and model.hits_cache(stale, "long") and model.golden_of(stale, "long") is None
    assert model.golden_of(stale, "short") == "B"
    assert model.golden_of(ops.reload("A").apply(stale), "long") == "A"  # the blocks are A's again
    assert model.golden_of(ops.RESET_PREFIX_CACHE.apply(stale), "long") == "B"


def test_in_flight_outcomes():
    assert model.in_flight_outcome("abort", 2).ends == "aborted"
    assert model.in_flight_outcome("wait", 1).ends == "completed"
    assert model.in_flight_outcome("keep", 1).ends == "held"
    with pytest.raises(ValueError, match="no request in flight"):
        model.in_flight_outcome("drain", 1)
    assert not run(ops.sleep(0, "keep", 1), ops.wake(["no_such_tag"])).held  # any wake resumes at level 0


def test_prefix_cache():
    assert not model.hits_cache(run(CACHED), "short")
    assert not model.hits_cache(INITIAL, "long")
    cached = run(CACHED)
    assert model.hits_cache(cached, "long")
    assert model.hits_cache(run(ops.sleep(0), ops.wake(), start=cached), "long")
    assert not model.hits_cache(run(ops.sleep(0), start=cached), "long")  # the request waits
    for level in (1, 2):
        assert not model.hits_cache(run(ops.sleep(level), ops.wake(), ops.reload(), start=cached), "long")
    assert not model.hits_cache(run(ops.sleep(0), ops.sleep(1), ops.wake(), start=cached), "long")
    assert not model.hits_cache(ops.RESET_PREFIX_CACHE.apply(cached), "long")
    assert model.reset_prefix_cache_result("0.26.0", "http") is True
    assert model.reset_prefix_cache_result("0.25.0", "http") is None
    assert run(ops.sleep(0), CACHED, start=cached).queued == {"long"}  # waits: it reports nothing yet


def test_sleep_while_partially_asleep_keeps_the_woken_pool():
    """abstract.py sleep returns while any tag sleeps: the weights a wake mapped stay mapped."""
    partial = run(ops.sleep(1), ops.wake(["weights"]))
    again = ops.sleep(1).apply(partial)
    assert again.asleep_tags == {"kv_cache"} and again.gauge_level == 1
    assert model.device_band(again, SIZES, "MRV1-eager") == model.device_band(partial, SIZES, "MRV1-eager")


def test_misuse_is_named_and_answers_200():
    asleep = run(ops.sleep(1))
    assert ops.sleep(1).misuse(asleep) == "sleep while asleep"
    assert ops.wake().misuse(INITIAL) == "wake while awake"
    assert ops.wake(["no_such_tag"]).misuse(asleep) == "wake of an unknown tag"
    assert ops.wake(["weights"]).misuse(run(ops.wake(["weights"]), start=asleep)) == "wake of a tag that is not asleep"
    assert ops.wake(["weights"]).misuse(asleep) is None and ops.EXPECTED_STATUS == 200
    ignored = ops.wake(["no_such_tag"]).apply(asleep)
    assert ignored.asleep_tags == asleep.asleep_tags and ignored.gauge_level is None


@pytest.mark.parametrize(
    "steps,oracles",
    [
        ((), {"device_bytes.wake_shortfall", "device_bytes.wake_growth"}),
        ((ops.sleep(0),), {"device_bytes.wake_shortfall", "device_bytes.wake_growth"}),
        (
            (ops.sleep(1),),
            {"device_bytes.level1_asleep", "device_bytes.level1_residue", "device_bytes.level1_freed_kv"},
        ),
        ((ops.sleep(2),), {"device_bytes.level2_asleep"}),
        (
            (ops.sleep(1), ops.wake(["weights"])),
            {
                "device_bytes.weights_wake_mapped",
                "device_bytes.weights_wake_kv_unmapped",
                "device_bytes.weights_wake_fraction",
            },
        ),
        (
            (ops.sleep(1), ops.wake(["kv_cache"])),
            {"device_bytes.kv_wake_mapped", "device_bytes.kv_wake_weights_unmapped"},
        ),
    ],
)
def test_device_band_by_state(steps, oracles):
    band = model.device_band(run(*steps), SIZES, "MRV1-eager")
    assert {b.oracle for b in band.bounds} == oracles
    assert 0 <= band.lo < band.hi


def test_device_band_numbers():
    t = thresholds.get
    awake = model.device_band(INITIAL, SIZES, "MRV2-eager")
    assert (awake.lo, awake.hi) == (
        SIZES.awake_bytes - t("wake_shortfall_bytes_max", "MRV2-eager"),
        SIZES.awake_bytes + t("wake_restore_bytes_max"),
    )
    asleep = model.device_band(run(ops.sleep(1)), SIZES, "MRV2-graph")
    assert asleep.hi == pytest.approx(
        min(
            t("level1_bytes_fraction_max") * SIZES.awake_bytes,
            t("level1_residue_bytes_max", "MRV2-graph"),
            SIZES.awake_bytes - t("sleep_freed_kv_fraction_min") * SIZES.kv_bytes,
        )
    )
    kv_back = model.device_band(run(ops.sleep(1), ops.wake(["kv_cache"])), SIZES, "MRV1-graph")
    err = t("weights_wake_bytes_rel_error_max")
    assert kv_back.lo == pytest.approx(
        SIZES.awake_bytes - (1 + err) * SIZES.weights_bytes - t("wake_shortfall_bytes_max", "MRV1-graph")
    )
    assert kv_back.violations(SIZES.awake_bytes)[0].oracle == "device_bytes.kv_wake_weights_unmapped"


def test_host_band_by_state(divergence_fixed):
    t = thresholds.get
    # Every upper bound allows the heap's drift and what level 2's saved buffers leave behind.
    awake, w, drift = 2 << 30, SIZES.weights_bytes, t("host_cycle_flat_max") + t("level2_host_bytes_max")
    copy = model.host_band(run(ops.sleep(1)), V, awake, w)
    assert (copy.lo, copy.hi) == pytest.approx(
        (awake + t("host_copy_weights_ratio_min") * w, awake + t("host_copy_weights_ratio_max") * w + drift)
    )
    assert {b.oracle for b in copy.bounds} == {"host_bytes.level1_copy_min", "host_bytes.level1_copy_max"}
    cached = run(ops.sleep(1), ops.wake())
    assert cached.host_cached and not INITIAL.host_cached
    assert model.host_band(cached, V, awake, w).lo == copy.lo  # PyTorch's host cache keeps the block (pinned)
    assert model.host_band(run(ops.sleep(1), ops.wake(["kv_cache"])), V, awake, w) == copy  # weights still asleep
    level2 = model.host_band(run(ops.sleep(2)), V, awake, w)
    assert level2.bounds[0].oracle == "host_bytes.level2_asleep"
    assert level2.hi == awake + drift
    assert model.host_band(INITIAL, V, awake, w).hi == awake + drift
    divergence_fixed("host_copy_cached_after_wake")
    assert thresholds.divergence("host_copy_cached_after_wake", V).expected == host_memory.RELEASED
    released = model.host_band(cached, V, awake, w)
    assert (released.lo, released.hi) == (0, awake + drift)


def test_every_band_is_consistent_in_every_reachable_state():
    for state in plan.reachable_states():
        for cell in ("MRV1-eager", "MRV2-graph"):
            band = model.device_band(state, SIZES, cell)
            assert band.lo < band.hi, (state, cell)
        band = model.host_band(state, V, 2 << 30, SIZES.weights_bytes)
        assert band.lo < band.hi, state


def test_every_oracle_id_is_known():
    named = set(ops.after_every_step("http")) | set(ops.TERMINAL_ORACLES.values())
    for state in plan.reachable_states():
        named |= {b.oracle for b in model.device_band(state, SIZES, "MRV1-eager").bounds}
        named |= {b.oracle for b in model.host_band(state, V, 2 << 30, SIZES.weights_bytes).bounds}
        for op, _ in plan.successors(state):
            named |= set(op.oracles(state))
    unknown = named - set(oracle.ORACLES)
    assert not unknown, f"the model names oracle ids that oracle.ORACLES lacks: {sorted(unknown)}"


def test_inconsistent_state_is_refused():
    with pytest.raises(ValueError, match="fix the transition"):
        model.State(asleep_tags=frozenset({"weights"}))
    with pytest.raises(ValueError, match="prompt kind"):
        model.hits_cache(INITIAL, "medium")


@pytest.mark.parametrize("cell_id", ["MRV1-eager", "MRV2-graph"])
def test_a_weights_wake_that_maps_nothing_breaks_the_band(cell_id):
    """With the KV cache asleep, the weights' lower bound is the awake bytes less the KV cache and what a
    sleep may leave short: bytes without the weights fall below it (a bound of the checkpoint's bytes alone,
    which the context exceeds, let them pass)."""
    band = model.device_band(run(ops.sleep(1), ops.wake(["weights"])), SIZES, cell_id)
    shortfall = thresholds.get("wake_shortfall_bytes_max", cell_id)
    healthy = SIZES.awake_bytes - SIZES.kv_bytes - shortfall
    unmapped = healthy - SIZES.weights_bytes
    assert not band.violations(healthy)
    assert [b.oracle for b in band.violations(unmapped)] == ["device_bytes.weights_wake_mapped"]


# --- pushes, /pause and /resume -------------------------------------------------------------------------
PUSH_B, PUSH_A = ops.push("ipc", "B"), ops.push("tensor", "A")


def test_a_push_loads_the_pool_and_leaves_the_model_path_so_a_plain_reload_reverts_it():
    pushed = run(PUSH_B)
    assert (pushed.weights, pushed.model_path) == ("B", "A") and model.golden_of(pushed, "short") == "B"
    assert model.golden_oracle(pushed) == "weights.pushed_checkpoint_golden"
    reverted = ops.reload().apply(pushed)  # TRL #5312: reload_weights() after a tensor push loads the disk's
    assert model.serves(reverted) == "A"
    assert plan.situation(pushed, ops.reload()).pushed and not plan.situation(INITIAL, ops.reload()).pushed
    # Into a level-2 sleep's garbage, after the weights wake: the RL trainers' recipe.
    recipe = run(ops.sleep(2), ops.wake(["weights"]), PUSH_B, ops.wake(["kv_cache"]))
    assert model.serves(recipe) == "B" and model.can_run(recipe) and recipe.model_path == "A"
    # A level-1 sleep keeps a host copy of what was pushed.
    assert model.serves(run(PUSH_B, ops.sleep(1), ops.wake())) == "B"
    # The prefix cache keeps the old weights' blocks: stale until a reset.
    stale = run(CACHED, PUSH_B)
    assert stale.prefix == "A" and model.golden_of(stale, "long") is None and model.hits_cache(stale, "long")


def test_a_push_into_sleeping_weights_is_pinned_by_the_reloads_probe():
    for asleep in (run(ops.sleep(1)), run(ops.sleep(2)), run(ops.sleep(1), ops.wake(["kv_cache"]))):
        left = PUSH_B.left_out(asleep)
        assert left is not None and left.kind == ops.PINNED and ops.RELOAD_ASLEEP in left.reason, asleep.describe()
        assert ops.terminal(ops.reload("B"), asleep) == ops.RELOAD_ASLEEP  # the probe that pins the write
    assert PUSH_B.applicable(run(ops.sleep(1), ops.wake(["weights"])))  # the KV cache may sleep on


def test_pause_is_a_sleeps_scheduler_pause_without_the_gauge():
    for mode in ops.MODES:
        for clear in (True, False):
            paused = ops.pause(mode, clear).apply(INITIAL)
            assert paused.level == 0 and paused.gauge_level is None and not paused.asleep_tags
            assert model.is_paused(paused) and model.sleeping(paused)
            assert model.flags(paused, V) == (True, metrics.GAUGE_AWAKE)
            assert paused.pause == (model.PAUSE_ALL if mode == "keep" else model.PAUSE_NEW)
    cached = run(CACHED)
    assert ops.pause("abort", True).apply(cached).prefix is None  # clear_cache resets the prefix cache
    assert ops.pause("abort", False).apply(cached).prefix == "A"
    assert ops.sleep(0).apply(cached).prefix == "A"  # a level-0 sleep's pause clears nothing


def test_pause_reaches_the_request_a_keep_froze():
    frozen = run(ops.sleep(0, "keep", 1))
    assert frozen.held_kv
    preempted = ops.pause("keep", True).apply(frozen)  # OpenRLHF: pause_generation(mode="keep")
    assert preempted.held == "A" and not preempted.held_kv and preempted.level == 0 and not preempted.asleep_tags
    kept = ops.pause("keep", False).apply(frozen)  # SkyRL: /pause?mode=keep&clear_cache=false
    assert kept.held_kv
    assert ops.pause("wait", True).apply(frozen).held is None  # drained before the reset
    assert ops.pause("abort", False).apply(frozen).held is None
    assert "requests.ends_in_race" in ops.pause("wait", False).oracles(frozen)
    assert "requests.abort_aborts" in ops.pause("abort", True).oracles(frozen)
    # a preempted request waits like a new one: a wait pause does not drain it
    assert ops.pause("wait", False).apply(preempted).held == "A"
    assert model.resets_prefix_cache(preempted) and not model.resets_prefix_cache(kept)


def test_a_weight_update_while_paused_with_a_request_frozen():
    for clear in (True, False):
        frozen = run(ops.sleep(0, "keep", 1), ops.pause("keep", clear), PUSH_B)
        assert frozen.held == "A" and model.serves(frozen) == "B"
        resumed = ops.RESUME.apply(frozen)
        assert not resumed.held and not resumed.paused and model.serves(resumed) == "B"
        assert model.resumed_golden(resumed, "A") is None  # its tokens mix A and B: a count, no golden
        assert "output.finish_length" in ops.RESUME.oracles(frozen)
        assert "requests.resumes_after_keep" in ops.RESUME.oracles(frozen)
    same = run(ops.sleep(0, "keep", 1), ops.pause("keep", True), ops.RESUME)
    assert "prefix_cache.kept_paused_request" in ops.RESUME.oracles(run(ops.sleep(0, "keep", 1)))
    assert not same.held


def test_resume_lifts_any_pause_and_leaves_the_gauge_the_last_sleep_wrote():
    after_sleep = run(ops.sleep(0), ops.RESUME)
    assert model.can_run(after_sleep) and not model.is_paused(after_sleep) and after_sleep.gauge_level == 0
    assert model.flags(after_sleep, V) == (False, metrics.GAUGE_LEVEL0)
    assert run(ops.pause("wait", False), ops.RESUME) == INITIAL
    assert ops.RESUME.misuse(INITIAL) == "resume while not paused" and ops.RESUME.apply(INITIAL) == INITIAL
    queued = run(ops.pause("abort", True), CACHED, GENERATE)
    resumed = ops.RESUME.apply(queued)
    assert not resumed.queued and resumed.prefix == "A"
    assert {"output.finish_length", "prefix_cache.hit_iff_cached"} <= set(ops.RESUME.oracles(queued))
    # a full wake lifts a /pause too (core.py wake_up resumes the scheduler once the executor is awake)
    assert run(ops.pause("keep", False), ops.wake()) == INITIAL
    assert plan.reset_ops(after_sleep) == [ops.wake()]  # the wake writes the awake gauge


def test_resume_while_a_tag_sleeps_is_a_terminal_pair(divergence_fixed):
    for steps in [(ops.sleep(1),), (ops.sleep(1), ops.wake(["weights"])), (ops.sleep(2), ops.wake(["weights"]))]:
        asleep = run(*steps)
        assert ops.terminal(ops.RESUME, asleep) == ops.RESUME_ASLEEP and not ops.RESUME.applicable(asleep)
        assert ops.effect(ops.RESUME, asleep) == asleep  # documented: scheduling stays paused
    pin = thresholds.divergence(ops.RESUME_ASLEEP, V, "http")
    assert pin.applies and (pin.expected["is_paused"], pin.expected["request"]) == (False, "engine dead")
    divergence_fixed(ops.RESUME_ASLEEP)
    assert thresholds.divergence(ops.RESUME_ASLEEP, V, "http").expected["is_paused"] is True


def test_pause_and_resume_only_through_doors_that_have_them():
    for door in ("llm", "llm_colocate"):
        assert "pause" in (ops.RESUME.why_not(INITIAL, door) or "") and not ops.pause().applicable(INITIAL, door)
        left = ops.RESUME.left_out(run(ops.sleep(1)), door)
        assert left is not None and left.kind == ops.MEANINGLESS  # never sendable there
        assert ops.IS_PAUSED not in ops.after_every_step(door)
        assert PUSH_B.applicable(INITIAL, door)
    for door in ("http", "async_llm"):
        assert ops.pause("keep", False).applicable(INITIAL, door) and ops.IS_PAUSED in ops.after_every_step(door)
