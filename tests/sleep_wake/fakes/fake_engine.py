"""The engine behind FakeVllm: vLLM's sleep-mode state machine, the weights it serves, the GPU and host
bytes it holds, its prefix cache and decode loop, and switches that re-create catalogued defects
(fake_defects.py).

The state machine follows vLLM 0.26.0's source, which 0.24.0 and 0.25.0 share line for line
(v1/engine/core.py sleep/pause_scheduler/wake_up/is_sleeping, v1/executor/abstract.py sleep/wake_up,
v1/engine/async_llm.py's gauge writes, v1/worker/gpu_worker.py and device_allocator/cumem.py):
  * sleep(level, mode) pauses scheduling: mode abort ends the requests in flight, wait lets them run
    to the end before the sleep answers, keep freezes them where they are. Level >= 1 clears the prefix
    cache and puts both tags to sleep (a second sleep is a no-op); only level 1 copies the weights to
    pinned host memory, so any other level >= 2 (3 included) wakes into garbage until reload_weights.
  * wake_up(tags): "scheduling" is dropped; the executor ignores the call when it is awake or when a
    tag is not asleep; scheduling resumes only once no tag is asleep (#44483). A wake without tags while
    one tag is already resident fails (the divergence full_wake_remaps_resident_pool). The gauge reads awake
    after every wake_up, partial or not (the divergence pinned in thresholds.KNOWN_DIVERGENCES).
  * pause(mode, clear_cache) is sleep's pause alone (EngineCoreProc.pause_scheduler, which
    AsyncLLM.pause_generation and POST /pause await): the same modes, and once the engine is idle
    clear_cache resets the caches with reset_running_requests (core.py _reset_caches), which preempts a
    keep's frozen requests (their KV dropped: they re-run on the weights serving when they resume);
    without it they keep their KV. resume() unpauses whatever the executor still has asleep (core.py
    resume_scheduler has no guard), and a request then scheduled over an unmapped pool kills the engine
    (the divergence resume_while_kv_cache_asleep). Neither writes the gauge; /is_sleeping reads the pause.
  * The executor's bookkeeping (sleeping_tags, what /is_sleeping and the executor's guards read) is
    apart from the workers' pools (unmapped: CuMemAllocator's is_asleep), as in vLLM: the worker-level
    collective_rpc("sleep" | "wake_up") (gpu_worker.py Worker.sleep / wake_up) maps and unmaps the
    pools past the executor, the scheduler pause and the prefix-cache reset, so the engine does not know
    it sleeps (an engine-level wake is then a no-op) and a request sent meanwhile kills it. A worker
    wake maps what it is asked without looking whether it is mapped (cumem.py wake_up): a resident pool
    is a CUDA error, as the divergence full_wake_remaps_resident_pool found on the H200.
  * reload_weights(weights_path) loads the checkpoint at weights_path into the awake weights pool and
    keeps it as the model path, so a later reload without a path loads it again (known divergence
    reload_without_path_loads_last_pushed); into asleep (unmapped) weights it fails.
  * GPU bytes of the server's process (what NVML reports per pid): a resident context, the CUDA-graph
    pool in graph mode (kept at level 1, #45648), the weights and KV-cache pools while their tag is
    awake, and in eager mode the activation blocks torch's caching allocator keeps after a forward
    (emptied by a sleep, reserved again by the next forward).
  * Host bytes: the level-1 copy, one pinned block per weight tensor (fake_host_memory.py), given back
    to the caching host allocator by the wake and reused by the next sleep.
  * The prefix cache holds full 16-token blocks of prompts; a repeat hits at most n - 1 of its n tokens
    (the last one is always computed), in whole blocks.
Each sleep of the executor logs vLLM's two lines (CuMemAllocator's and the worker's "Sleep mode freed").
Timing: each decode step takes token_delay_s, so a sleep can land mid-decode.
"""

import dataclasses
import threading
import time
from collections.abc import Callable

from tests.core import metrics
from tests.sleep_wake.fakes import fake_checkpoint
from tests.sleep_wake.fakes import fake_defects as d
from tests.sleep_wake.fakes.fake_host_memory import PinnedHostMemory

MiB = 1 << 20
GiB = 1 << 30
MAX_HOLD_S = 120.0  # a held request gives up after this, so a broken test cannot hang the fake
BLOCK_TOKENS = 16  # vLLM caches only full KV blocks: a prompt shorter than one never hits the cache
PAUSE_MODES = ("abort", "wait", "keep")
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
POOLS = ("weights", "kv_cache")  # CuMemAllocator's tags
_REMAP_REFUSED = "Call to wake_up method failed: CUDA Error: invalid argument at cumem_allocator.cpp:169"


@dataclasses.dataclass(frozen=True)
class GpuMemory:
    """Bytes per pool. Defaults from healthy servers on the H200: 0.84 GB resident at level 1 in eager mode,
    ~0.1 GB more in graph mode, 354 MiB of activation blocks that eager mode does not get back on wake."""

    weights: int
    kv_cache: int
    context: int = 800 * MiB
    graph_pool: int = 0
    activations: int = 0
    device_other: int = 512 * MiB  # the rest of the device's used memory: driver, other processes

    @classmethod
    def for_mode(cls, weights: int, kv_cache: int, mode: str) -> "GpuMemory":
        if mode == "graph":
            return cls(weights, kv_cache, graph_pool=96 * MiB)
        return cls(weights, kv_cache, activations=354 * MiB)


