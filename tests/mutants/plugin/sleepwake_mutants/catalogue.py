"""The mutant catalogue: MUTANTS, each a Mutant re-introducing one catalogued bug of vLLM's sleep mode.

This module must import without vLLM and without its sibling modules (the harness, CPU unit tests and
tools/results/mutation_table.py read MUTANTS, the last one from this file alone): each entry
names its patch as "module:function" of this package, imported by `register()` only, and the patch
imports vLLM inside its function. `kills` maps the matrix class short names expected to kill the mutant
to the oracle ids (tests/core/oracle.py) one of whose failures kills it: the failure must be the
oracle that guards that bug, not any failure (tests/core/verdict.py). `bound`, `size` and `expected`
say how big the defect is against the thresholds that should catch it (tests/core/thresholds.py):
1.5 times the bound (not 2x, not 10x), so a kill says the bound is sensitive to a defect just past it.
`fails_as` marks a defect that *is* a hang (HANG) or an error answer (ERROR_ANSWER: a 5xx, an engine
dead behind the API server): only for such an entry do the liveness oracles it lists (api.answers,
api.status, server.healthy) count as a kill, since an overloaded host or a crash of anything fails
them too (tests/core/verdict.py).
`door` is the front door whose cells run the mutant's classes (tools/matrix.bzl FRONT_DOORS): "http", vLLM's
OpenAI server, for most; an in-process door ("llm", "async_llm": tools/launcher/door_host.py) for a mutant of
code only that door runs (doors.py), whose killing classes must run through that door (tools/matrix.py
door_classes). Such a mutant's target runs on that door, and its HTTP twin (tests/mutants/defs.bzl) runs the same
classes through vLLM's server under the same mutant, where it must be applied, never reached, and every class
pass: the defect is the door's own.

"""

import dataclasses
import importlib

ENV = "SLEEPWAKE_MUTANT"
ACTIVATION = "sleepwake-mutant active: {name} (pid {pid})"
NO_MUTANT = "sleepwake-mutant: none active (pid {pid})"
REACHED = "sleepwake-mutant reached: {name} (pid {pid})"  # shared.py prints it (kept here: the harness reads it)
HANG, ERROR_ANSWER = "hang", "error answer"  # what a defect is, for its liveness oracles (fails_as)
HTTP = "http"  # vLLM's OpenAI server: the door of every mutant but those of doors.py (matrix.bzl FRONT_DOORS)
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    issue: str
    doc: str
    kills: dict  # class short name -> tuple of oracle ids
    patch: str  # "module:function" of this package
    # Thresholds the defect is sized against; () where the oracle is exact (token ids, flags, held
    # requests, failure statuses), so that any occurrence of the defect fails it.
    bound: tuple = ()
    size: str = ""  # how big the defect is, for the mutation table
    # bound -> the value its measurement takes under the mutant on the mutants' cell (MRV2-eager): a
    # typical healthy value (thresholds.py sources) plus what the patch adds, 1.5 times the bound
    # (tests/mutants/unit/catalogue_unit_test.py checks 1.4x-1.6x).
    expected: dict = dataclasses.field(default_factory=dict)
    fails_as: tuple = ()  # HANG and/or ERROR_ANSWER: the defect is one, its liveness oracles may kill it
    door: str = HTTP  # the front door whose cells run its classes; another than HTTP: code only that door runs

    def apply(self) -> None:
        importlib.import_module(f"{__package__}.shared").applying(self.name)
        module, function = self.patch.split(":")
        getattr(importlib.import_module(f"{__package__}.{module}"), function)()


# The numbers behind `expected`, typical healthy values on MRV2-eager from thresholds.py sources: awake
# ~3.6 GB of NVML bytes, 0.86 GB resident at level 1, a 2 GiB KV cache in 6 per-layer allocations, a
# weights-only wake at 0.38 of awake with the 0.50 GB checkpoint mapped 5% over, a full wake coming back
# 354 MiB short (torch's emptied cache), 1.33 x the KV cache freed at the first device-wide reading,
# a level-1 host copy of 1.48 x the checkpoint, sleep/wake/staged/cycle medians 0.02/0.03/0.06/0.1 s,
# an aborted stream's end at most 0.043 s after /sleep?mode=abort (abort_s_max's noise record).
_AWAKE, _ASLEEP, _KV, _W = 3.6e9, 0.86e9, 2 * GiB, 498641000


def _kv_kept(fraction):
    """Whole per-layer allocations (6) holding `fraction` of the KV cache."""
    return round(fraction * 6) / 6 * _KV


