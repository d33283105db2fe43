"""Mutants of vLLM 0.26.0's sleep mode: each re-introduces one catalogued bug, as a vLLM general plugin.

vLLM loads every `vllm.general_plugins` entry point in each of its processes (API server, engine core,
workers), so a patch applied by `register()` is live wherever the real code runs; no file of vLLM is
edited. The mutant is chosen per server by the SLEEPWAKE_MUTANT environment variable, which the
server inherits from the test. Every process that applies one prints ACTIVATION to stderr (the
server log), so a harness can tell "killed by the suite" from "never applied".

This module must import without vLLM (the harness and CPU unit tests read MUTANTS): vLLM is imported
inside the patch functions only. `kills` maps the matrix class short names expected to kill the mutant
to a regex their failure text must match: the failure must be the oracle that guards that bug, not any
failure.
"""

import dataclasses
import os
import sys
import threading
import time
from typing import Callable

ENV = "SLEEPWAKE_MUTANT"
ACTIVATION = "sleepwake-mutant active: {name} (pid {pid})"
NO_MUTANT = "sleepwake-mutant: none active (pid {pid})"
_applied = []  # register() may run several times per process (vLLM loads plugins from several places)


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    issue: str
    doc: str
    kills: dict
    apply: Callable[[], None] = dataclasses.field(repr=False, compare=False, default=None)


def _wrap(owner, attr: str, make: Callable) -> None:
    """owner.attr = make(original)."""
    original = getattr(owner, attr)
    setattr(owner, attr, make(original))


# --- the patches (each imports vLLM lazily) ----------------------------------------------------

def _resume_on_partial_wake():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            self.resume_scheduler()  # the #44483 fix resumed only once every tag was resident
        return wake_up
    _wrap(EngineCore, "wake_up", make)


def _prefix_cache_kept():
    from vllm.v1.engine.core import EngineCore, EngineCoreProc

    def make(original):
        def pause_scheduler(self, mode="abort", clear_cache=True):
            return original(self, mode=mode, clear_cache=False)  # sleep no longer resets the cache
        return pause_scheduler
    for cls in (EngineCore, EngineCoreProc):
        _wrap(cls, "pause_scheduler", make)


def _reload_weights_noop():
    from vllm.v1.worker.gpu_worker import Worker
    Worker.reload_weights = lambda self, *args, **kwargs: None


def _leak_per_wake():
    import torch
    from vllm.v1.worker.gpu_worker import Worker
    leaked = []

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            leaked.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))  # 64 MiB a wake
        return wake_up
    _wrap(Worker, "wake_up", make)


def _kv_cache_kept_on_sleep():
    from vllm.device_allocator.cumem import CuMemAllocator

    def hide_kv(allocator):
        kept = {ptr: data for ptr, data in allocator.pointer_to_data.items() if data.tag == "kv_cache"}
        for ptr in kept:
            del allocator.pointer_to_data[ptr]
        return kept

    def make_sleep(original):
        def sleep(self, offload_tags=None):
            kept = hide_kv(self)  # the KV pool is neither unmapped nor released
            try:
                return original(self, offload_tags)
            finally:
                self.pointer_to_data.update(kept)
                self._sleepwake_kept = kept
        return sleep

    def make_wake(original):
        def wake_up(self, tags=None):
            kept = getattr(self, "_sleepwake_kept", {})
            for ptr in kept:  # still mapped: mapping it again would fail
                self.pointer_to_data.pop(ptr, None)
            try:
                return original(self, tags)
            finally:
                self.pointer_to_data.update(kept)
                self._sleepwake_kept = {}
        return wake_up
    _wrap(CuMemAllocator, "sleep", make_sleep)
    _wrap(CuMemAllocator, "wake_up", make_wake)


def _is_sleeping_false_partial():
    from vllm.v1.engine.core import EngineCore

    def is_sleeping(self):
        # Only "fully asleep" counts: a partial wake or a level-0 pause reads awake.
        executor = self.model_executor
        return bool(executor.is_sleeping) and set(executor.sleeping_tags) >= {"weights", "kv_cache"}
    EngineCore.is_sleeping = is_sleeping


def _gauge_not_updated():
    from vllm.v1.engine.async_llm import AsyncLLM

    async def sleep(self, level=1, mode="abort"):
        if level >= 1:
            await self.renderer.clear_mm_cache_async()
        await self.engine_core.sleep_async(level, mode)  # record_sleep_state(1, level) dropped
    AsyncLLM.sleep = sleep


def _slow_wake():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def wake_up(self, tags=None):
            time.sleep(2.0)
            return original(self, tags)
        return wake_up
    _wrap(Worker, "wake_up", make)


def _weights_perturbed():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if tags is None or "weights" in tags:
                # Scaling lm_head keeps every argmax (greedy tokens may still match) but moves
                # every logprob: what a lossy weight restore looks like to a logprob consumer.
                self.model_runner.model.lm_head.weight.data.mul_(1.25)
        return wake_up
    _wrap(Worker, "wake_up", make)


def _engine_dies_on_sleep_during_decode():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def sleep(self, level=1, mode="abort"):
            decoding = self.scheduler.has_unfinished_requests()
            result = original(self, level, mode)
            if decoding:
                # The /sleep call still answers 200; the engine core dies right after (#45520).
                threading.Timer(0.3, os._exit, args=(1,)).start()
            return result
        return sleep
    _wrap(EngineCore, "sleep", make)