@dataclasses.dataclass
class Choice:
    index: int
    planned: list  # the token ids this choice will generate
    weights: str | None  # what generates them (their logprobs)
    prompt: str = ""
    seed: object = None
    token_ids: list = dataclasses.field(default_factory=list)
    logprobs: list = dataclasses.field(default_factory=list)
    finish_reason: str | None = None


@dataclasses.dataclass(eq=False)
class Ticket:
    """One request's place in the engine (accept() returns it; wait_scheduled, decode_step and end_decode
    take it back): the abort epoch it was accepted in (a sleep with mode abort ends every request of an
    earlier epoch), and what a defect did to this request alone, where vLLM picks requests by their queue
    (running or waiting) rather than ending them all."""

    epoch: int
    aborted: bool = False  # ended with finish_reason abort at its next step or wait
    restart: bool = False  # preempted_restarts_output: its tokens so far are dropped at its next step
    # How its next step goes on once scheduling resumes, if the weights serving then differ from those
    # that planned its tokens: PREFILL (preempted, KV dropped: prompt and tokens so far computed again)
    # or STALE (its KV kept: the old weights' KV under the new weights).
    resumes: str | None = None


PREFILL, STALE = "prefill", "stale"


class EngineDeadError(RuntimeError):
    pass


def _gib(n: int) -> float:
    return n / GiB


