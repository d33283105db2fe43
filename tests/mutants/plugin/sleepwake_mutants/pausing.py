"""Mutants of pausing generation for a weight update: AsyncLLM.pause_generation, resume_generation and
is_paused (vllm/v1/engine/async_llm.py of vLLM 0.26.0), which the dev routes /pause, /resume and /is_paused
await (entrypoints/serve/dev/rlhf/api_router.py) and an RL trainer holding AsyncLLM calls itself (OpenRLHF's
partial rollout, SkyRL's fully async training over HTTP). Nothing else in vLLM calls them: a sleep pauses
the engine core's scheduler directly (EngineCore.sleep).

The engine tier (tests/engine) drives the same AsyncLLM on the CPU: its catalogue reuses async_pause_keep_aborts."""

from .shared import replace, wrap


def _async_llm():
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM


def _pause_rewritten(rewrite):
    """pause_generation with (mode, clear_cache) = rewrite(mode, clear_cache) on every call."""

    def make(original):
        async def pause_generation(self, *, mode="abort", wait_for_inflight_requests=None, clear_cache=True):
            mode, clear_cache = rewrite(mode, clear_cache)
            await original(
                self, mode=mode, wait_for_inflight_requests=wait_for_inflight_requests, clear_cache=clear_cache
            )

        return pause_generation

    wrap(_async_llm(), "pause_generation", make)


def async_pause_keep_aborts():
    # keep is taken for abort: the requests a trainer froze for the update end instead of resuming.
    _pause_rewritten(lambda mode, clear_cache: ("abort" if mode == "keep" else mode, clear_cache))


def async_pause_ignores_clear_cache():
    # keep ignores the caller's clear_cache, as the /pause docstring says it does, so the default (True)
    # applies: the frozen requests are preempted and the prefix cache is emptied.
    _pause_rewritten(lambda mode, clear_cache: (mode, True if mode == "keep" else clear_cache))


def async_is_paused_false():
    async def is_paused(self):
        return False  # answered by the front end, which never asks the engine core's scheduler

    replace(_async_llm(), "is_paused", is_paused)


def async_resume_does_nothing():
    async def resume_generation(self):
        return None  # answered, but the scheduler stays paused: frozen and queued requests never run

    replace(_async_llm(), "resume_generation", resume_generation)
