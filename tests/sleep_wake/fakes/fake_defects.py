"""The defects the fake engine can re-create, and their sizes.

All but FAKE_ONLY carry the names of the mutant catalogue (tests/mutants/plugin/sleepwake_mutants
MUTANTS): the same bug, re-created by the fake instead of patched into vLLM, judged by the same harness
by oracle id (tests/mutants/mutant_test.py). A defect's size comes from the fake server's own model (its
checkpoint's tensors, its KV cache, its host-copy bandwidth), never from the catalogue's sizes or the
thresholds: a fake kill then says the bounds catch the defect at a size the fake's model gives it, not at
the size written to trip them.
"""

import dataclasses
import os
from collections.abc import Callable

import sleepwake_mutants

MiB = 1 << 20
GiB = 1 << 30
# The fake's model of copying between device and host (pinned, PCIe): a defect that copies instead of
# unmapping, or maps and copies back, takes bytes / this.
HOST_COPY_BYTES_PER_S = 4 * GiB
LATE_S = 1.0  # how long a late release, remap or restore lags behind the call's answer
NTH = 5  # the sleep or wake at which a one-off defect happens (the cycle classes run 10)
PERTURBED = " (perturbed)"  # weights_perturbed: logprobs those of other weights, the tokens unchanged


class Switches(frozenset):
    """The defects a fake engine re-creates. The first time a switch that is on is consulted, the engine
    reached its defect's code: it logs the plugin's REACHED line, as a patched function's first call
    does in vLLM, so the verdict tells a defect no test went near (not applied) from a survivor."""

    _log: Callable[[str], None]
    _reached: bool

    def __new__(cls, names=(), log=None):
        switches = super().__new__(cls, names)
        switches._log, switches._reached = log or (lambda line: None), False
        return switches

    def __contains__(self, name) -> bool:
        on = frozenset.__contains__(self, name)
        if on and not self._reached:
            self._reached = True
            self._log(sleepwake_mutants.REACHED.format(name=name, pid=os.getpid()))
        return on


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Each defect's size, in terms of the fake server's model: its weights (the checkpoint's tensors) and
    its KV cache."""

    largest_tensor: int
    weights: int
    kv_cache: int

    @classmethod
    def of(cls, tensor_bytes, kv_cache: int) -> "Sizes":
        tensors = list(tensor_bytes) or [0]
        return cls(max(tensors), sum(tensors), kv_cache)

    @property
    def leak_per_wake(self) -> int:  # a weight tensor mapped again at every wake, the old mapping kept
        return self.largest_tensor

    @property
    def leak_once(self) -> int:
        return self.largest_tensor

    def kv_kept(self, defects) -> int:  # KV-cache bytes a sleep leaves mapped
        if "kv_cache_kept_on_sleep" in defects:
            return self.kv_cache
        if "kv_cache_mostly_kept" in defects:
            return self.kv_cache * 2 // 3
        if "kv_cache_partly_kept" in defects or "kv_cache_partly_kept_level2" in defects:
            return self.kv_cache // 2
        return 0

    @property
    def residue(self) -> int:  # half a KV cache outside the pools from start-up (a profiling buffer kept)
        return self.kv_cache // 2

    @property
    def late_release(self) -> int:  # the KV cache, unmapped only after /sleep answered
        return self.kv_cache

    @property
    def late_remap(self) -> int:  # the KV cache, mapped back only by the next forward
        return self.kv_cache

    @property
    def weights_wake_extra(self) -> int:  # the weights-only wake maps the KV cache's memory too
        return self.kv_cache

    @property
    def weights_wake_more(self) -> int:  # a weight tensor mapped twice by the weights wake
        return self.largest_tensor

    @property
    def wake_extra(self) -> int:  # half the KV cache mapped twice by a full wake
        return self.kv_cache // 2

    @property
    def pinned_per_sleep(self) -> int:  # a weight tensor's host copy never given back
        return self.largest_tensor

    @property
    def pinned_once(self) -> int:  # a whole second host copy, once
        return self.weights

    @property
    def level2_pinned(self) -> int:
        return self.largest_tensor

    @property
    def sleep_delay_s(self) -> float:  # a sleep that copies the KV cache to host instead of discarding it
        return self.kv_cache / HOST_COPY_BYTES_PER_S

    @property
    def wake_delay_s(self) -> float:  # a wake that copies the KV cache back from host
        return self.kv_cache / HOST_COPY_BYTES_PER_S


DEFECTS = {
    "resume_on_partial_wake": "scheduling resumes after any wake (#44483 reverted, #44395)",
    "prefix_cache_kept": "sleep does not reset the prefix cache (#17103, #22726)",
    "prefix_cache_reset_on_level0": "a level-0 sleep resets the prefix cache",
    "reload_weights_noop": "reload_weights does nothing: level 2 wakes into garbage (#29341, #54235)",
    "reload_ignores_weights_path": "reload_weights ignores weights_path: a pushed checkpoint never arrives",
    "push_loads_wrong_file": "a push loads a wrong file, the same one every time: neither the old checkpoint "
    "nor the pushed one serves",
    "host_copy_predates_update": (
        "each wake restores the output projection as it was before the last push (a host copy taken before the update)"
    ),
    "leak_per_wake": "each wake of the executor maps the largest weight tensor again, keeping the old mapping",
    "leak_once": f"wake {NTH} of the executor maps the largest weight tensor again, once",
    "kv_cache_kept_on_sleep": "sleep does not release the KV cache (#11743, #47654)",
    "kv_cache_partly_kept": "sleep releases only half of the KV cache",
    "kv_cache_mostly_kept": "a level-1 sleep releases only a third of the KV cache",
    "kv_cache_partly_kept_level2": "a level-2 sleep releases only half of the KV cache",
    "weights_wake_maps_extra": "a weights-only wake maps the KV cache's memory too (released by its own wake)",
    "weights_wake_maps_more": "a weights-only wake maps the largest weight tensor twice",
    "wake_maps_extra": "a full wake maps half the KV cache twice, until the next sleep",
    "wake_leaves_unmapped": "a full wake leaves the KV cache unmapped until the next forward pass",
    "residue_grows": "half a KV cache outside the pools from start-up on, resident at level 1",
    "late_release": f"/sleep answers with the KV cache still mapped, released {LATE_S:g} s later",
    "late_remap": "/wake_up answers with the KV cache unmapped; it comes back with the next forward or sleep",
    "late_restore": f"/wake_up from level 1 answers with garbage weights, restored {LATE_S:g} s later",
    "level2_keeps_host_copy": "level 2 backs the weights up to pinned host memory like level 1",
    "level2_pins_host": "a level-2 sleep pins a host copy of the largest weight tensor, released by the wake",
    "host_copy_leaked": "the host copy stays referenced after the wake: each level-1 sleep pins a new one",
    "host_copy_partial": "a level-1 sleep backs up only every other weight tensor, discarding the rest",
    "host_copy_twice": "the first level-1 sleep pins a second copy of the weights, released by the wake",
    "pinned_leak_per_sleep": "each sleep of the executor pins a host copy of the largest tensor, never freed",
    "pinned_jump_once": f"sleep {NTH} of the executor pins a second host copy of the weights, once",
    "is_sleeping_false_partial": "/is_sleeping is true only while both tags are asleep (#44483)",
    "gauge_not_updated": "/sleep does not write the sleep-state gauge",
    "slow_sleep": "each sleep of the executor copies the KV cache to host at the fake's copy bandwidth",
    "slow_wake": "each full wake of the executor copies the KV cache back at the fake's copy bandwidth (#45648)",
    "slow_staged_wake": "each tagged wake copies the KV cache back at the fake's copy bandwidth",
    "weights_perturbed": (
        "each weights wake restores slightly different weights: the fake's logprobs of "
        "other weights for the same greedy tokens (#21336)"
    ),
    "engine_dies_on_sleep_during_decode": (
        "/sleep during decode answers 200 and the engine is dead (#45520). The plugin kills the core 0.3 s "
        "after the sleep; the fake, whose requests are faster, kills it as the sleep returns, so that no "
        "test can finish inside the delay and miss the death"
    ),
    "wake_awake_tag_aborts": "waking an awake executor fails the call (#31618)",
    "abort_leaves_choices_running": (
        "sleep?mode=abort never reports the end of an n>1 request's child choices (#45326). vLLM's stream "
        "then stays open until the client gives up (60 s in the suite); the fake ends it at [DONE] with "
        "the children's finish_reason missing, which requests.clean_end rejects at once"
    ),
    "sleep_drains_instead_of_aborting": "sleep?mode=abort waits for the requests in flight (mode wait)",
    "request_runs_while_asleep": "a request sent while the executor sleeps is scheduled at once",
    "staged_wake_loses_weights": "from the third weights-only wake on, the weights are garbage (#21336)",
    # Only the state walk reaches these (tests/mutants/plugin/sleepwake_mutants/walk.py).
    "sleep_while_paused_keeps_prefix_cache": "a sleep of level >= 1 during a level-0 pause keeps the prefix cache",
    "gauge_sticky_while_asleep": "a /sleep while asleep leaves the gauge at the earlier level",
    "wait_mode_aborts": "sleep?mode=wait aborts the requests in flight",
    "level0_wait_freezes": "a level-0 sleep with mode wait freezes the requests in flight (mode keep)",
    "level0_abort_freezes": "a level-0 sleep with mode abort freezes the requests in flight (mode keep)",
    "reset_prefix_cache_fails_asleep": "/reset_prefix_cache answers success=false while asleep",
    "reset_prefix_cache_noop": "/reset_prefix_cache reports success and keeps the cached blocks",
    "kv_wake_maps_weights": "a KV-cache wake while the weights sleep maps the weights' pool too",
    "kv_wake_maps_nothing": "a KV-cache wake while the weights sleep maps nothing",
    "sleep_during_partial_wake_sleeps_again": "a sleep during a partial wake puts the executor to sleep again",
    "reload_resumes_scheduling": "reload_weights resumes scheduling, also during a level-0 pause",
    # Only the walk's newer regions reach these (requests that wait, pause modes while paused, keep at level
    # >= 1, the late arrival of a wait drain, two-tag and tag+scheduling wakes, reloads over cached blocks).
    "abort_spares_waiting": (
        "sleep?mode=abort ends only the running requests: the waiting ones (sent while "
        "paused, or preempted by a keep) stay queued and run after the wake"
    ),
    "paused_new_admits_waiting": (
        "an abort or wait pause (PAUSED_NEW) holds no waiting request: a request sent "
        "while paused so is scheduled at once, onto unmapped pools if asleep"
    ),
    "drain_admits_late_arrivals": "a request arriving while a wait sleep drains is scheduled with the drain",
    "keep_without_preemption": (
        "a level >= 1 keep's cache reset does not preempt the frozen requests (#34382 "
        "reverted): they keep their blocks, the prefix-cache reset is refused"
    ),
    "scheduling_tag_resumes": "a wake naming scheduling resumes scheduling while a tag still sleeps",
    "wake_aborts_queued": "the wake that resumes scheduling aborts the requests queued while paused",
    "keep_reset_aborts_frozen": "a level >= 1 keep's cache reset aborts the frozen requests instead of preempting them",
    "preempted_restarts_output": (
        "a request a keep's cache reset preempted restarts from its prompt at the wake: "
        "the tokens it streamed are generated again (#16832)"
    ),
    "reset_prefix_cache_preempts_running": (
        "/reset_prefix_cache preempts the running requests to reset: it succeeds under a level-0 keep's frozen request"
    ),
    "reload_resets_prefix_cache": "reload_weights resets the prefix cache (#45093, reverted by #46125)",
    "two_tag_wake_maps_first_tag": (
        "a two-tag wake maps only the first tag's pool and counts both awake: the KV cache stays unmapped"
    ),
    "scheduling_tag_kept": (
        "a wake of a tag plus scheduling passes scheduling on to the executor, which "
        "ignores the call for a tag that is not asleep"
    ),
    "pause_mode_sticky": "a sleep while paused keeps the first pause's mode (a wait after a keep drains nothing)",
    "reload_aborts_requests": "reload_weights aborts every request, running or waiting, before the weights change",
    # Fake-only (FAKE_ONLY).
    "gauge_tracks_tags": (
        "the gauge keeps the sleep level until every tag is awake: the divergence "
        "gauge_awake_while_partially_asleep fixed, which its pinning tests must notice"
    ),
}

# Defects that are no mutant of the catalogue (unit/fake_tier_unit_test.py: every other one is).
FAKE_ONLY: tuple[str, ...] = ("gauge_tracks_tags",)

# The pause, resume and worker-level paths of RL frameworks (issue 59): fake-only until the catalogue has
# their mutants (a catalogued mutant of the same bug takes over the name and leaves FAKE_ONLY).
PAUSE_AND_WORKER_DEFECTS = {
    "pause_keep_ignores_clear_cache": (
        "pause(mode=keep) ignores clear_cache, as the /pause route's docstring says it does "
        "(rlhf/api_router.py:44-45): the frozen requests keep their blocks and old-weight KV across an update"
    ),
    "worker_wake_maps_nothing": "collective_rpc(wake_up) answers without mapping any pool back",
}
DEFECTS.update(PAUSE_AND_WORKER_DEFECTS)
FAKE_ONLY += tuple(PAUSE_AND_WORKER_DEFECTS)

# The weight-update paths RL frameworks drive, as the catalogue has them (the plugin's pausing.py, weights.py
# and scheduling.py): /pause, /resume and /is_paused around a push, the tensor and CUDA-IPC pushes and the
# staged wakes around them, the walk's wakes of a resident tag.
DEFECTS.update(
    {
        "async_pause_keep_aborts": "pause(mode=keep) aborts the requests in flight instead of freezing them",
        "async_resume_does_nothing": "resume() leaves the scheduler paused",
        "async_is_paused_false": "/is_paused answers false whatever the scheduler's pause",
        "async_pause_ignores_clear_cache": (
            "pause(mode=keep) ignores the caller's clear_cache=false: the caches are reset (the default), the "
            "frozen requests preempted and the prefix cache emptied"
        ),
        "wake_reloads_model_path": (
            "each weights wake reloads the weights from the model path: after a disk push that is the pushed "
            "checkpoint, after a tensor or IPC push (which moves no path) the one the server started on"
        ),
        "push_skips_norms": (
            "every load after start-up, a push or a reload, leaves the pool's 1-D tensors (the norm weights) as "
            "they were: invisible while the two checkpoints' norm weights are the same bytes"
        ),
        "level2_skips_buffer_save": (
            "a level-2 sleep drops the model buffers it should save: from its wake on the weights serve "
            "garbage, whatever is pushed or reloaded (a reload puts the old buffers back)"
        ),
        "executor_wake_skips_tag_guard": (
            "a wake naming a tag that is not asleep reaches the workers, which map its pool again: "
            "CUDA's invalid argument, an error answer"
        ),
        "sleep_skips_scheduler_pause": (
            "a sleep of level >= 1 sleeps the executor without pausing the scheduler: nothing is "
            "aborted or held, and the prefix cache is not reset"
        ),
    }
)