class FakeEngine:
    def __init__(
        self,
        memory: GpuMemory,
        token_delay_s: float = 0.0,
        defects=(),
        checkpoint: fake_checkpoint.Checkpoint = fake_checkpoint.NONE,
        host: PinnedHostMemory | None = None,
        log=None,
    ):
        """checkpoint: what the server started on; host: where level-1 copies are pinned; log(line):
        the server log."""
        unknown = set(defects) - set(d.DEFECTS)
        if unknown:
            raise ValueError(f"unknown fake defects {sorted(unknown)}; known: {', '.join(sorted(d.DEFECTS))}")
        self.memory = memory
        self.token_delay_s = token_delay_s
        self.log = log or (lambda line: None)
        self.defects = d.Switches(defects, self.log)
        self.checkpoint = checkpoint
        self.sizes = d.Sizes.of(checkpoint.tensor_bytes, memory.kv_cache)
        self.host = host or PinnedHostMemory()
        self.cond = threading.Condition()
        self.paused = False
        self.frozen = False  # mode keep: requests in flight wait where they are
        # Requests a keep froze that a level >= 1 sleep's cache reset then preempted: they hold no KV
        # blocks and wait for the wake like new ones (scheduler.py reset_prefix_cache with
        # reset_running_requests), so a wait sleep does not drain them and a reset is not refused.
        self.preempted = 0
        # The requests waiting to be scheduled (vLLM's waiting queue: sent while paused) and those scheduled
        # and not yet ended (its running queue, a keep's preempted ones included), for the defects that
        # pick one queue.
        self.waiting: set[Ticket] = set()
        self.decoding: set[Ticket] = set()
        self.sleeping_tags: set[str] = set()  # the executor's bookkeeping (abstract.py sleeping_tags)
        self.unmapped: set[str] = set()  # the workers' pools unmapped (cumem.py is_asleep)
        # The scheduler resumed by resume() while the executor slept: nothing keeps a request off the
        # unmapped pools (core.py resume_scheduler).
        self.resumed_asleep = False
        self.gauge = dict(metrics.GAUGE_AWAKE)
        self.load = 0  # requests accepted and not finished (/load)
        self.running = 0  # requests being decoded (they hold KV blocks)
        self.abort_epoch = 0
        self.generated_tokens = 0  # vllm:generation_tokens_total
        self.prefix_cache: set[tuple] = set()  # token prefixes of whole cached blocks
        self.activations_reserved = memory.activations > 0  # the start-up profile run did a forward
        # The weights pool (fake_checkpoint: a digest, a mix, or None for garbage) and what a reload
        # without a path loads (vLLM's model_config.model).
        self.weights: str | None = checkpoint.digest
        self.norms: str | None = checkpoint.norms  # the pool's 1-D tensors (None: garbage, newly mapped)
        self.model_path = checkpoint.path
        # (weights, pinned blocks) while a level-1 sleep holds the copy
        self.host_copy: tuple[str | None, list[int]] | None = None
        self.stale_head: str | None = None  # host_copy_predates_update: the output projection before the last push
        self.perturbed = False  # weights_perturbed: restored weights whose logprobs differ
        self.worker_sleeps = self.worker_wakes = self.level1_sleeps = 0
        self.worker_level: int | None = None  # the level of the workers' last sleep
        self.buffers_saved = False  # a level-2 sleep saved the model buffers, restored by the next wake
        self.leaked = 0
        self.extra = 0  # bytes a defect mapped beside the pools, until the call that gives them back
        self.pinned_extra: list[int] = []  # host blocks a defect pinned, freed by the next wake
        self.late_release_until = 0.0
        self.remap_missing = False
        self.weights_mapped_early = False  # kv_wake_maps_weights: the weights' pool mapped, still "asleep"
        self.kv_unmapped = False  # kv_wake_maps_nothing: the KV cache "awake" but not mapped
        self.restore_until = 0.0
        self.weights_wakes = 0
        self.buffers_lost = False  # level2_skips_buffer_save: the model buffers garbage from then on
        self.dead = False
        self.stopping = threading.Event()

    # --- state ----------------------------------------------------------------------------------
    @property
    def executor_sleeping(self) -> bool:
        return bool(self.sleeping_tags)

    def _check_alive(self) -> None:
        if self.dead:
            raise EngineDeadError(ENGINE_DEAD)

    def is_sleeping(self) -> bool:
        with self.cond:
            self._check_alive()
            if "is_sleeping_false_partial" in self.defects:
                return self.sleeping_tags >= {"weights", "kv_cache"}
            return self.paused or self.executor_sleeping

    def gauge_values(self) -> dict:
        with self.cond:
            return dict(self.gauge)

    def _kv_resident(self) -> int:
        if "kv_cache" not in self.unmapped:
            return 0 if self.kv_unmapped else self.memory.kv_cache
        levels = {"kv_cache_partly_kept_level2": (2,), "kv_cache_mostly_kept": (1,)}
        if any(self.worker_level in levels.get(x, (1, 2)) for x in self.defects):
            return self.sizes.kv_kept(self.defects)
        return 0

    def gpu_bytes(self) -> int:
        m = self.memory
        with self.cond:
            late = self.late_release_until > time.monotonic()
            return (
                m.context
                + m.graph_pool
                + self.leaked
                + self._kv_resident()
                + (0 if "weights" in self.unmapped and not self.weights_mapped_early else m.weights)
                + (m.activations if self.activations_reserved else 0)
                + self.extra
                + (self.sizes.residue if "residue_grows" in self.defects else 0)
                + (self.sizes.late_release if late else 0)
                - (self._unmapped_after_wake() if self.remap_missing else 0)
            )

    def _unmapped_after_wake(self) -> int:
        """late_remap / wake_leaves_unmapped: what the last wake left unmapped until the next forward."""
        return self.sizes.late_remap if any(x in self.defects for x in ("late_remap", "wake_leaves_unmapped")) else 0

    def device_used_bytes(self) -> int:
        """The device's used bytes. The activation blocks torch's caching allocator gives back at a sleep
        still count here: on the H200 the first device-wide reading after a wake is close to the one before
        the sleep in eager mode too (thresholds wake_shortfall_immediate_bytes_max), while the server's own
        NVML bytes settle lower (wake_shortfall_bytes_max, eager; their noise: docs/thresholds.md)."""
        m = self.memory
        return self.gpu_bytes() + m.device_other + (0 if self.activations_reserved else m.activations)

    # --- the sleep API ----------------------------------------------------------------------------
    def sleep(self, level: int, mode: str) -> None:
        if mode not in PAUSE_MODES:
            raise ValueError(f"Invalid pause mode: {mode}")
        with self.cond:
            self._check_alive()
            if level >= 1 and "sleep_skips_scheduler_pause" in self.defects:
                if not self.executor_sleeping:  # the executor's own guard
                    self._worker_sleep(level)
                    self.sleeping_tags = {"weights", "kv_cache"}
                self.gauge = metrics.gauge(0, level == 1, level == 2)  # the front end's record
                return
            mode = self._mode_under_defects(level, mode)
            decoding = self.running > 0
            was_sleeping = self.paused or self.executor_sleeping
            partial = self.executor_sleeping and self.sleeping_tags != {"weights", "kv_cache"}
            self._pause_scheduler(mode, clear_cache=level >= 1, level=level)
            if level >= 1 and (
                not self.executor_sleeping or (partial and "sleep_during_partial_wake_sleeps_again" in self.defects)
            ):
                self._worker_sleep(level)
                self.sleeping_tags = {"weights", "kv_cache"}  # abstract.py: after the workers answered
            if "gauge_not_updated" not in self.defects and not (
                was_sleeping and "gauge_sticky_while_asleep" in self.defects
            ):
                self.gauge = metrics.gauge(0, level == 1, level == 2)
            if decoding and "engine_dies_on_sleep_during_decode" in self.defects:
                self.dead = True  # the sleep itself succeeded: /sleep still answers 200
            self.cond.notify_all()

    def pause(self, mode: str, clear_cache: bool) -> None:
        """EngineCoreProc.pause_scheduler(mode, clear_cache) as AsyncLLM.pause_generation awaits it."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"Invalid pause mode: {mode}")
        with self.cond:
            self._check_alive()
            if mode == "keep" and "async_pause_keep_aborts" in self.defects:
                mode = "abort"
            if mode == "keep" and "pause_keep_ignores_clear_cache" in self.defects:
                clear_cache = False
            if mode == "keep" and "async_pause_ignores_clear_cache" in self.defects:
                clear_cache = True
            self._pause_scheduler(mode, clear_cache)
            self.cond.notify_all()

    def resume(self) -> None:
        """core.py resume_scheduler: unpaused, whatever the executor still has asleep."""
        with self.cond:
            self._check_alive()
            if "async_resume_does_nothing" in self.defects:
                return
            self._resume_scheduling()
            self.resumed_asleep = self.executor_sleeping

    def is_paused(self) -> bool:
        with self.cond:
            self._check_alive()
            return self.paused and "async_is_paused_false" not in self.defects

    def _resume_scheduling(self) -> None:
        """The scheduler unpaused: the requests a keep froze go on (their KV as the pause left it)."""
        for ticket in self.decoding:
            if self.frozen and ticket.resumes is None:
                ticket.resumes = STALE
        self.paused = self.frozen = False
        self.preempted = 0
        self.cond.notify_all()

    def _pause_scheduler(self, mode: str, clear_cache: bool, level: int | None = None) -> None:
        """core.py pause_scheduler, for sleep(level, mode) (clear_cache = level >= 1) and pause (level None):
        mode abort ends every request, wait drains the running ones before it returns, keep freezes them;
        once idle, clear_cache resets the caches with reset_running_requests."""
        was_paused = self.paused
        if mode == "abort":
            if "abort_spares_waiting" in self.defects:
                # finish_requests over the running queue only: the waiting requests, and those a keep's
                # cache reset preempted back to that queue, stay queued
                if not self.preempted:
                    for ticket in self.decoding:
                        ticket.aborted = True
            else:
                self.abort_epoch += 1
                self.preempted = 0
        self.paused = True
        if not (was_paused and "pause_mode_sticky" in self.defects):
            self.frozen = mode == "keep" or self.preempted > 0
        self.cond.notify_all()
        if mode == "wait" and not self.frozen:  # new requests queue; the running ones run to the end first
            # (a pause that freezes them counts none unfinished: scheduler.py get_num_unfinished_requests)
            self.cond.wait_for(
                lambda: self.running <= self.preempted or self.dead or self.stopping.is_set(), MAX_HOLD_S
            )
        # A keep's cache reset preempts the frozen requests back to the waiting queue
        # (reset_running_requests=True); without that the reset is refused while they hold blocks.
        preempts, refused = clear_cache and mode == "keep" and self.running > self.preempted, False
        if preempts and "keep_reset_aborts_frozen" in self.defects:
            for ticket in self.decoding:
                ticket.aborted = True
            preempts = False
        elif preempts and "keep_without_preemption" in self.defects:
            preempts, refused = False, True
        keeps_cache = (
            refused
            or "prefix_cache_kept" in self.defects
            or (level is not None and was_paused and "sleep_while_paused_keeps_prefix_cache" in self.defects)
        )
        if (clear_cache and not keeps_cache) or (level == 0 and "prefix_cache_reset_on_level0" in self.defects):
            self.prefix_cache.clear()
        if preempts:
            self._preempt_running()

    def _preempt_running(self) -> None:
        """scheduler.py reset_prefix_cache(reset_running_requests=True): every running request back to the
        waiting queue, its KV blocks freed."""
        self.preempted = self.running
        for ticket in self.decoding:
            ticket.resumes = PREFILL
            if "preempted_restarts_output" in self.defects:
                ticket.restart = True

    def _mode_under_defects(self, level: int, mode: str) -> str:
        """The pause mode a defect makes of the one asked for."""
        if mode == "abort" and "sleep_drains_instead_of_aborting" in self.defects:
            return "wait"
        if mode == "wait" and "wait_mode_aborts" in self.defects:
            return "abort"
        if level == 0 and mode == "wait" and "level0_wait_freezes" in self.defects:
            return "keep"
        if level == 0 and mode == "abort" and "level0_abort_freezes" in self.defects:
            return "keep"
        return mode

    def _worker_sleep(self, level: int) -> None:
        """gpu_worker.py Worker.sleep and CuMemAllocator.sleep: copy the weights (level 1), unmap both
        pools, log what was freed."""
        before = self.device_used_bytes()
        self.worker_sleeps += 1
        self.worker_level = level
        level1_before = self.level1_sleeps
        self.level1_sleeps += level == 1
        if "slow_sleep" in self.defects:
            time.sleep(self.sizes.sleep_delay_s)  # simulated: the defect is the time itself
        self.extra = 0
        backed_up = 0
        if level == 1 or "level2_keeps_host_copy" in self.defects:
            tensors = list(self.checkpoint.tensor_bytes)
            if level == 1 and "host_copy_partial" in self.defects:
                tensors = tensors[::2]  # the others are discarded: garbage after the wake
            self.host_copy = (
                self.weights if len(tensors) == len(self.checkpoint.tensor_bytes) else None,
                [self.host.allocate(n) for n in tensors],
            )
            backed_up = sum(tensors)
            if level == 1 and "host_copy_twice" in self.defects and not level1_before:
                self.pinned_extra.append(self.host.allocate(self.sizes.pinned_once))
        self.buffers_saved = level == 2
        if level == 2 and "level2_pins_host" in self.defects:
            self.pinned_extra.append(self.host.allocate(self.sizes.level2_pinned))
        kv_released = self._kv_resident()
        self.unmapped = {"weights", "kv_cache"}
        self.buffers_lost = self.buffers_lost or (level == 2 and "level2_skips_buffer_save" in self.defects)
        kv_released -= self._kv_resident()
        self.activations_reserved = False  # sleep empties torch's caching allocator
        self.remap_missing = self.weights_mapped_early = self.kv_unmapped = False
        if "pinned_leak_per_sleep" in self.defects:
            self.host.allocate(self.sizes.pinned_per_sleep)  # never freed
        if "pinned_jump_once" in self.defects and self.worker_sleeps == d.NTH:
            self.host.allocate(self.sizes.pinned_once)
        unmapped = self.memory.weights + kv_released
        self.log(
            f"CuMemAllocator: sleep freed {_gib(unmapped):.2f} GiB memory in total, of which "
            f"{_gib(backed_up):.2f} GiB is backed up in CPU and the rest {_gib(unmapped - backed_up):.2f} "
            "GiB is discarded directly."
        )
        after = self.device_used_bytes()
        self.log(
            f"Sleep mode freed {round(_gib(before - after), 2)} GiB memory, {round(_gib(after), 2)} GiB "
            "memory is still in use."
        )
        if "late_release" in self.defects:  # held past vLLM's own reading, as the plugin's is
            self.late_release_until = time.monotonic() + d.LATE_S

    def wake_up(self, tags) -> None:
        with self.cond:
            self._check_alive()
            asked = list(tags) if tags is not None else None
            if (
                tags is not None
                and "scheduling" in tags
                and (tags == ["scheduling"] or "scheduling_tag_kept" not in self.defects)
            ):
                tags = [t for t in tags if t != "scheduling"]
            woke = None
            if tags is None or tags:
                woke = self._executor_wake_up(tags)
        if woke and (
            ("slow_wake" in self.defects and tags is None) or ("slow_staged_wake" in self.defects and tags is not None)
        ):
            time.sleep(self.sizes.wake_delay_s)  # simulated: the defect is the time itself
        with self.cond:
            if (
                not self.executor_sleeping
                or "resume_on_partial_wake" in self.defects
                or (asked and "scheduling" in asked and "scheduling_tag_resumes" in self.defects)
            ):
                if self.paused and "wake_aborts_queued" in self.defects:
                    for ticket in self.waiting:
                        ticket.aborted = True
                self._resume_scheduling()
                self.resumed_asleep = False
            if not self.executor_sleeping or "gauge_tracks_tags" not in self.defects:
                self.gauge = dict(metrics.GAUGE_AWAKE)
            self.cond.notify_all()

    def _executor_wake_up(self, tags) -> list | None:
        """executor/abstract.py wake_up; the tags the worker woke, None when it ignored the call."""
        if not self.executor_sleeping:
            if "wake_awake_tag_aborts" in self.defects:
                raise RuntimeError("wake_up called while awake")
            return None
        if tags and any(t not in self.sleeping_tags for t in tags):
            if "executor_wake_skips_tag_guard" not in self.defects:
                return None
            # No guard: the workers are asked for every tag named. cuMemMap refuses a pool mapped already; a
            # tag that names no pool maps nothing.
            self._refuse_resident([t for t in tags if t in POOLS])
            tags = [t for t in tags if t in self.sleeping_tags]
            if not tags:
                return None
        if tags == ["weights"] and self.weights_mapped_early:
            raise RuntimeError(_REMAP_REFUSED)
        if tags == ["kv_cache"] and "weights" in self.sleeping_tags and self.worker_level == 2:
            # The known divergence kv_first_wake_after_level2_restores_into_unmapped_weights: the wake
            # restores the model buffers a level-2 sleep saved into the weights pool, still unmapped; the
            # executor keeps both tags asleep.
            raise RuntimeError(
                "Call to wake_up method failed: restoring the model buffers saved by the level-2 "
                "sleep into the weights pool, which is not mapped"
            )
        if tags == ["kv_cache"] and "weights" in self.sleeping_tags:
            self.weights_mapped_early = "kv_wake_maps_weights" in self.defects
            self.kv_unmapped = "kv_wake_maps_nothing" in self.defects
        if tags is None and self.sleeping_tags != {"weights", "kv_cache"}:
            # The known divergence full_wake_remaps_resident_pool: CuMemAllocator.wake_up(None) maps the
            # resident pool again and cuMemMap refuses; the executor keeps its sleeping tags.
            raise RuntimeError(_REMAP_REFUSED)
        woken = list(tags) if tags else sorted(self.sleeping_tags)
        self._refuse_resident(woken)
        self._map_pools(tags, woken)
        self.sleeping_tags -= set(woken)
        return woken

    def _refuse_resident(self, woken) -> None:
        """cumem.py wake_up maps every allocation of the tags asked for without reading is_asleep: cuMemMap
        refuses one already resident (a worker-level wake mapped it past the executor). As for the engine's
        full wake (full_wake_remaps_resident_pool), nothing is mapped then."""
        resident = sorted(set(woken) - self.unmapped)
        if resident:
            raise RuntimeError(f"{_REMAP_REFUSED} (the {' and '.join(resident)} pool is mapped already)")

    def _map_pools(self, tags, woken) -> None:
        """The workers' part of a wake (gpu_worker.py Worker.wake_up, CuMemAllocator.wake_up): the pools
        of `woken` mapped back, the weights restored from their copy; tags as the call named them."""
        mapped = woken
        if tags and len(tags) > 1 and "two_tag_wake_maps_first_tag" in self.defects:
            # The workers are asked for the first tag only; the executor counts every tag awake. The walk
            # names weights first, so the KV cache is the pool left unmapped.
            mapped = woken[:1]
            self.kv_unmapped = "kv_cache" not in mapped
        self.unmapped -= set(woken)
        self.buffers_saved = False
        self.worker_wakes += 1
        for block in self.pinned_extra:
            self.host.free(block)
        self.pinned_extra = []
        if "leak_per_wake" in self.defects:
            self.leaked += self.sizes.leak_per_wake
        if "leak_once" in self.defects and self.worker_wakes == d.NTH:
            self.leaked += self.sizes.leak_once
        if tags and "kv_cache" in tags:
            self.extra = 0
        if woken == ["weights"] and tags is not None:
            self.extra = (
                self.sizes.weights_wake_extra
                if "weights_wake_maps_extra" in self.defects
                else self.sizes.weights_wake_more
                if "weights_wake_maps_more" in self.defects
                else 0
            )
        if tags is None and "wake_maps_extra" in self.defects:
            self.extra = self.sizes.wake_extra
        if tags is None or "kv_cache" in woken:
            self.remap_missing = any(x in self.defects for x in ("late_remap", "wake_leaves_unmapped"))
        if "weights" in mapped:
            self._restore_weights(tags)

    def _restore_weights(self, tags) -> None:
        """CuMemAllocator.wake_up for the weights: the level-1 copy back (its pinned blocks back to the
        host allocator's cache), or newly mapped memory holding garbage."""
        if self.host_copy is not None:
            self.weights, blocks = self.host_copy
            self.host_copy = None
            if "host_copy_leaked" not in self.defects:
                for block in blocks:
                    self.host.free(block)
        else:
            self.weights = self.norms = None
        if "host_copy_predates_update" in self.defects and self.stale_head is not None:
            self.weights = fake_checkpoint.mixed(self.weights, self.stale_head)
        if "weights_perturbed" in self.defects:
            self.perturbed = True
        if "late_restore" in self.defects and self.worker_level == 1:
            self.restore_until = time.monotonic() + d.LATE_S
        if tags == ["weights"]:
            self.weights_wakes += 1
            if "staged_wake_loses_weights" in self.defects and self.weights_wakes >= 3:
                self.weights = None
        if "wake_reloads_model_path" in self.defects:
            self.weights = self._model_path_checkpoint().digest

    # --- the workers' own sleep and wake: collective_rpc("sleep" | "wake_up") -----------------------
    def worker_sleep(self, level: int) -> None:
        """Worker.sleep(level) past the engine: the pools unmapped (level 1 copies the weights to host,
        level 2 discards them) with no scheduler pause, no prefix-cache reset and no executor bookkeeping."""
        with self.cond:
            self._check_alive()
            if self.unmapped:
                # CuMemAllocator.sleep unmaps (and at level 1 copies from) every allocation, asleep or not
                raise RuntimeError(
                    f"Call to sleep method failed: CUDA Error: invalid argument (the "
                    f"{' and '.join(sorted(self.unmapped))} pool is unmapped already)"
                )
            self._worker_sleep(level)

    def worker_wake_up(self, tags) -> None:
        """Worker.wake_up(tags) past the engine: every pool named mapped back, awake or not (an awake one is
        cuMemMap's refusal), then the model buffers a level-2 sleep saved copied into the weights pool."""
        with self.cond:
            self._check_alive()
            if "worker_wake_maps_nothing" in self.defects:
                return
            woken = [tag for tag in sorted(POOLS) if tags is None or tag in tags]
            self._refuse_resident(woken)
            if self.buffers_saved and "weights" in self.unmapped - set(woken):
                raise RuntimeError(
                    "Call to wake_up method failed: restoring the model buffers saved by the level-2 "
                    "sleep into the weights pool, which is not mapped"
                )
            if woken:
                self._map_pools(tags, woken)

    def reload_weights(self, weights_path: str | None = None) -> None:
        with self.cond:
            self._check_alive()
            if "weights" in self.unmapped:
                raise RuntimeError("reload_weights while the weights are asleep: their memory is unmapped")
            if "reload_aborts_requests" in self.defects:
                self.abort_epoch += 1  # every request ends, running or waiting, before the weights change
                self.preempted = 0
                self.cond.notify_all()
            if "reload_weights_noop" in self.defects:
                return
            if weights_path is not None and "host_copy_predates_update" in self.defects:
                self.stale_head = self.weights
            if weights_path is not None and "reload_ignores_weights_path" not in self.defects:
                pushed = fake_checkpoint.load(weights_path)
                if pushed.tensor_bytes != self.checkpoint.tensor_bytes:
                    raise RuntimeError(
                        f"the checkpoint at {weights_path} has other tensor shapes than the "
                        f"served model ({self.checkpoint.path}): it cannot be loaded in place"
                    )
                self.model_path = weights_path  # gpu_model_runner.py: model_config.model = weights_path
            self.weights = self._loaded(self._model_path_checkpoint())
            if weights_path is not None and "push_loads_wrong_file" in self.defects:
                # Repeatably wrong: a golden taken from this server after a push would agree with itself.
                self.weights = fake_checkpoint.mixed(self.weights, "the pushed file's stale twin")
            if self.running <= self.preempted and "reload_resets_prefix_cache" in self.defects:
                self.prefix_cache.clear()  # refused while a running request holds blocks, as any reset
            if "reload_resumes_scheduling" in self.defects:
                self.paused = self.frozen = False
                self.cond.notify_all()

    def _model_path_checkpoint(self) -> fake_checkpoint.Checkpoint:
        """What a reload without a path loads: the model path's checkpoint (vLLM's model_config.model)."""
        return fake_checkpoint.load(self.model_path) if self.model_path else self.checkpoint

    def _loaded(self, checkpoint: fake_checkpoint.Checkpoint) -> str | None:
        """What the awake weights pool holds once the checkpoint is loaded into it."""
        if "push_skips_norms" in self.defects and checkpoint.norms != self.norms:
            return fake_checkpoint.with_norms_of(checkpoint.digest, self.norms)
        self.norms = checkpoint.norms
        return checkpoint.digest

    def load_weights(self, checkpoint: str) -> None:
        """A push of tensors into the model's load_weights (the worker extension's load_checkpoint_tensors
        and load_ipc_tensors, TRL's in-process load_weights): the checkpoint's weights into the awake weights
        pool, past reload_weights, so the model path stays what it was."""
        with self.cond:
            self._check_alive()
            if "weights" in self.unmapped:
                raise RuntimeError("load_weights while the weights are asleep: their memory is unmapped")
            pushed = fake_checkpoint.load(checkpoint)
            if pushed.tensor_bytes != self.checkpoint.tensor_bytes:
                raise RuntimeError(
                    f"the checkpoint at {checkpoint} has other tensor shapes than the served model "
                    f"({self.checkpoint.path}): load_weights copies into the existing parameters"
                )
            self.weights = self._loaded(pushed)

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """False while running requests hold blocks (0.26.0's documented success=false), unless
        reset_running_requests preempts them first (scheduler.py reset_prefix_cache)."""
        with self.cond:
            self._check_alive()
            if "reset_prefix_cache_fails_asleep" in self.defects and (self.paused or self.executor_sleeping):
                return False
            if self.running > self.preempted:
                if reset_running_requests:
                    self._preempt_running()
                    if not self.frozen:  # back to the waiting queue, which an unfrozen scheduler runs at once
                        self.preempted = 0
                elif "reset_prefix_cache_preempts_running" not in self.defects:
                    return False
                else:
                    self.preempted = self.running  # reset_running_requests: back to the waiting queue
            if "reset_prefix_cache_noop" not in self.defects:
                self.prefix_cache.clear()
            return True

    # --- requests -------------------------------------------------------------------------------
    def accept(self) -> Ticket:
        """A request arrives: counted in /load; returns its ticket (the abort epoch it belongs to)."""
        with self.cond:
            self._check_alive()
            self.load += 1
            if "request_runs_while_asleep" in self.defects and self.executor_sleeping:
                self.paused = self.frozen = False  # scheduled onto the unmapped pools at once
                self.cond.notify_all()
            return Ticket(self.abort_epoch)

    def finish(self) -> None:
        with self.cond:
            self.load -= 1

    def _ended(self, ticket: Ticket) -> bool:
        return self.abort_epoch != ticket.epoch or ticket.aborted

    def _admits(self) -> bool:
        """Whether the scheduler takes a waiting request now: only while unpaused (scheduler.py schedule
        reads the waiting queue only UNPAUSED)."""
        if not self.paused:
            return True
        if self.frozen:
            return False
        return "paused_new_admits_waiting" in self.defects or (
            self.running > self.preempted and "drain_admits_late_arrivals" in self.defects
        )

    def wait_scheduled(self, ticket: Ticket, gone: Callable[[], bool] = lambda: False) -> bool:
        """Block while the scheduler holds new requests; False if a sleep aborted the request (or it gave up),
        or its client went away while it waited (gone()): vLLM's server then aborts it, and the scheduler
        takes it off the waiting queue (async_llm.py generate -> abort; scheduler.py finish_requests)."""
        deadline = time.monotonic() + MAX_HOLD_S
        with self.cond:
            self.waiting.add(ticket)
            try:
                while (
                    not self._admits() and not self.dead and not self.stopping.is_set() and time.monotonic() < deadline
                ):
                    if self._ended(ticket):
                        return False
                    if gone():
                        ticket.aborted = True
                        return False
                    self.cond.wait(0.05)
                self._check_alive()
                if self._ended(ticket) or not self._admits():
                    return False
                self._forward_check()
                self.running += 1
                self.decoding.add(ticket)
                return True
            finally:
                self.waiting.discard(ticket)

    def prefill(self, prompt: str) -> tuple[int, int]:
        """(prompt tokens, of which served from the prefix cache) for a scheduled request."""
        words = tuple(prompt.split())
        with self.cond:
            cached = 0
            for end in range(BLOCK_TOKENS, len(words), BLOCK_TOKENS):  # whole blocks within n - 1 tokens
                if words[:end] not in self.prefix_cache:
                    break
                cached = end
            self.prefix_cache.update(words[:end] for end in range(BLOCK_TOKENS, len(words) + 1, BLOCK_TOKENS))
            self.activations_reserved = self.memory.activations > 0
            self.remap_missing = False  # late_remap: the forward pass maps the bytes back
        return len(words), cached

    def _serving_weights(self) -> str | None:
        """What a forward pass computes with now: garbage while the weights are unmapped (a request
        scheduled during a sleep) or not yet restored (late_restore)."""
        if "weights" in self.unmapped or self.restore_until > time.monotonic():
            return None
        return fake_checkpoint.mixed(self.weights, "lost buffers") if self.buffers_lost else self.weights

    def plan(self, prompt: str, max_tokens: int, n: int, seed) -> list[Choice]:
        with self.cond:
            weights = self._serving_weights()
        return [
            Choice(i, fake_checkpoint.tokens(weights, prompt, max_tokens, i, seed), weights, prompt, seed)
            for i in range(n)
        ]

    def decode_step(self, choices: list[Choice], ticket: Ticket) -> list[tuple[Choice, list]]:
        """One token for every unfinished choice, as one engine step; [(choice, new ids)].

        A sleep in abort mode ends every unfinished choice with "abort"; one in keep mode holds the
        step until scheduling resumes; EngineDeadError once the engine has died."""
        if self.token_delay_s:
            time.sleep(self.token_delay_s)  # simulated decode time: lets a sleep land mid-decode
        out: list[tuple[Choice, list]] = []
        with self.cond:
            while self.frozen and not self._ended(ticket) and not self.dead and not self.stopping.is_set():
                self.cond.wait(0.05)
            self._check_alive()
            aborted = self._ended(ticket)
            if not aborted:
                self._forward_check()
            if ticket.restart and not aborted:  # recomputed from the prompt alone: its tokens so far dropped
                ticket.restart = False
                for c in choices:
                    c.token_ids.clear()
                    c.logprobs.clear()
            if ticket.resumes and not aborted:
                self._resume_plan(choices, ticket.resumes)
                ticket.resumes = None
            for c in choices:
                if c.finish_reason is not None:
                    continue
                if aborted:
                    c.finish_reason = "abort"
                    out.append((c, []))
                    continue
                token = c.planned[len(c.token_ids)]
                c.token_ids.append(token)
                scored = c.weights + d.PERTURBED if self.perturbed and c.weights else c.weights
                c.logprobs.append(fake_checkpoint.logprob(scored, token))
                self.generated_tokens += 1
                if len(c.token_ids) == len(c.planned):
                    c.finish_reason = "length"
                out.append((c, [token]))
        return out

    def _forward_check(self) -> None:
        """A forward pass about to run: over a pool the workers hold unmapped while nothing keeps requests
        off it (the executor does not know, or resume() unpaused a sleeping executor) it is the illegal
        memory access that kills the engine core."""
        unguarded = self.unmapped - self.sleeping_tags or (self.unmapped if self.resumed_asleep else set())
        if unguarded:
            self.dead = True
            self.cond.notify_all()
            self.log(
                f"a forward pass over the unmapped {' and '.join(sorted(unguarded))} pool: "
                "CUDA error: an illegal memory access was encountered"
            )
            raise EngineDeadError(ENGINE_DEAD)

    def _resume_plan(self, choices: list[Choice], how: str) -> None:
        """The rest of each choice's tokens once its request runs on after a pause, where other weights
        serve now than planned them: PREFILL computes its prompt and tokens so far again with them, STALE
        decodes with them over the KV the old weights computed."""
        serving = self._serving_weights()
        for c in choices:
            if c.finish_reason is not None or c.weights == serving:
                continue
            weights = serving if how == PREFILL or serving is None else f"{serving} over the KV cache of {c.weights}"
            context = " ".join([c.prompt, *(f"w{t}" for t in c.token_ids)])
            rest = fake_checkpoint.tokens(weights, context, len(c.planned) - len(c.token_ids), c.index, c.seed)
            c.planned = c.token_ids + rest
            c.weights = weights

    def end_decode(self, ticket: Ticket | None = None) -> None:
        with self.cond:
            self.running -= 1
            self.decoding.discard(ticket)
            self.cond.notify_all()  # a sleep in wait mode may be waiting for the last one
