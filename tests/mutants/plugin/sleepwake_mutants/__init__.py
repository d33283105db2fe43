"""Mutants of vLLM 0.26.0's sleep mode: each re-introduces one catalogued bug, as a vLLM general plugin.

vLLM loads every `vllm.general_plugins` entry point in each of its processes (API server, engine core,
workers), so a patch applied by `register()` is live wherever the real code runs; no file of vLLM is
edited. The mutant is chosen per server by the SLEEPWAKE_MUTANT environment variable, which the
server inherits from the test. Every process that applies one prints ACTIVATION to stderr (the
server log), so a harness can tell "killed by the suite" from "never applied".

This module is the catalogue and must import without vLLM and without its sibling modules (the harness,
CPU unit tests and tools/mutation_table.py read MUTANTS, the last one from this file alone): each entry
names its patch as "module:function" of this package, imported by `register()` only, and the patch
imports vLLM inside its function. `kills` maps the matrix class short names expected to kill the mutant
to a regex their failure text must match: the failure must be the oracle that guards that bug, not any
failure. `bound`, `size` and `expected` say how big the defect is against the thresholds that should
catch it (tests/sleep_wake/lib/thresholds.py), so a kill also says how sensitive those bounds are.
"""

import dataclasses
import importlib
import os
import sys

ENV = "SLEEPWAKE_MUTANT"
ACTIVATION = "sleepwake-mutant active: {name} (pid {pid})"
NO_MUTANT = "sleepwake-mutant: none active (pid {pid})"
_applied = []  # register() may run several times per process (vLLM loads plugins from several places)
MiB = 1 << 20
GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    issue: str
    doc: str
    kills: dict
    patch: str  # "module:function" of this package
    # Thresholds the defect is sized against; () where the oracle is exact (token ids, flags, held
    # requests, failure statuses), so that any occurrence of the defect fails it.
    bound: tuple = ()
    size: str = ""  # how big the defect is, for the mutation table
    # bound -> the value its measurement takes under the mutant on the mutants' cell (MRV2-eager),
    # from the H200 baselines in thresholds.py plus what the patch adds: about twice the bound, not
    # ten times (tests/mutants/catalogue_unit_test.py checks 1.5x-3x).
    expected: dict = dataclasses.field(default_factory=dict)

    def apply(self) -> None:
        module, function = self.patch.split(":")
        getattr(importlib.import_module(f"{__name__}.{module}"), function)()


# The numbers behind `expected`, from thresholds.py sources (MRV2-eager): awake ~3.6 GB of NVML bytes,
# 0.84-0.87 GB resident at level 1, a 2 GiB KV cache in 6 per-layer allocations, a full wake coming back
# 354 MiB short (torch's emptied cache), sleep and wake medians well under 0.11 s and 0.07 s.
_AWAKE, _ASLEEP, _KV = 3.6e9, 0.86e9, 2 * GiB
_KV_KEPT = 5 / 6 * _KV  # device_memory.KV_KEPT_FRACTION of the bytes, in whole per-layer allocations
_DRIFT_EXPECTED = 0.0209  # nats, for weights.NORM_SCALE (computed offline, see weights.py)

