"""Which shards of the state walk reach a walk mutant's patch, so that its target runs those first.

A walk mutant's target (tests/mutants/mutant_test.py) walks its door's every pair, one inner pytest per shard, and stops
at the first shard that kills it. Run in their numeric order, the shards before the first that reaches the
patch only spend the target's time bound: under the finer walk (thousands of pairs in about a hundred
shards) a mutant was cut by that bound before a shard reached its code. REACHES says, per mutant, in which
steps of the model (a state and the operation sent in it) the patched code takes another path than vLLM's,
read from the patch (the plugin's walk.py and waiting.py, the fake's re-creation in fake_engine.py); order()
then puts the shards whose planned steps hold such a step first, the one that reaches it in the fewest steps
first, and the others after them in their order, so that a predicate too narrow costs time, never a verdict.
Derived from the plan, so a plan that changes moves the order with it; unit/patch_reach_unit_test.py fails
when a mutant's patch is reached by no shard of the mutants' cell, and the engine tier's unit test when a
shard its catalogue names (tests/engine/mutants/catalogue.py, read from whole walks) no longer reaches it.
In the core because both tiers read it (tools/lint/tiers.py).
"""

from __future__ import annotations

from collections.abc import Callable

from tests.core.walk import model, plan
from tests.core.walk.model import State
from tests.core.walk.operations import GENERATES, Operation

Reach = Callable[[State, Operation], bool]


def _tags(op: Operation) -> tuple:
    return op.params[0] or () if op.name == "wake" else ()


def _in_flight(op: Operation):
    return op.params[2] if op.name == "sleep" else 0


def _pauses(op: Operation) -> bool:
    return op.name in ("sleep", "pause")


def _resumes_scheduling(state: State, op: Operation) -> bool:
    """op lifts the scheduler's pause (a wake that leaves no tag asleep, a /resume): held and queued requests run."""
    return op.name in ("wake", "resume") and state.paused and not op.apply(state).paused


def _frozen_at_keep(state: State, op: Operation) -> bool:
    """A keep sleep of level >= 1 whose cache reset meets frozen requests (one in flight, or one a level-0 keep
    froze)."""
    frozen = bool(_in_flight(op) or state.held_kv)
    return op.name == "sleep" and op.params[0] >= 1 and op.mode == "keep" and frozen


def _kv_wake_under_sleeping_weights(state: State, op: Operation) -> bool:
    return op.name == "wake" and _tags(op) == (model.KV_CACHE,) and model.WEIGHTS in state.asleep_tags


