"""Mutants of code only an in-process front door runs: the offline door `vllm.LLM` and its `LLMEngine`
(vllm/entrypoints/llm.py, vllm/v1/engine/llm_engine.py of vLLM 0.26.0), as TRL's trainer holds them, and the
engine core TRL's colocate mode runs in its own process (vllm/v1/engine/core_client.py InprocClient,
vllm/v1/engine/core.py EngineCore.pause_scheduler).

The door host (tools/launcher/door_host.py) builds the `LLM` in its own process, where vLLM loads the plugin
while it parses the server's flags (EngineArgs.add_cli_args -> load_general_plugins), so these patches are
live there. On the `llm` door its engine core is a separate EngineCoreProc (`SyncMPClient`, vLLM's default
VLLM_ENABLE_V1_MULTIPROCESSING=1); on `llm_colocate` (distributed_executor_backend="external_launcher", as
TRL builds it) the engine core runs in the door host's process behind an `InprocClient`, and its
pause_scheduler is EngineCore's own (EngineCoreProc, every other door's, overrides it). vLLM's OpenAI server
never builds an `LLMEngine` or an `InprocClient`: in an HTTP cell the patches are applied and never reached
(the `_http` twin targets show it, tests/mutants/defs.bzl).

Left out, and why: the engine tier's `async_*` mutants of `AsyncLLM.wake_up`, `is_sleeping` and
`reset_prefix_cache`: vLLM's OpenAI server is itself an `AsyncLLM` front end (api_server.py
build_async_engine_client_from_engine_args; the /sleep, /wake_up, /is_sleeping and /reset_prefix_cache
routes await the same methods), so in the GPU matrix they are no door's own code: the HTTP cells run them
too, and an HTTP twin could not pass. (The engine tier's HTTP routes stand on a queue client, not on AsyncLLM,
which is why they stay green there.) Its pause mutants are HTTP's, in pausing.py.
"""

from .shared import replace, wrap


def _llm_engine():
    from vllm.v1.engine.llm_engine import LLMEngine

    return LLMEngine


def llm_wake_up_drops_tags():
    def make(original):
        def wake_up(self, tags=None):
            return original(self, None)  # every wake maps every pool and resumes scheduling

        return wake_up

    wrap(_llm_engine(), "wake_up", make)


def llm_sleep_ignores_level():
    def make(original):
        def sleep(self, level=1, mode="abort"):
            return original(self, level=1 if level >= 1 else 0, mode=mode)  # level 2 sleeps at level 1

        return sleep

    wrap(_llm_engine(), "sleep", make)


def llm_is_sleeping_stale():
    engine = _llm_engine()

    def remembering(asleep):
        def make(original):
            def call(self, *args, **kwargs):
                result = original(self, *args, **kwargs)
                self.sleepwake_asleep = asleep  # the front end's record of its last sleep or wake call
                return result

            return call

        return make

    def is_sleeping(self):
        return getattr(self, "sleepwake_asleep", False)  # never asks the engine core

    wrap(engine, "sleep", remembering(True))
    wrap(engine, "wake_up", remembering(False))
    replace(engine, "is_sleeping", is_sleeping)


def llm_collective_rpc_drops_kwargs():
    def make(original):
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            return original(self, method, timeout, args, None)  # the worker method runs with its defaults

        return collective_rpc

    wrap(_llm_engine(), "collective_rpc", make)


def llm_sleep_skips_gauge():
    def make(original):
        def sleep(self, level=1, mode="abort"):
            # The engine sleeps; its stat loggers are out of reach for the call, so record_sleep_state
            # never runs and vllm:engine_sleep_state keeps reading awake.
            managers, self.logger_manager = self.logger_manager, None
            try:
                return original(self, level=level, mode=mode)
            finally:
                self.logger_manager = managers

        return sleep

    wrap(_llm_engine(), "sleep", make)


def inproc_sleep_accepts_wait():
    from vllm.v1.engine.core_client import InprocClient

    def make(original):
        def sleep(self, level=1, mode="abort"):
            # "wait" needs the busy loop the in-process engine lacks, so vLLM refuses it; here it is
            # accepted and run as abort: the requests a wait would drain are ended, the call succeeds.
            return original(self, level, "abort" if mode == "wait" else mode)

        return sleep

    wrap(InprocClient, "sleep", make)


def inproc_sleep_keeps_prefix_cache():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def pause_scheduler(self, mode="abort", clear_cache=True):
            # The in-process engine's pause never clears the caches: a level >= 1 sleep keeps prefix-cache
            # entries for KV blocks it discards (#17103 on the engine TRL colocates).
            return original(self, mode=mode, clear_cache=False)

        return pause_scheduler

    wrap(EngineCore, "pause_scheduler", make)