def _wake_awake_tag_aborts():
    from vllm.v1.executor.abstract import Executor

    def make(original):
        def wake_up(self, tags=None):
            if not self.is_sleeping:
                raise RuntimeError("wake_up called while awake")  # was a logged no-op (#31618)
            return original(self, tags)
        return wake_up
    _wrap(Executor, "wake_up", make)


def _abort_leaves_choices_running():
    import re
    from vllm.v1.engine.core import EngineCoreProc
    child = re.compile(r"^\d+_")  # parallel_sampling.py get_child_info: f"{index}_{parent id}"

    def make(original):
        def send_abort_outputs(self, aborted_reqs):
            # The engine aborts and frees every choice, but the abort of an n>1 request's choices
            # never reaches the front end: to the client they run on forever (#45326).
            return original(self, [r for r in aborted_reqs if not child.match(r.request_id)])
        return send_abort_outputs
    _wrap(EngineCoreProc, "_send_abort_outputs", make)


def _staged_wake_loses_weights():
    from vllm.v1.worker.gpu_worker import Worker
    calls = []

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if tags is not None and list(tags) == ["weights"]:
                calls.append(1)
                if len(calls) >= 3:
                    # From the third staged wake on, the restored weights are lost (zeroed, so the
                    # loss is certain rather than up to whatever the new pages held).
                    self.model_runner.model.lm_head.weight.data.zero_()
        return wake_up
    _wrap(Worker, "wake_up", make)


MUTANTS = {m.name: m for m in [
    Mutant("resume_on_partial_wake", "#44483 (reverted), #44395",
           "Scheduling resumes after a weights-only wake: requests run on the unmapped KV cache.",
           {"scheduler_gate": r"#44483"}, _resume_on_partial_wake),
    Mutant("prefix_cache_kept", "#17103, #22726",
           "Sleep does not reset the prefix cache: prompts hit blocks whose memory was discarded.",
           {"output_correctness": r"#17103/#22726"}, _prefix_cache_kept),
    Mutant("reload_weights_noop", "#29341, #54235",
           "collective_rpc reload_weights does nothing: level 2 wakes into garbage weights.",
           {"output_correctness": r"#29341/#54235", "physical_memory": r"#29341/#54235"},
           _reload_weights_noop),
    Mutant("leak_per_wake", "#21336, #36651",
           "Each wake leaks 64 MiB of GPU memory.",
           {"memory_leak_cycle": r"leak_bytes_per_cycle_max|cycle_bytes_flat_max"}, _leak_per_wake),
    Mutant("kv_cache_kept_on_sleep", "#11743, #47654",
           "Level-1 sleep does not release the KV cache.",
           {"physical_memory": r"level1_bytes_fraction_max|sleep_freed_kv_fraction_min|#11743"},
           _kv_cache_kept_on_sleep),
    Mutant("is_sleeping_false_partial", "#44483",
           "/is_sleeping reports false while a tag (or the scheduler) is still asleep.",
           {"flags": r"expected is_sleeping=True"}, _is_sleeping_false_partial),
    Mutant("gauge_not_updated", "vllm:engine_sleep_state",
           "The sleep-state gauge is not updated by /sleep.",
           {"flags": r"expected is_sleeping=True gauge=\((0,1,0|0,0,1|0,0,0)\), seen is_sleeping=True "
                     r"gauge=\(1,0,0\)"}, _gauge_not_updated),
    Mutant("slow_wake", "#45648",
           "Wake takes two seconds longer.",
           {"latency": r"wake_s_max|staged_wake_s_max|cycle_s_max"}, _slow_wake),
    Mutant("weights_perturbed", "#21336, #29341",
           "Weights come back slightly perturbed: logprobs drift while greedy tokens still match.",
           {"logprobs_precision": r"logprob_drift_max"}, _weights_perturbed),
    Mutant("engine_dies_on_sleep_during_decode", "#45520",
           "/sleep during decoding kills the engine core while the endpoint still returns 200.",
           # The engine's death surfaces either in the race oracle or as the front end's engine error.
           {"concurrent_race": r"#45326|#45520|EngineCore encountered an issue|EngineDeadError|"
                               r"Connection refused|ConnectionError"},
           _engine_dies_on_sleep_during_decode),
    Mutant("wake_awake_tag_aborts", "#31618",
           "Waking an engine that is awake fails the call instead of being a no-op.",
           {"error_paths": r"wake_while_awake"}, _wake_awake_tag_aborts),
    Mutant("abort_leaves_choices_running", "#45326, #45520",
           "sleep?mode=abort ends an n>1 request's choices in the engine but never tells the front "
           "end: the stream stays open.",
           {"abort_parallel_sampling": r"#45520/#45326 abort during parallel sampling"},
           _abort_leaves_choices_running),
    Mutant("staged_wake_loses_weights", "#21336",
           "From the third staged wake (weights, then kv_cache) on, the restored weights are lost: "
           "output is correct for two cycles, then garbage.",
           {"staged_wake_cycles": r"#21336 \(output degrades over cycles\)"}, _staged_wake_loses_weights),
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