# mutant (the catalogue's name; state_walk among its killers) -> the steps where its patch departs from vLLM.
REACHES: dict[str, Reach] = {
    # An abort that ends a request of several choices: an n=4 stream in flight, a "plain" queued one (an n=4
    # stream, model.QUEUED_KINDS), or a held request (a keep may have frozen an n=4 stream: the model does not
    # tell the held kinds apart).
    "abort_leaves_choices_running": lambda s, op: (
        _pauses(op) and op.mode == "abort" and (_in_flight(op) == model.N4 or "plain" in s.queued or s.held is not None)
    ),
    "abort_spares_waiting": lambda s, op: (
        _pauses(op) and op.mode == "abort" and bool(s.queued or (s.held and not s.held_kv))
    ),
    "drain_admits_late_arrivals": lambda s, op: op.name == "sleep" and op.mode == "wait" and _in_flight(op) == 2,
    "executor_wake_skips_tag_guard": lambda s, op: (
        model.sleeping(s) and any(t in model.TAGS and t not in s.asleep_tags for t in _tags(op))
    ),
    "gauge_sticky_while_asleep": lambda s, op: (
        op.name == "sleep" and model.sleeping(s) and s.gauge_level is not None and op.params[0] != s.gauge_level
    ),
    "keep_reset_aborts_frozen": _frozen_at_keep,
    "keep_without_preemption": _frozen_at_keep,
    "kv_wake_maps_nothing": _kv_wake_under_sleeping_weights,
    "kv_wake_maps_weights": _kv_wake_under_sleeping_weights,
    "level0_abort_freezes": lambda s, op: (
        op.name == "sleep" and op.params[0] == 0 and op.mode == "abort" and bool(_in_flight(op))
    ),
    "level0_wait_freezes": lambda s, op: (
        op.name == "sleep" and op.params[0] == 0 and op.mode == "wait" and bool(_in_flight(op))
    ),
    "pause_mode_sticky": lambda s, op: _pauses(op) and s.pause == model.PAUSE_ALL and op.mode != "keep" and s.held_kv,
    "paused_new_admits_waiting": lambda s, op: op.name in GENERATES and s.pause == model.PAUSE_NEW,
    "preempted_restarts_output": lambda s, op: bool(s.held) and not s.held_kv and _resumes_scheduling(s, op),
    "push_loads_wrong_file": lambda s, op: op.name == "reload" and op.params[0] is not None,
    "reload_aborts_requests": lambda s, op: op.name == "reload" and bool(s.held or s.queued),
    "reload_resets_prefix_cache": lambda s, op: op.name == "reload" and s.prefix_cached and not s.held_kv,
    "reload_resumes_scheduling": lambda s, op: op.name == "reload" and s.paused,
    "reset_prefix_cache_fails_asleep": lambda s, op: op.name == "reset_prefix_cache" and model.sleeping(s),
    "reset_prefix_cache_noop": lambda s, op: op.name == "reset_prefix_cache" and s.prefix_cached and not s.held_kv,
    "reset_prefix_cache_preempts_running": lambda s, op: (
        op.name == "reset_prefix_cache" and not op.resets_running and s.held_kv
    ),
    "scheduling_tag_kept": lambda s, op: (
        "scheduling" in _tags(op) and any(t in s.asleep_tags for t in _tags(op) if t in model.TAGS)
    ),
    "scheduling_tag_resumes": lambda s, op: "scheduling" in _tags(op) and s.paused and bool(op.apply(s).asleep_tags),
    "sleep_during_partial_wake_sleeps_again": lambda s, op: (
        op.name == "sleep" and 0 < len(s.asleep_tags) < len(model.TAGS)
    ),
    "sleep_while_paused_keeps_prefix_cache": lambda s, op: (
        op.name == "sleep" and op.params[0] >= 1 and s.level == 0 and s.prefix_cached
    ),
    "two_tag_wake_maps_first_tag": lambda s, op: (
        len([t for t in _tags(op) if t in model.TAGS]) > 1 and set(model.TAGS) <= s.asleep_tags
    ),
    "wait_mode_aborts": lambda s, op: _pauses(op) and op.mode == "wait" and bool(_in_flight(op) or s.held_kv),
    "wake_aborts_queued": lambda s, op: bool(s.queued) and _resumes_scheduling(s, op),
}


def reaching(mutant: str, walks) -> dict[int, int]:
    """{shard: the index of its first step that reaches the mutant's patch} over the shards' walks (a walk a
    shard, plan.cell_walks), for the shards that reach it at all."""
    reaches = REACHES[mutant]
    out: dict[int, int] = {}
    for shard, steps in enumerate(plan.trace(walks)):
        at = next((i for i, (state, op) in enumerate(steps) if reaches(state, op)), None)
        if at is not None:
            out[shard] = at
    return out


def order(mutant: str, walks) -> list[int]:
    """Every shard of `walks`, those that reach the mutant's patch first (the fewest steps to it first), the rest
    after them in their order; plain numeric order for a mutant REACHES does not name (the control, a class
    that does not walk)."""
    if mutant not in REACHES:
        return list(range(len(walks)))
    first = reaching(mutant, walks)
    ahead = sorted(first, key=lambda shard: (first[shard], shard))
    return ahead + [shard for shard in range(len(walks)) if shard not in first]
