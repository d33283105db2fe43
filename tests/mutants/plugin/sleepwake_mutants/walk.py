"""Mutants only the state walk reaches: each breaks a contract on a pair of operations no other class
combines (a sleep during a level-0 pause, a sleep during a partial wake, a KV-cache-first wake's memory,
pause mode wait, a reload or a prefix-cache reset in a state other than awake, a reload over cached
blocks, two-tag and tag+scheduling wakes). vLLM 0.26.0's v1/engine/core.py, v1/engine/async_llm.py,
v1/executor/abstract.py and device_allocator/cumem.py. Those of the requests that wait (sent while
paused, frozen by a keep, arriving during a drain) are in waiting.py."""

from .shared import replace, wrap


def sleep_while_paused_keeps_prefix_cache():
    from vllm.v1.engine.core import EngineCore, EngineCoreProc

    def make_sleep(original):
        def sleep(self, level=1, mode="abort"):
            # A sleep that finds the scheduler paused already (a level-0 pause) skips the cache reset.
            self._sleepwake_keep_cache = self.is_scheduler_paused()
            try:
                return original(self, level, mode)
            finally:
                self._sleepwake_keep_cache = False

        return sleep

    def make_pause(original):
        def pause_scheduler(self, mode="abort", clear_cache=True):
            return original(
                self, mode=mode, clear_cache=clear_cache and not getattr(self, "_sleepwake_keep_cache", False)
            )

        return pause_scheduler

    wrap(EngineCore, "sleep", make_sleep)
    for cls in (EngineCore, EngineCoreProc):
        wrap(cls, "pause_scheduler", make_pause)


def gauge_sticky_while_asleep():
    from vllm.v1.engine.async_llm import AsyncLLM

    def make(original):
        async def sleep(self, level=1, mode="abort"):
            if await self.is_sleeping():
                # A /sleep that finds the engine asleep leaves the gauge at the earlier level.
                if level >= 1:
                    await self.renderer.clear_mm_cache_async()
                return await self.engine_core.sleep_async(level, mode)
            return await original(self, level, mode)

        return sleep

    wrap(AsyncLLM, "sleep", make)


def _pause_mode(rewrite):
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def sleep(self, level=1, mode="abort"):
            return original(self, level, rewrite(level, mode))

        return sleep

    wrap(EngineCore, "sleep", make)


def wait_mode_aborts():
    _pause_mode(lambda level, mode: "abort" if mode == "wait" else mode)


def level0_wait_freezes():
    # At level 0 mode wait freezes the requests in flight (mode keep) instead of draining them.
    _pause_mode(lambda level, mode: "keep" if mode == "wait" and level == 0 else mode)


def level0_abort_freezes():
    _pause_mode(lambda level, mode: "keep" if mode == "abort" and level == 0 else mode)


def reset_prefix_cache_fails_asleep():
    from vllm.v1.engine.async_llm import AsyncLLM

    def make(original):
        async def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
            if await self.is_sleeping():
                return False  # answered {"success": false}: the reset refused while the engine sleeps
            return await original(self, reset_running_requests, reset_connector)

        return reset_prefix_cache

    wrap(AsyncLLM, "reset_prefix_cache", make)


def reset_prefix_cache_noop():
    from vllm.v1.engine.async_llm import AsyncLLM

    async def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        return True  # reports the reset done; the cached blocks stay (a sleep's own reset still works)

    replace(AsyncLLM, "reset_prefix_cache", reset_prefix_cache)


def _kv_first_wake(map_weights: bool):
    from vllm.device_allocator.cumem import CuMemAllocator

    def make(original):
        def wake_up(self, tags=None):
            weights_asleep = any(d.tag == "weights" and d.is_asleep for d in self.pointer_to_data.values())
            if tags is not None and list(tags) == ["kv_cache"] and weights_asleep:
                # map_weights: the KV-cache wake maps the weights' pool too (their contents come back;
                # the executor still counts them asleep). Else it maps nothing and reports success.
                return original(self, ["kv_cache", "weights"]) if map_weights else None
            return original(self, tags)

        return wake_up

    wrap(CuMemAllocator, "wake_up", make)


def kv_wake_maps_weights():
    _kv_first_wake(map_weights=True)


def kv_wake_maps_nothing():
    _kv_first_wake(map_weights=False)


def sleep_during_partial_wake_sleeps_again():
    from vllm.v1.executor.abstract import Executor

    def make(original):
        def sleep(self, level=1):
            if self.is_sleeping and set(self.sleeping_tags) != {"weights", "kv_cache"}:
                self.is_sleeping = False  # the guard only knew "fully asleep": a partial wake sleeps again
            return original(self, level)

        return sleep

    wrap(Executor, "sleep", make)


def reload_resumes_scheduling():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            result = original(self, method, timeout, args, kwargs)
            if method == "reload_weights":
                self.resume_scheduler()  # a reload during a level-0 pause resumes scheduling
            return result

        return collective_rpc

    wrap(EngineCore, "collective_rpc", make)


def reload_resets_prefix_cache():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            result = original(self, method, timeout, args, kwargs)
            if method == "reload_weights":
                # #45093 (reverted by #46125): every weight update silently resets the prefix cache, a
                # decision the API leaves to the caller (/reset_prefix_cache).
                self.reset_prefix_cache()
            return result

        return collective_rpc

    wrap(EngineCore, "collective_rpc", make)


def two_tag_wake_maps_first_tag():
    from vllm.v1.executor.abstract import Executor

    def wake_up(self, tags=None):
        # abstract.py Executor.wake_up, but the workers are asked for the first tag only while every tag
        # named is counted awake: a wake of weights and kv_cache leaves the KV cache unmapped.
        if not self.is_sleeping:
            return
        if tags and any(tag not in self.sleeping_tags for tag in tags):
            return
        self.collective_rpc("wake_up", kwargs=dict(tags=list(tags[:1]) if tags else tags))
        if tags:
            self.sleeping_tags.difference_update(tags)
        else:
            self.sleeping_tags.clear()
        if not self.sleeping_tags:
            self.is_sleeping = False

    replace(Executor, "wake_up", wake_up)


def scheduling_tag_kept():
    from vllm.v1.engine.core import EngineCore

    def wake_up(self, tags=None):
        # core.py EngineCore.wake_up, but "scheduling" is dropped only when it is the one tag: beside another
        # tag it reaches the executor, which ignores a call naming a tag that is not asleep.
        if tags == ["scheduling"]:
            tags = []
        if tags is None or tags:
            self.model_executor.wake_up(tags)
        if not self.model_executor.is_sleeping:
            self.resume_scheduler()

    replace(EngineCore, "wake_up", wake_up)