MUTANTS = {m.name: m for m in [
    Mutant("resume_on_partial_wake", "#44483 (reverted), #44395",
           "Scheduling resumes after a weights-only wake: requests run on the unmapped KV cache.",
           {"scheduler_gate": r"#44483"}, "scheduling:resume_on_partial_wake",
           size="a held request runs at once"),
    Mutant("prefix_cache_kept", "#17103, #22726",
           "Sleep does not reset the prefix cache: prompts hit blocks whose memory was discarded.",
           {"output_correctness": r"#17103/#22726"}, "scheduling:prefix_cache_kept",
           size="every cached block survives a level-1 sleep"),
    Mutant("prefix_cache_reset_on_level0", "level 0 (pause only)",
           "A level-0 sleep resets the prefix cache, as if it had discarded the KV cache.",
           {"prefix_cache_levels": r"\[level 0 keeps KV state\] expected the repeat"},
           "scheduling:prefix_cache_reset_on_level0", size="every cached block lost at level 0"),
    Mutant("reload_weights_noop", "#29341, #54235",
           "collective_rpc reload_weights does nothing: level 2 wakes into garbage weights.",
           {"output_correctness": r"#29341/#54235", "physical_memory": r"#29341/#54235"},
           "weights:reload_weights_noop", size="no weight reloaded"),
    Mutant("reload_ignores_weights_path", "weight sync (RL weight update)",
           "reload_weights drops weights_path and reloads the checkpoint the server started on: a pushed "
           "checkpoint never arrives.",
           {"weight_sync": r"\[weight sync\] after pushing checkpoint B"},
           "weights:reload_ignores_weights_path", size="the whole push lost"),
    Mutant("host_copy_predates_update", "weight sync (stale host copy)",
           "Each wake restores the output projection as it was before the last push: the weights come back "
           "from a host copy taken before the update.",
           {"weight_sync": r"\[weight sync\] after checkpoint B, then"},
           "weights:host_copy_predates_update", size="lm_head reverts to the old checkpoint at each wake"),
    Mutant("leak_per_wake", "#21336, #36651",
           "Each wake leaks 8 MiB of GPU memory.",
           {"memory_leak_cycle": r"leak_bytes_per_cycle_max"}, "device_memory:leak_per_wake",
           bound=("leak_bytes_per_cycle_max",), size="8 MiB a wake",
           expected={"leak_bytes_per_cycle_max": 8 * MiB}),
    Mutant("leak_once", "#21336 (a pool that grows once)",
           "The fifth wake leaks 128 MiB of GPU memory, once.",
           {"memory_leak_cycle": r"cycle_bytes_flat_max"}, "device_memory:leak_once",
           bound=("cycle_bytes_flat_max",), size="128 MiB once, at the 5th wake",
           expected={"cycle_bytes_flat_max": 128 * MiB}),
    Mutant("kv_cache_kept_on_sleep", "#11743, #47654",
           "Level-1 sleep does not release the KV cache.",
           {"physical_memory": r"level1_bytes_fraction_max|sleep_freed_kv_fraction_min|#11743"},
           "device_memory:kv_cache_kept_on_sleep",
           bound=("level1_bytes_fraction_max", "sleep_freed_kv_fraction_min"), size="the whole 2 GiB KV cache"),
    Mutant("kv_cache_partly_kept", "#47654, #32714 (partially freed)",
           "Level-1 sleep releases only part of the KV cache: 5 of its 6 per-layer allocations stay mapped.",
           {"physical_memory": r"level1_bytes_fraction_max|sleep_freed_kv_fraction_min"},
           "device_memory:kv_cache_partly_kept",
           bound=("level1_bytes_fraction_max", "sleep_freed_kv_fraction_min"),
           size="70% of the KV cache (5 of 6 layers, 1.79 GB) kept",
           expected={"level1_bytes_fraction_max": (_ASLEEP + _KV_KEPT) / _AWAKE,
                     "sleep_freed_kv_fraction_min": (_AWAKE - _ASLEEP - _KV_KEPT) / _KV}),
    Mutant("residue_grows", "#45648 (memory level 1 leaves resident)",
           "1152 MiB of device memory outside the pools from start-up on: resident at level 1, like a "
           "CUDA-graph pool level 1 does not release.",
           # On the H200 (2026-11-30) the asleep/awake fraction (0.40 > 0.35) fired before the residue
           # check: growth that misses the 1 GiB residue by 2x also lifts the fraction on MRV2-eager,
           # so the residue bound only decides alone in graph mode, where its per-cell bound is 1.15 GiB.
           {"physical_memory": r"level1_residue_bytes_max|level1_bytes_fraction_max"},
           "device_memory:residue_grows",
           bound=("level1_residue_bytes_max",), size="+1152 MiB resident",
           expected={"level1_residue_bytes_max": _ASLEEP + 1152 * MiB}),
    Mutant("late_release", "sleep answers before the memory is freed",
           "/sleep answers with 1.5 GiB still held, released one second later.",
           {"immediacy": r"sleep_freed_immediate_kv_fraction_min"}, "device_memory:late_release",
           bound=("sleep_freed_immediate_kv_fraction_min",), size="1.5 GiB released 1 s late",
           expected={"sleep_freed_immediate_kv_fraction_min": (_AWAKE - _ASLEEP - 1.5 * GiB) / _KV}),
    Mutant("late_remap", "wake answers before the memory is back",
           "/wake_up answers with 448 MiB of the server's memory still unmapped; it comes back with the "
           "next forward pass.",
           {"immediacy": r"wake_shortfall_immediate_bytes_max"}, "device_memory:late_remap",
           bound=("wake_shortfall_immediate_bytes_max",), size="448 MiB mapped after the answer",
           expected={"wake_shortfall_immediate_bytes_max": (354 + 448) * MiB}),
    Mutant("late_restore", "wake answers before the weights are back",
           "/wake_up from level 1 answers with the output projection zeroed; its values come back one "
           "second later.",
           {"immediacy": r"\[late restore\] after a request sent right after"}, "weights:late_restore",
           size="lm_head restored 1 s after the answer"),
    Mutant("level2_keeps_host_copy", "level 2 (discard) vs level 1 (offload)",
           "Level 2 backs the weights up to host memory like level 1: output and GPU memory are right, "
           "the host RAM a trainer needs is not given back.",
           {"host_memory": r"level2_host_bytes_max"}, "host:level2_keeps_host_copy",
           bound=("level2_host_bytes_max",), size="the whole weight copy (0.5-1 GB) held at level 2"),
    Mutant("host_copy_leaked", "host copy kept after wake",
           "The host copy of the weights stays referenced after the wake, so every level-1 sleep pins a "
           "new one.",
           {"host_memory": r"host_leak_bytes_per_cycle_max"}, "host:host_copy_leaked",
           bound=("host_leak_bytes_per_cycle_max",), size="the whole weight copy (0.5-1 GB) a cycle"),
    Mutant("pinned_leak_per_sleep", "pinned host memory leak",
           "Each sleep leaks 32 MiB of pinned host memory.",
           {"host_memory": r"host_leak_bytes_per_cycle_max"}, "host:pinned_leak_per_sleep",
           bound=("host_leak_bytes_per_cycle_max",), size="32 MiB pinned a sleep",
           expected={"host_leak_bytes_per_cycle_max": 32 * MiB}),
    Mutant("pinned_jump_once", "pinned host memory that grows once",
           "The fifth sleep pins 256 MiB of host memory and keeps it.",
           {"host_memory": r"host_cycle_flat_max"}, "host:pinned_jump_once",
           bound=("host_cycle_flat_max",), size="256 MiB pinned once, at the 5th sleep",
           expected={"host_cycle_flat_max": 256 * MiB}),
    Mutant("is_sleeping_false_partial", "#44483",
           "/is_sleeping reports false while a tag (or the scheduler) is still asleep.",
           {"flags": r"expected is_sleeping=True"}, "scheduling:is_sleeping_false_partial",
           size="the flag wrong in every partial state"),
    Mutant("gauge_not_updated", "vllm:engine_sleep_state",
           "The sleep-state gauge is not updated by /sleep.",
           {"flags": r"expected is_sleeping=True gauge=\((0,1,0|0,0,1|0,0,0)\), seen is_sleeping=True "
                     r"gauge=\(1,0,0\)"}, "scheduling:gauge_not_updated",
           size="the gauge reads awake at every level"),
    Mutant("slow_sleep", "sleep latency",
           "Sleep takes 0.9 s longer.",
           {"latency": r"threshold 'sleep_s_max'"}, "timing:slow_sleep",
           bound=("sleep_s_max",), size="+0.9 s a sleep", expected={"sleep_s_max": 0.02 + 0.9}),
    Mutant("slow_wake", "#45648",
           "Wake takes 0.45 s longer.",
           {"latency": r"threshold 'wake_s_max'"}, "timing:slow_wake",
           bound=("wake_s_max",), size="+0.45 s a wake", expected={"wake_s_max": 0.03 + 0.45}),
    Mutant("weights_perturbed", "#21336, #29341",
           "Weights come back slightly perturbed (the final norm scaled by 0.9765625): logprobs drift while "
           "greedy tokens still match.",
           {"logprobs_precision": r"logprob_drift_max"}, "weights:weights_perturbed",
           bound=("logprob_drift_max",), size="every logit scaled by 0.9765625",
           expected={"logprob_drift_max": _DRIFT_EXPECTED}),
    Mutant("engine_dies_on_sleep_during_decode", "#45520",
           "/sleep during decoding kills the engine core while the endpoint still returns 200.",
           # The engine's death surfaces either in the race oracle or as the front end's engine error.
           {"concurrent_race": r"#45326|#45520|EngineCore encountered an issue|EngineDeadError|"
                               r"Connection refused|ConnectionError"},
           "scheduling:engine_dies_on_sleep_during_decode", size="the engine dies"),
    Mutant("wake_awake_tag_aborts", "#31618",
           "Waking an engine that is awake fails the call instead of being a no-op.",
           {"error_paths": r"wake_while_awake"}, "scheduling:wake_awake_tag_aborts",
           size="HTTP 500 instead of 200"),
    Mutant("abort_leaves_choices_running", "#45326, #45520",
           "sleep?mode=abort ends an n>1 request's choices in the engine but never tells the front "
           "end: the stream stays open.",
           {"abort_parallel_sampling": r"#45520/#45326 abort during parallel sampling"},
           "scheduling:abort_leaves_choices_running", size="every choice's end lost"),
    Mutant("sleep_drains_instead_of_aborting", "#45520 (sleep?mode=abort)",
           "sleep?mode=abort aborts nothing: it waits for the requests in flight to finish (mode wait), "
           "so every choice ends by length.",
           {"abort_parallel_sampling": r"aborted none of the|abort_s_max"},
           "scheduling:sleep_drains_instead_of_aborting", size="no request aborted"),
    Mutant("request_runs_while_asleep", "#45326, #44395",
           "A request sent while the engine sleeps is scheduled at once, onto unmapped weights and KV "
           "cache, instead of being held until the wake.",
           {"concurrent_race": r"#45326 requests sent while asleep are held"},
           "scheduling:request_runs_while_asleep", size="every request sent while asleep runs"),
    Mutant("staged_wake_loses_weights", "#21336",
           "From the third staged wake (weights, then kv_cache) on, the restored weights are lost: "
           "output is correct for two cycles, then garbage.",
           {"staged_wake_cycles": r"#21336 \(output degrades over cycles\)"},
           "weights:staged_wake_loses_weights", size="lm_head zeroed from the 3rd staged wake"),
]}


def register() -> None:
    """The vllm.general_plugins entry point: apply the mutant named by SLEEPWAKE_MUTANT, once."""
    if _applied:
        return
    name = os.environ.get(ENV, "none")
    if name in ("", "none"):
        _applied.append(None)
        print(NO_MUTANT.format(pid=os.getpid()), file=sys.stderr, flush=True)
        return
    if name not in MUTANTS:
        raise ValueError(f"{ENV}={name!r} names no mutant; known: {', '.join(sorted(MUTANTS))}")
    MUTANTS[name].apply()
    _applied.append(name)
    print(ACTIVATION.format(name=name, pid=os.getpid()), file=sys.stderr, flush=True)
