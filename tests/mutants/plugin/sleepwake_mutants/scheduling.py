"""Mutants of the engine core's scheduling, flags and request handling (vllm/v1/engine/core.py,
vllm/v1/engine/async_llm.py, vllm/v1/executor/abstract.py of vLLM 0.26.0)."""

import os
import re
import threading

from .shared import replace, wrap


def resume_on_partial_wake():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            self.resume_scheduler()  # the #44483 fix resumed only once every tag was resident

        return wake_up

    wrap(EngineCore, "wake_up", make)


def prefix_cache_kept():
    from vllm.v1.engine.core import EngineCore, EngineCoreProc

    def make(original):
        def pause_scheduler(self, mode="abort", clear_cache=True):
            return original(self, mode=mode, clear_cache=False)  # sleep no longer resets the cache

        return pause_scheduler

    for cls in (EngineCore, EngineCoreProc):
        wrap(cls, "pause_scheduler", make)


def prefix_cache_reset_on_level0():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def sleep(self, level=1, mode="abort"):
            result = original(self, level, mode)
            if level == 0:
                # Level 0 only pauses scheduling (EngineCore.sleep: clear_prefix_cache = level >= 1);
                # this throws the cached blocks away as if the KV cache had been discarded.
                self.reset_prefix_cache()
            return result

        return sleep

    wrap(EngineCore, "sleep", make)


def sleep_drains_instead_of_aborting():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def sleep(self, level=1, mode="abort"):
            # mode=abort behaves like mode=wait: in-flight requests run to the end before the sleep.
            return original(self, level, "wait" if mode == "abort" else mode)

        return sleep

    wrap(EngineCore, "sleep", make)


def request_runs_while_asleep():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def add_request(self, request, request_wave=0):
            result = original(self, request, request_wave)
            if self.model_executor.is_sleeping:
                # The request is scheduled at once, onto unmapped weights and KV cache, instead of
                # waiting in the paused scheduler for the wake.
                self.resume_scheduler()
            return result

        return add_request

    wrap(EngineCore, "add_request", make)


def is_sleeping_false_partial():
    from vllm.v1.engine.core import EngineCore

    def is_sleeping(self):
        # Only "fully asleep" counts: a partial wake or a level-0 pause reads awake.
        executor = self.model_executor
        return bool(executor.is_sleeping) and set(executor.sleeping_tags) >= {"weights", "kv_cache"}

    replace(EngineCore, "is_sleeping", is_sleeping)


def gauge_not_updated():
    from vllm.v1.engine.async_llm import AsyncLLM

    async def sleep(self, level=1, mode="abort"):
        if level >= 1:
            await self.renderer.clear_mm_cache_async()
        await self.engine_core.sleep_async(level, mode)  # record_sleep_state(1, level) dropped

    replace(AsyncLLM, "sleep", sleep)


def engine_dies_on_sleep_during_decode():
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

    wrap(EngineCore, "sleep", make)


def wake_awake_tag_aborts():
    from vllm.v1.executor.abstract import Executor

    def make(original):
        def wake_up(self, tags=None):
            if not self.is_sleeping:
                raise RuntimeError("wake_up called while awake")  # was a logged no-op (#31618)
            return original(self, tags)

        return wake_up

    wrap(Executor, "wake_up", make)


def abort_leaves_choices_running():
    from vllm.v1.engine.core import EngineCoreProc

    child = re.compile(r"^\d+_")  # parallel_sampling.py get_child_info: f"{index}_{parent id}"

    def make(original):
        def send_abort_outputs(self, aborted_reqs):
            # The engine aborts and frees every choice, but the abort of an n>1 request's choices
            # never reaches the front end: to the client they run on forever (#45326).
            return original(self, [r for r in aborted_reqs if not child.match(r.request_id)])

        return send_abort_outputs

    wrap(EngineCoreProc, "_send_abort_outputs", make)


def executor_wake_skips_tag_guard():
    from vllm.v1.executor.abstract import Executor

    def wake_up(self, tags=None):
        if not self.is_sleeping:
            return
        # No check that each tag still sleeps (vllm-omni #4473): a wake of a resident pool reaches the
        # workers, whose CuMemAllocator.wake_up maps every allocation of the tag again.
        self.collective_rpc("wake_up", kwargs=dict(tags=tags))
        self.sleeping_tags = set() if not tags else self.sleeping_tags - set(tags)
        self.is_sleeping = bool(self.sleeping_tags)

    replace(Executor, "wake_up", wake_up)


def sleep_skips_scheduler_pause():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def sleep(self, level=1, mode="abort"):
            if level < 1:
                return original(self, level, mode)
            # The executor sleeps at once, as a worker-level sleep does: the scheduler is not paused, so
            # nothing is aborted or held, and the prefix cache keeps blocks whose KV the sleep discards.
            self.model_executor.sleep(level)
            return None

        return sleep

    wrap(EngineCore, "sleep", make)