MUTANTS = {
    m.name: m
    for m in [
        # A request run on unmapped memory crashes a GPU's engine (an illegal address, seen on the H200), so
        # the requests held then end in 5xx answers of a dead engine: the defect shows as an error answer too.
        Mutant(
            "resume_on_partial_wake",
            "#44483 (reverted), #44395",
            "Scheduling resumes after a weights-only wake: requests run on the unmapped KV cache.",
            {"scheduler_gate": ("requests.held_until_resident", "api.status")},
            "scheduling:resume_on_partial_wake",
            size="a held request runs at once",
            fails_as=(ERROR_ANSWER,),
        ),
        Mutant(
            "prefix_cache_kept",
            "#17103, #22726",
            "Sleep does not reset the prefix cache: prompts hit blocks whose memory was discarded.",
            {"output_correctness": ("prefix_cache.reset_after_discard",)},
            "scheduling:prefix_cache_kept",
            size="every cached block survives a level-1 sleep",
        ),
        Mutant(
            "prefix_cache_reset_on_level0",
            "level 0 (pause only)",
            "A level-0 sleep resets the prefix cache, as if it had discarded the KV cache.",
            {"prefix_cache_levels": ("prefix_cache.kept_at_level0",)},
            "scheduling:prefix_cache_reset_on_level0",
            size="every cached block lost at level 0",
        ),
        Mutant(
            "reload_weights_noop",
            "#29341, #54235",
            "collective_rpc reload_weights does nothing: level 2 wakes into garbage weights.",
            {"output_correctness": ("output.golden_tokens",), "physical_memory": ("output.golden_tokens",)},
            "weights:reload_weights_noop",
            size="no weight reloaded",
        ),
        Mutant(
            "reload_ignores_weights_path",
            "weight sync (RL weight update)",
            "reload_weights drops weights_path and reloads the checkpoint the server started on: a pushed "
            "checkpoint never arrives.",
            {"weight_sync": ("weights.pushed_checkpoint_golden",)},
            "weights:reload_ignores_weights_path",
            size="the whole push lost",
        ),
        Mutant(
            "push_loads_wrong_file",
            "weight sync (RL weight update: a resolver that maps the pushed path to a stale copy)",
            "A push of weights_path loads a wrong file, the same one every time: the served tokens are neither "
            "checkpoint's. Goldens taken from the server under test after a push would agree with it; the "
            "walk's come from the golden actions.",
            {"state_walk": ("weights.pushed_checkpoint_golden",), "weight_sync": ("weights.pushed_checkpoint_golden",)},
            "weights:push_loads_wrong_file",
            size="the pushed output projection's rows rolled by one",
        ),
        Mutant(
            "host_copy_predates_update",
            "weight sync (stale host copy)",
            "Each wake restores the output projection as it was before the last push: the weights come back "
            "from a host copy taken before the update.",
            {"weight_sync": ("weights.pushed_checkpoint_golden",)},
            "weights:host_copy_predates_update",
            size="lm_head reverts to the old checkpoint at each wake",
        ),
        Mutant(
            "leak_per_wake",
            "#21336, #36651",
            "Each wake leaks 3 MiB of GPU memory (NVML shows two 2 MiB granules).",
            {"memory_leak_cycle": ("device_bytes.leak_per_cycle",)},
            "device_memory:leak_per_wake",
            bound=("leak_bytes_per_cycle_max",),
            size="3 MiB a wake",
            expected={"leak_bytes_per_cycle_max": 3 * MiB},
        ),
        Mutant(
            "leak_once",
            "#21336 (a pool that grows once)",
            "The fifth wake leaks 3 MiB of GPU memory, once.",
            {"memory_leak_cycle": ("device_bytes.cycle_spread",)},
            "device_memory:leak_once",
            bound=("cycle_bytes_flat_max",),
            size="3 MiB once, at the 5th wake",
            expected={"cycle_bytes_flat_max": 3 * MiB},
        ),
        Mutant(
            "kv_cache_kept_on_sleep",
            "#11743, #47654",
            "Level-1 sleep does not release the KV cache.",
            {"physical_memory": ("device_bytes.level1_asleep", "device_bytes.level1_freed_kv")},
            "device_memory:kv_cache_kept_on_sleep",
            size="the whole 2 GiB KV cache",
        ),
        Mutant(
            "kv_cache_partly_kept",
            "#47654, #32714 (partially freed)",
            "Sleep releases only part of the KV cache: 3 of its 6 per-layer allocations stay mapped.",
            {"physical_memory": ("device_bytes.level1_asleep",)},
            "device_memory:kv_cache_partly_kept",
            bound=("level1_bytes_fraction_max",),
            size="half the KV cache (3 of 6 layers, 1.07 GB) kept",
            expected={"level1_bytes_fraction_max": (_ASLEEP + _kv_kept(0.5)) / _AWAKE},
        ),
        Mutant(
            "kv_cache_mostly_kept",
            "#47654 (partially freed)",
            "Level-1 sleep releases only a third of the KV cache: 4 of its 6 per-layer allocations stay mapped.",
            {"physical_memory": ("device_bytes.level1_freed_kv",)},
            "device_memory:kv_cache_mostly_kept",
            bound=("sleep_freed_kv_fraction_min",),
            size="two thirds of the KV cache (1.43 GB) kept",
            expected={"sleep_freed_kv_fraction_min": (_AWAKE - _ASLEEP - _kv_kept(2 / 3)) / _KV},
        ),
        Mutant(
            "kv_cache_partly_kept_level2",
            "#32714 (level 2 partially freed)",
            "Level-2 sleep releases only half of the KV cache; level 1 is right.",
            {"physical_memory": ("device_bytes.level2_asleep",)},
            "device_memory:kv_cache_partly_kept_level2",
            bound=("level2_bytes_fraction_max",),
            size="half the KV cache kept at level 2",
            expected={"level2_bytes_fraction_max": (_ASLEEP + _kv_kept(0.5)) / _AWAKE},
        ),
        Mutant(
            "weights_wake_maps_extra",
            "#44483 (a weights wake that maps more than the weights)",
            "A weights-only wake maps 1.23 GiB more than the weights (released by the kv_cache wake).",
            {"physical_memory": ("device_bytes.weights_wake_fraction",)},
            "device_memory:weights_wake_maps_extra",
            bound=("weights_wake_bytes_fraction_max",),
            size="+1.23 GiB at a weights-only wake",
            expected={"weights_wake_bytes_fraction_max": 0.38 + 1.23 * GiB / _AWAKE},
        ),
        Mutant(
            "weights_wake_maps_more",
            "#44483 (a weights wake that maps more than the weights)",
            "A weights-only wake maps 83 MiB (17% of the checkpoint) more than the weights.",
            {"physical_memory": ("device_bytes.weights_wake_mapped",)},
            "device_memory:weights_wake_maps_more",
            bound=("weights_wake_bytes_rel_error_max",),
            size="+83 MiB at a weights-only wake",
            expected={"weights_wake_bytes_rel_error_max": 0.05 + 83 * MiB / _W},
        ),
        Mutant(
            "wake_maps_extra",
            "#21336 (a wake that maps more than it unmapped)",
            "A full wake maps 384 MiB more than the sleep released, until the next sleep.",
            {"physical_memory": ("device_bytes.wake_growth",)},
            "device_memory:wake_maps_extra",
            bound=("wake_restore_bytes_max",),
            size="+384 MiB after each full wake",
            expected={"wake_restore_bytes_max": 384 * MiB},
        ),
        Mutant(
            "wake_leaves_unmapped",
            "#32714 (a pool not mapped back)",
            "A full wake leaves 246 MiB of the server's memory unmapped until the next forward pass.",
            {"physical_memory": ("device_bytes.wake_shortfall",)},
            "device_memory:wake_leaves_unmapped",
            bound=("wake_shortfall_bytes_max",),
            size="246 MiB missing after a wake (eager: 354 MiB on top)",
            expected={"wake_shortfall_bytes_max": (354 + 246) * MiB},
        ),
        Mutant(
            "residue_grows",
            "#45648 (memory level 1 leaves resident)",
            "716 MiB of device memory outside the pools from start-up on: resident at level 1, like a "
            "CUDA-graph pool level 1 does not release.",
            {"physical_memory": ("device_bytes.level1_residue",)},
            "device_memory:residue_grows",
            bound=("level1_residue_bytes_max",),
            size="+716 MiB resident",
            expected={"level1_residue_bytes_max": _ASLEEP + 716 * MiB},
        ),
        Mutant(
            "late_release",
            "sleep answers before the memory is freed",
            "/sleep answers with 1.4 GiB still held, released one second later.",
            {"immediacy": ("device_bytes.freed_at_sleep_answer",)},
            "device_memory:late_release",
            bound=("sleep_freed_immediate_kv_fraction_min",),
            size="1.4 GiB released 1 s late",
            expected={"sleep_freed_immediate_kv_fraction_min": 1.33 - 1434 * MiB / _KV},
        ),
        Mutant(
            "late_remap",
            "wake answers before the memory is back",
            "/wake_up answers with 192 MiB of the server's memory still unmapped; it comes back with the "
            "next forward pass.",
            {"immediacy": ("device_bytes.restored_at_wake_answer",)},
            "device_memory:late_remap",
            bound=("wake_shortfall_immediate_bytes_max",),
            size="192 MiB mapped after the answer",
            expected={"wake_shortfall_immediate_bytes_max": 192 * MiB},
        ),
        Mutant(
            "late_restore",
            "wake answers before the weights are back",
            "/wake_up from level 1 answers with the output projection zeroed; its values come back one second later.",
            {"immediacy": ("output.golden_tokens",)},
            "weights:late_restore",
            size="lm_head restored 1 s after the answer",
        ),
        Mutant(
            "level2_keeps_host_copy",
            "level 2 (discard) vs level 1 (offload)",
            "Level 2 backs the weights up to host memory like level 1: output and GPU memory are right, "
            "the host RAM a trainer needs is not given back.",
            {"host_memory": ("host_bytes.level2_asleep",)},
            "host:level2_keeps_host_copy",
            size="the whole weight copy (0.5-1 GB) held at level 2",
        ),
        Mutant(
            "level2_pins_host",
            "level 2 (discard) holding host memory",
            "Each level-2 sleep pins 16.5 MiB of host memory, released by the wake.",
            {"host_memory": ("host_bytes.level2_asleep",)},
            "host:level2_pins_host",
            bound=("level2_host_bytes_max",),
            size="16.5 MiB pinned while asleep at level 2",
            expected={"level2_host_bytes_max": 16.5 * MiB},
        ),
        Mutant(
            "host_copy_leaked",
            "host copy kept after wake",
            "The host copy of the weights stays referenced after the wake, so every level-1 sleep pins a new one.",
            {"host_memory": ("host_bytes.leak_per_cycle",)},
            "host:host_copy_leaked",
            size="the whole weight copy (0.5-1 GB) a cycle",
        ),
        Mutant(
            "host_copy_partial",
            "weights not backed up (garbage after wake)",
            "A level-1 sleep backs up only 54% of the weights' bytes and discards the rest.",
            {"host_memory": ("host_bytes.level1_copy_min",)},
            "host:host_copy_partial",
            bound=("host_copy_weights_ratio_min",),
            size="46% of the weights not copied",
            expected={"host_copy_weights_ratio_min": 1.48 * 0.54},
        ),
        Mutant(
            "host_copy_twice",
            "a second host copy",
            "The first level-1 sleep pins 580 MiB of host memory beside the weights' copy, released by the wake.",
            {"host_memory": ("host_bytes.level1_copy_max",)},
            "host:host_copy_twice",
            bound=("host_copy_weights_ratio_max",),
            size="+580 MiB pinned at the first level-1 sleep",
            expected={"host_copy_weights_ratio_max": 1.48 + 580 * MiB / _W},
        ),
        Mutant(
            "pinned_leak_per_sleep",
            "pinned host memory leak",
            "Each sleep leaks 48 KiB of pinned host memory.",
            # A leak at every sleep also shows in the level-2 test's host bytes (the fake's model-sized one does).
            {"host_memory": ("host_bytes.leak_per_cycle", "host_bytes.level2_asleep")},
            "host:pinned_leak_per_sleep",
            bound=("host_leak_bytes_per_cycle_max",),
            size="48 KiB pinned a sleep",
            expected={"host_leak_bytes_per_cycle_max": 48 * KiB},
        ),
        Mutant(
            "pinned_jump_once",
            "pinned host memory that grows once",
            "The fifth sleep pins 480 KiB of host memory and keeps it.",
            {"host_memory": ("host_bytes.cycle_spread",)},
            "host:pinned_jump_once",
            bound=("host_cycle_flat_max",),
            size="480 KiB pinned once, at the 5th sleep",
            expected={"host_cycle_flat_max": (480 + 48) * KiB},
        ),
        Mutant(
            "is_sleeping_false_partial",
            "#44483",
            "/is_sleeping reports false while a tag (or the scheduler) is still asleep.",
            {"flags": ("flags.is_sleeping",)},
            "scheduling:is_sleeping_false_partial",
            size="the flag wrong in every partial state",
        ),
        Mutant(
            "gauge_not_updated",
            "vllm:engine_sleep_state",
            "The sleep-state gauge is not updated by /sleep.",
            {"flags": ("flags.gauge",)},
            "scheduling:gauge_not_updated",
            size="the gauge reads awake at every level",
        ),
        Mutant(
            "slow_sleep",
            "sleep latency",
            "Sleep takes 0.58 s longer.",
            {"latency": ("latency.sleep",)},
            "timing:slow_sleep",
            bound=("sleep_s_max",),
            size="+0.58 s a sleep",
            expected={"sleep_s_max": 0.02 + 0.58},
        ),
        Mutant(
            "slow_wake",
            "#45648",
            "A full wake takes 0.42 s longer.",
            {"latency": ("latency.wake",)},
            "timing:slow_wake",
            bound=("wake_s_max",),
            size="+0.42 s a full wake",
            expected={"wake_s_max": 0.03 + 0.42},
        ),
        Mutant(
            "slow_staged_wake",
            "#45648 (staged wake)",
            "Each tagged wake (weights or kv_cache) takes 0.195 s longer; a full wake is unchanged.",
            {"latency": ("latency.staged_wake",)},
            "timing:slow_staged_wake",
            bound=("staged_wake_s_max",),
            size="+0.195 s a tagged wake",
            expected={"staged_wake_s_max": 0.06 + 2 * 0.195},
        ),
        Mutant(
            "slower_wake",
            "#45648 (beside a neighbour's start step)",
            "A full wake takes 0.70 s longer: past the bound of wakes beside a GPU neighbour's start step.",
            {"latency": ("latency.wake",)},
            "timing:slower_wake",
            bound=("wake_beside_start_s_max",),
            size="+0.70 s a full wake",
            expected={"wake_beside_start_s_max": 0.2 + 0.70},
        ),
        Mutant(
            "slower_staged_wake",
            "#45648 (staged wake, beside a neighbour's start step)",
            "Each tagged wake takes 0.345 s longer: past the bound of staged wakes beside a start step.",
            {"latency": ("latency.staged_wake",)},
            "timing:slower_staged_wake",
            bound=("staged_wake_beside_start_s_max",),
            size="+0.345 s a tagged wake",
            expected={"staged_wake_beside_start_s_max": 0.21 + 2 * 0.345},
        ),
        Mutant(
            "slow_first_request",
            "first request after a wake",
            "The first forward pass after each wake takes 2.15 s longer.",
            {"latency": ("latency.cycle",)},
            "timing:slow_first_request",
            bound=("cycle_s_max",),
            size="+2.15 s on the first forward after a wake",
            expected={"cycle_s_max": 0.1 + 2.15},
        ),
        # Its drift is computed, not measured: tests/mutants/norm_drift.py's float32 forward of checkpoint A
        # over PROMPTS' greedy tokens with weights.py's NORM_SCALE and NORM_SCALED_SHARE (weights.py says how).
        Mutant(
            "weights_perturbed",
            "#21336, #29341",
            "Weights come back slightly perturbed (the first three quarters of the final norm's weight scaled "
            "by 0.9765625): logprobs drift while greedy tokens still match.",
            {"logprobs_precision": ("output.logprob_drift",)},
            "weights:weights_perturbed",
            bound=("logprob_drift_max",),
            size="3/4 of the final norm's entries scaled by 0.9765625 (0.0153 nats worst per token)",
            expected={"logprob_drift_max": 0.0153},
        ),
        Mutant(
            "engine_dies_on_sleep_during_decode",
            "#45520",
            "/sleep during decoding kills the engine core while the endpoint still returns 200.",
            # The dead engine answers the requests sent while asleep at once (5xx, the front end kept alive:
            # VLLM_KEEP_ALIVE_ON_ENGINE_DEATH), or the next sleep-API call with a 5xx, or /health 503; on the
            # H200 the /sleep itself never answered (its utility call died with the engine).
            {"concurrent_race": ("requests.held_while_asleep", "api.status", "api.answers", "server.healthy")},
            "scheduling:engine_dies_on_sleep_during_decode",
            size="the engine dies",
            fails_as=(HANG, ERROR_ANSWER),
        ),
        Mutant(
            "wake_awake_tag_aborts",
            "#31618",
            "Waking an engine that is awake fails the call instead of being a no-op.",
            {"error_paths": ("api.status",)},
            "scheduling:wake_awake_tag_aborts",
            size="HTTP 500 instead of 200",
            fails_as=(ERROR_ANSWER,),
        ),
        Mutant(
            "abort_leaves_choices_running",
            "#45326, #45520",
            "sleep?mode=abort ends an n>1 request's choices in the engine but never tells the front "
            "end: the stream stays open.",
            # vLLM's stream stays open: a hang (no answer past the completion bound); the fake's ends without the
            # finish reasons.
            {
                "abort_parallel_sampling": ("requests.abort_time", "requests.clean_end", "api.answers"),
                "state_walk": ("requests.abort_time", "requests.abort_aborts", "requests.clean_end", "api.answers"),
            },
            "scheduling:abort_leaves_choices_running",
            size="every choice's end lost",
            fails_as=(HANG,),
        ),
        Mutant(
            "sleep_drains_instead_of_aborting",
            "#45520 (sleep?mode=abort)",
            "sleep?mode=abort aborts nothing: it waits for the requests in flight to finish (mode wait), "
            "so every choice ends by length.",
            {"abort_parallel_sampling": ("requests.abort_aborts", "requests.abort_time")},
            "scheduling:sleep_drains_instead_of_aborting",
            size="no request aborted",
        ),
        # abort_s_max is a contract bound, far above its noise (docs/thresholds.md): a stream the abort ends
        # 15 s late, inside request_completion_s_max (60 s), is 1.5x it, so the kill says the bound, not the
        # hang detector, sees a late end.
        Mutant(
            "abort_delayed",
            "#45326 (the end of an aborted request reaching the client), sleep?mode=abort",
            "sleep?mode=abort aborts the requests in flight, but their abort outputs reach the front end 15 s "
            "late: the client's stream stays open that long after the sleep answered.",
            {"abort_parallel_sampling": ("requests.abort_time",)},
            "timing:abort_delayed",
            bound=("abort_s_max",),
            size="+15 s from /sleep?mode=abort to the stream's end",
            expected={"abort_s_max": 0.043 + 15.0},
        ),
        # As resume_on_partial_wake: on a GPU the request run on unmapped memory may crash the engine.
        Mutant(
            "request_runs_while_asleep",
            "#45326, #44395",
            "A request sent while the engine sleeps is scheduled at once, onto unmapped weights and KV "
            "cache, instead of being held until the wake.",
            {"concurrent_race": ("requests.held_while_asleep", "api.status")},
            "scheduling:request_runs_while_asleep",
            size="every request sent while asleep runs",
            fails_as=(ERROR_ANSWER,),
        ),
        # --- only the state walk reaches these (walk.py): a contract broken on a pair of operations no other
        # class combines ----------------------------------------------------------------------------------
        Mutant(
            "sleep_while_paused_keeps_prefix_cache",
            "#17103 (a sleep during a level-0 pause)",
            "A sleep of level >= 1 that finds the scheduler paused by a level-0 sleep skips the prefix-cache "
            "reset: blocks of the discarded KV cache are served as hits after the wake.",
            {"state_walk": ("prefix_cache.hit_iff_cached",)},
            "walk:sleep_while_paused_keeps_prefix_cache",
            size="every cached block survives level 0 then level 1",
        ),
        Mutant(
            "gauge_sticky_while_asleep",
            "vllm:engine_sleep_state (a sleep while asleep)",
            "A /sleep that finds the engine asleep leaves the gauge at the earlier level.",
            {"state_walk": ("flags.gauge",)},
            "walk:gauge_sticky_while_asleep",
            size="the gauge one level behind",
        ),
        Mutant(
            "wait_mode_aborts",
            "#45520 (sleep?mode=wait)",
            "sleep?mode=wait aborts the requests in flight instead of letting them finish.",
            {"state_walk": ("requests.clean_end", "requests.ends_in_race")},
            "walk:wait_mode_aborts",
            size="every request in flight aborted",
        ),
        Mutant(
            "level0_wait_freezes",
            "level 0 with mode wait",
            "A level-0 sleep with mode wait freezes the requests in flight (mode keep) instead of draining them.",
            {"state_walk": ("requests.ends_in_race",)},
            "walk:level0_wait_freezes",
            size="the drain never happens",
        ),
        Mutant(
            "level0_abort_freezes",
            "level 0 with mode abort",
            "A level-0 sleep with mode abort freezes the requests in flight (mode keep) instead of aborting them.",
            {"state_walk": ("requests.abort_time", "api.answers")},
            "walk:level0_abort_freezes",
            size="no request aborted",
            fails_as=(HANG,),  # the frozen request never ends while the engine stays paused
        ),
        Mutant(
            "reset_prefix_cache_fails_asleep",
            "/reset_prefix_cache while asleep",
            "/reset_prefix_cache answers success=false while the engine sleeps.",
            {"state_walk": ("api.reset_prefix_cache_result",)},
            "walk:reset_prefix_cache_fails_asleep",
            size="the reset refused",
        ),
        Mutant(
            "reset_prefix_cache_noop",
            "/reset_prefix_cache",
            "/reset_prefix_cache reports success and keeps every cached block.",
            {"state_walk": ("prefix_cache.hit_iff_cached",)},
            "walk:reset_prefix_cache_noop",
            size="no block reset",
        ),
        # The weights wake that follows maps their pool a second time: a CUDA error, HTTP 500.
        Mutant(
            "kv_wake_maps_weights",
            "#44483 (a KV-cache-first wake)",
            "wake_up(tags=kv_cache) while the weights sleep maps the weights' pool too.",
            {"state_walk": ("device_bytes.kv_wake_weights_unmapped", "api.status")},
            "walk:kv_wake_maps_weights",
            size="the weights mapped a wake early",
            fails_as=(ERROR_ANSWER,),
        ),
        Mutant(
            "kv_wake_maps_nothing",
            "#44483 (a KV-cache-first wake)",
            "wake_up(tags=kv_cache) while the weights sleep maps nothing and reports success.",
            {"state_walk": ("device_bytes.kv_wake_mapped",)},
            "walk:kv_wake_maps_nothing",
            size="the KV cache left unmapped",
        ),
        Mutant(
            "sleep_during_partial_wake_sleeps_again",
            "#31618 (a sleep during a partial wake)",
            "A sleep while one tag is awake again puts the executor to sleep once more instead of being a no-op.",
            # The woken pool unmapped again shows in that state's bytes, or vLLM refuses (a 5xx).
            {
                "state_walk": (
                    "api.status",
                    "flags.is_sleeping",
                    "device_bytes.weights_wake_mapped",
                    "device_bytes.kv_wake_mapped",
                )
            },
            "walk:sleep_during_partial_wake_sleeps_again",
            size="the woken pool unmapped again",
            fails_as=(ERROR_ANSWER,),
        ),
        Mutant(
            "reload_resumes_scheduling",
            "#44483 (a reload during a level-0 pause)",
            "collective_rpc reload_weights resumes scheduling, also during a level-0 pause.",
            {"state_walk": ("flags.is_sleeping",)},
            "walk:reload_resumes_scheduling",
            size="the pause ends at the reload",
        ),
        # --- the walk's newer regions (waiting.py, walk.py): requests sent while paused or asleep, pause modes
        # while paused, keep with a request in flight at level >= 1, a request arriving during a wait drain,
        # two-tag and tag+scheduling wakes, a reload over cached blocks ------------------------------------
        Mutant(
            "abort_spares_waiting",
            "#51476 (requests admitted while paused), core.py pause_scheduler",
            "sleep?mode=abort aborts only the running requests: those waiting in the scheduler (sent while "
            "paused, or preempted by a keep) stay queued and run after the wake, on whatever weights then serve.",
            {"state_walk": ("requests.abort_time", "requests.abort_aborts", "api.answers")},
            "waiting:abort_spares_waiting",
            size="every waiting request outlives the abort",
            fails_as=(HANG,),  # a spared request waits for a wake the walk sends only once it ended: no answer
        ),
        Mutant(
            "paused_new_admits_waiting",
            "#51476, #34125 (PAUSED_NEW), scheduler.py schedule",
            "An abort or wait pause (PAUSED_NEW) schedules the waiting queue: a request sent while paused runs "
            "at once, onto unmapped pools while asleep.",
            {
                "state_walk": (
                    "requests.held_while_paused",
                    "requests.held_until_resident",
                    "requests.held_while_asleep",
                )
            },
            "waiting:paused_new_admits_waiting",
            size="every request sent during an abort or wait pause runs",
        ),
        Mutant(
            "drain_admits_late_arrivals",
            "#34125 (mode wait), scheduler.py schedule",
            "While a wait sleep drains the running requests, the waiting queue is scheduled too: a request "
            "arriving during the drain runs before the sleep answers.",
            {"state_walk": ("requests.held_while_paused", "requests.held_while_asleep")},
            "waiting:drain_admits_late_arrivals",
            size="every request arriving during a drain runs",
        ),
        Mutant(
            "keep_without_preemption",
            "#34382 (reverted), #57970",
            "A level >= 1 keep's cache reset does not preempt the frozen requests: they keep their blocks, "
            "whose KV the sleep discards (after the wake they decode on it), and the prefix-cache reset is "
            "refused while they hold them.",
            {
                "state_walk": (
                    "prefix_cache.hit_iff_cached",
                    "api.reset_prefix_cache_result",
                    "prefix_cache.kept_paused_request",
                    "requests.held_while_asleep",
                    "requests.held_until_resident",
                )
            },
            "waiting:keep_without_preemption",
            size="the frozen requests keep stale blocks, no reset",
        ),
        Mutant(
            "scheduling_tag_resumes",
            "#44395, #44406 (a wake naming scheduling)",
            "A wake naming scheduling (alone or beside a tag) resumes scheduling while a tag still sleeps: "
            "the waiting requests run on unmapped memory.",
            # On a GPU the requests it lets run read unmapped memory and kill the engine (the H200: every
            # shard, docs/walk-reach.md): a 5xx, or no answer, is the defect's own symptom there, which
            # counts only against the walk's control run alike (fails_as); the CPU tiers see the request run.
            # Where the door has /is_paused, the walk reads the pause lifted right after the wake, before any
            # request runs (flags.is_paused: the fake tier's first kill in every shard).
            {
                "state_walk": (
                    "requests.held_while_asleep",
                    "requests.held_until_resident",
                    "flags.is_paused",
                    "api.status",
                    "api.answers",
                )
            },
            "waiting:scheduling_tag_resumes",
            size="scheduling resumed at every scheduling wake",
            fails_as=(HANG, ERROR_ANSWER),
        ),
        Mutant(
            "wake_aborts_queued",
            "#51476, #51488 (requests queued while paused)",
            "The wake that resumes scheduling aborts the requests queued while paused instead of running them.",
            {
                "state_walk": (
                    "output.golden_tokens",
                    "weights.pushed_checkpoint_golden",
                    "output.finish_length",
                    "output.seeded_sampling",
                    "requests.clean_end",
                )
            },
            "waiting:wake_aborts_queued",
            size="every queued request aborted at the wake",
        ),
        Mutant(
            "keep_reset_aborts_frozen",
            "#34382, #32351 (keep at level >= 1)",
            "A level >= 1 keep's cache reset aborts the frozen requests instead of preempting them: they end "
            "with the sleep instead of resuming after the wake.",
            {"state_walk": ("requests.held_while_asleep",)},
            "waiting:keep_reset_aborts_frozen",
            size="every frozen request aborted",
        ),
        Mutant(
            "preempted_restarts_output",
            "#16832, #5349 (recompute after preemption)",
            "A request a keep's cache reset preempted is recomputed from its prompt alone: the tokens it "
            "streamed before the sleep are generated again after the wake.",
            {"state_walk": ("prefix_cache.kept_paused_request", "output.finish_length", "requests.resumes_after_keep")},
            "waiting:preempted_restarts_output",
            size="the streamed tokens repeated",
        ),
        Mutant(
            "reset_prefix_cache_preempts_running",
            "#34382 (reset_running_requests), #12284",
            "/reset_prefix_cache preempts the running requests so that it always resets: under a level-0 "
            "keep's frozen request it answers success=true and drops its KV.",
            {"state_walk": ("api.reset_prefix_cache_result", "prefix_cache.hit_iff_cached")},
            "waiting:reset_prefix_cache_preempts_running",
            size="the reset never refused",
        ),
        Mutant(
            "reload_resets_prefix_cache",
            "#45093 (reverted by #46125), #9744",
            "reload_weights resets the prefix cache: a reload over cached blocks leaves none.",
            {"state_walk": ("prefix_cache.hit_iff_cached",)},
            "walk:reload_resets_prefix_cache",
            size="every cached block dropped at a reload",
        ),
        Mutant(
            "two_tag_wake_maps_first_tag",
            "#15500 (wake tags), vllm-omni #4473",
            "A wake of weights and kv_cache maps only the first tag's pool but counts both awake: the KV cache "
            "stays unmapped while scheduling resumes.",
            {"state_walk": ("device_bytes.wake_shortfall",)},
            "walk:two_tag_wake_maps_first_tag",
            size="the KV cache left unmapped",
        ),
        Mutant(
            "scheduling_tag_kept",
            "#44406, core.py wake_up (scheduling beside a tag)",
            "A wake of a tag plus scheduling passes scheduling on to the executor, which ignores a call naming "
            "a tag that is not asleep: the tag stays asleep.",
            # On the H200 the weights left asleep by a weights+scheduling wake stay inside that state's band
            # (its lower bound is the checkpoint's bytes alone), and the flags or the KV cache's bytes show the
            # tag asleep; the fake's context is small enough for that lower bound to see it at the wake.
            {
                "state_walk": (
                    "device_bytes.kv_wake_mapped",
                    "flags.is_sleeping",
                    "api.kv_first_wake_after_level2",
                    "device_bytes.weights_wake_mapped",
                )
            },
            "walk:scheduling_tag_kept",
            size="tag+scheduling wakes nothing",
        ),
        Mutant(
            "pause_mode_sticky",
            "#32351, #34528 (pause modes)",
            "A sleep while paused keeps the first pause's mode: a wait sleep after a level-0 keep leaves the "
            "frozen request frozen instead of draining it.",
            {"state_walk": ("requests.ends_in_race", "requests.resumes_after_keep", "api.answers")},
            "waiting:pause_mode_sticky",
            size="the pause mode never changes while paused",
            fails_as=(HANG,),  # the request the wait sleep should drain stays frozen: no answer
        ),
        Mutant(
            "reload_aborts_requests",
            "verl / NeMo-RL abort before a weight sync, moved into the server",
            "reload_weights aborts every request, running or waiting: the requests a pause holds end at a "
            "reload instead of running after the wake.",
            {
                "state_walk": (
                    "requests.held_while_paused",
                    "requests.held_until_resident",
                    "requests.held_while_asleep",
                )
            },
            "waiting:reload_aborts_requests",
            size="every request aborted at a reload",
        ),
        Mutant(
            "staged_wake_loses_weights",
            "#21336",
            "From the third staged wake (weights, then kv_cache) on, the restored weights are lost: "
            "output is correct for two cycles, then garbage.",
            {"staged_wake_cycles": ("output.golden_tokens",)},
            "weights:staged_wake_loses_weights",
            size="lm_head zeroed from the 3rd staged wake",
        ),
        # --- the weight-update paths RL frameworks drive (pausing.py, weights.py, scheduling.py): /pause, /resume
        # and /is_paused around a push with requests frozen (rl_recipes' SkyRL fully async test over HTTP), pushes
        # of tensors and CUDA-IPC handles that move no model path (weight_sync by push way) -----------------------
        Mutant(
            "async_pause_keep_aborts",
            "#32351 (pause mode keep); OpenRLHF ppo_trainer_async.py partial rollout, SkyRL fully async "
            "(pause_generation(mode='keep') around a weight update)",
            "AsyncLLM.pause_generation(mode='keep') aborts the requests in flight instead of freezing them: a "
            "rollout frozen for a weight update ends instead of resuming.",
            {"rl_recipes": ("requests.held_while_paused", "requests.resumes_after_keep")},
            "pausing:async_pause_keep_aborts",
            size="every frozen request aborted",
        ),
        Mutant(
            "async_is_paused_false",
            "/is_paused (vLLM 0.26.0 entrypoints/serve/dev/rlhf/api_router.py is_paused); SkyRL's and "
            "OpenRLHF's pause before a weight update",
            "AsyncLLM.is_paused answers false without asking the engine core: /is_paused reads running while "
            "/pause holds every request.",
            {"rl_recipes": ("flags.is_paused",)},
            "pausing:async_is_paused_false",
            size="the flag false in every paused state",
        ),
        Mutant(
            "async_resume_does_nothing",
            "#51476, #51488 (requests queued while paused); /resume after a weight update (SkyRL, OpenRLHF)",
            "AsyncLLM.resume_generation answers without resuming the scheduler: after /resume the frozen and "
            "queued requests never run, and /is_paused stays true.",
            {"rl_recipes": ("flags.is_paused", "api.resume_while_asleep")},
            "pausing:async_resume_does_nothing",
            size="no /resume resumes",
        ),
        Mutant(
            "async_pause_ignores_clear_cache",
            "the /pause docstring's clear_cache 'Ignored when mode=\"keep\"' (entrypoints/serve/dev/rlhf/"
            "api_router.py) made code; #32351; SkyRL fully async pauses with clear_cache=false",
            "AsyncLLM.pause_generation(mode='keep') ignores the caller's clear_cache=false: the caches are reset "
            "(the default), so the frozen requests lose their KV and the prefix cache is emptied.",
            {"rl_recipes": ("prefix_cache.kept_at_level0",)},
            "pausing:async_pause_ignores_clear_cache",
            size="every keep pause clears the caches",
        ),
        Mutant(
            "wake_reloads_model_path",
            "TRL #5312 (reload_weights after a tensor push reverts to the disk checkpoint), vLLM #29341 "
            "(TRL's work-around), TRL PR #5313",
            "Worker.wake_up reloads the woken weights from the model path: invisible after a disk push, which "
            "moves that path, but each wake after a tensor or CUDA-IPC push reverts to the checkpoint the server "
            "started on.",
            {"weight_sync": ("weights.pushed_checkpoint_golden",)},
            "weights:wake_reloads_model_path",
            size="every weights wake reloads the model path",
        ),
        # While B's norm weights were A's bytes (all 1.0) a push into an intact pool (levels 0 and 1, a pause, an
        # in-flight update) served B exactly under this mutant; only pools a level-2 sleep had discarded showed it.
        # B's seeded norm weights (tools/checkpoints/BUILD.bazel) make every push show it.
        Mutant(
            "push_skips_norms",
            "a partial weight sync that leaves the norm gammas at the previous step's (tenstorrent/tt-metal "
            "#53224's review: Qwen3 q_norm/k_norm skipped by a transfer); TRL #5937 (a delta sync that sends "
            "only what it deems changed)",
            "Every load_weights after start-up, a push of any way or a reload, loads the matrices and drops the "
            "1-D tensors (the RMSNorm weights, Qwen3's q_norm and k_norm among them): the server serves the "
            "pushed checkpoint's matrices with the old checkpoint's norm weights.",
            {"weight_sync": ("weights.pushed_checkpoint_golden",)},
            "weights:push_skips_norms",
            size="every 1-D tensor of every push and reload",
        ),
        Mutant(
            "level2_skips_buffer_save",
            "#16564, fixed by #16889 (level-2 wake loses the model buffers)",
            "Worker.sleep(level=2) does not save the model buffers (RoPE's cos_sin_cache) before the weights pool "
            "is discarded: neither a push nor a reload brings them back, so every level-2 wake serves garbage.",
            # The lost RoPE cache moves every logprob while the greedy ids may hold: on the GPU the token
            # ids matched the pushed golden and output.logprob_drift caught it; the fake moves the ids.
            {"weight_sync": ("weights.pushed_checkpoint_golden", "output.logprob_drift")},
            "weights:level2_skips_buffer_save",
            size="every buffer lost at each level-2 sleep",
        ),
        # The wake of a resident pool maps its allocations again: cuMemMap refuses (as the pinned
        # full_wake_remaps_resident_pool shows on the H200), an error answer.
        Mutant(
            "executor_wake_skips_tag_guard",
            "vllm-omni #4473 (a duplicate wake re-maps live memory; fix #4834); TRL's second wake_up(['weights']) "
            "in generate()",
            "Executor.wake_up does not check that each tag still sleeps: a wake of a resident pool (TRL's and "
            "OpenRLHF's second weights wake) reaches the workers, which map it again.",
            {"state_walk": ("api.status",)},
            "scheduling:executor_wake_skips_tag_guard",
            size="every wake of a resident tag reaches the workers",
            fails_as=(ERROR_ANSWER,),
        ),
        Mutant(
            "sleep_skips_scheduler_pause",
            "#28714, #45520 (sleep with requests in flight); verl's worker-level sleep (PR #6456)",
            "EngineCore.sleep at level >= 1 sleeps the executor without pausing the scheduler, as a worker-level "
            "collective_rpc sleep does: nothing is aborted or held, and the prefix cache keeps blocks whose KV "
            "the sleep discards.",
            {"output_correctness": ("prefix_cache.reset_after_discard",)},
            "scheduling:sleep_skips_scheduler_pause",
            size="no pause, no cache reset at any level >= 1",
        ),
        # --- code only an in-process front door runs (doors.py): the offline door vllm.LLM and its LLMEngine,
        # killed in that door's cells, applied and never reached over HTTP (each one's _http twin) ------------
        Mutant(
            "llm_wake_up_drops_tags",
            "#34528 (LLM.wake_up tags); TRL's colocate refit (trl #4571, #29341): wake the weights, reload, then "
            "the KV cache",
            "LLM.wake_up(tags) wakes every pool whatever the tags (LLMEngine.wake_up): a trainer's wake of the "
            "weights alone maps the KV cache too and resumes scheduling before the weights are reloaded.",
            {"flags": ("flags.is_sleeping",)},
            "doors:llm_wake_up_drops_tags",
            size="every tagged wake a full wake",
            door="llm",
        ),
        Mutant(
            "llm_sleep_ignores_level",
            "#34528 (LLM.sleep level); the level-2 refit recipe",
            "LLM.sleep(level=2) sleeps at level 1 (LLMEngine.sleep): the weights are copied to host memory instead "
            "of discarded, so the host RAM a trainer needs stays held, and the gauge reports level 1.",
            {"flags": ("flags.gauge",)},
            "doors:llm_sleep_ignores_level",
            size="every level-2 sleep a level-1 sleep",
            door="llm",
        ),
        Mutant(
            "llm_is_sleeping_stale",
            "#44483 (/is_sleeping after a partial wake), #14311 (a caller's record standing in for is_sleeping)",
            "LLMEngine.is_sleeping, which TRL reads (llm.llm_engine.is_sleeping()), answers from the front end's "
            "record of its last sleep or wake call instead of asking the engine core: after a wake of the weights "
            "alone it reads awake while the KV cache sleeps.",
            {"flags": ("flags.is_sleeping",)},
            "doors:llm_is_sleeping_stale",
            size="the flag wrong after every partial wake",
            door="llm",
        ),
        Mutant(
            "llm_collective_rpc_drops_kwargs",
            "weight sync through LLM.collective_rpc (#12084; #31943: LLM.update_weights sends its update_info as "
            "kwargs; trl #4571's reload_weights)",
            "LLMEngine.collective_rpc drops the keyword arguments: reload_weights(weights_path=B) reloads the "
            "checkpoint the workers last loaded, so a pushed checkpoint never arrives.",
            {"weight_sync": ("weights.pushed_checkpoint_golden",)},
            "doors:llm_collective_rpc_drops_kwargs",
            size="every RPC's keyword arguments lost",
            door="llm",
        ),
        Mutant(
            "llm_sleep_skips_gauge",
            "#27788, #27867 (vllm:engine_sleep_state through LLM.sleep)",
            "LLMEngine.sleep does not record the sleep state: the offline engine's vllm:engine_sleep_state keeps "
            "reading awake while it sleeps.",
            {"flags": ("flags.gauge",)},
            "doors:llm_sleep_skips_gauge",
            size="the gauge reads awake at every level",
            door="llm",
        ),
        # vllm.LLM as TRL's colocate mode builds it (the llm_colocate door): the engine core in the door host's
        # process, behind an InprocClient, pausing with EngineCore's own pause_scheduler.
        Mutant(
            "inproc_sleep_accepts_wait",
            "vLLM 0.26.0 v1/engine/core_client.py InprocClient.sleep ('wait' pause mode is not supported in "
            "inproc-engine mode); TRL colocate, NeMo-RL colocated (VLLM_ENABLE_V1_MULTIPROCESSING=0)",
            "The in-process engine accepts LLM.sleep(mode='wait') and runs it as abort: the requests a wait "
            "would drain are ended, and the call succeeds instead of being refused.",
            {"rl_recipes": ("api.wait_mode",)},
            "doors:inproc_sleep_accepts_wait",
            size="every wait sleep an abort sleep",
            door="llm_colocate",
        ),
        Mutant(
            "inproc_sleep_keeps_prefix_cache",
            "#17103, #22726 (prefix cache not reset by sleep) on the in-process engine (EngineCore.pause_scheduler, "
            "which only it runs); TRL's own reset_prefix_cache after each sync",
            "The in-process engine's pause never clears the caches: a level >= 1 sleep of the engine TRL "
            "colocates keeps prefix-cache entries for KV blocks it discards.",
            {"output_correctness": ("prefix_cache.reset_after_discard",)},
            "doors:inproc_sleep_keeps_prefix_cache",
            size="every cached block survives a level >= 1 sleep",
            door="llm_colocate",
        ),
    ]
}
