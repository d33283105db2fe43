"""Engine-tier mutants: catalogued sleep-mode bugs re-introduced into vLLM's real classes at test time.

SLEEPWAKE_ENGINE_MUTANT names one; tests/engine/conftest.py applies it before any test runs (and
prints sleepwake_mutants.ACTIVATION; each patch prints REACHED at its first call), so no vLLM file is
edited. The GPU mutant plugin (tests/mutants/plugin/sleepwake_mutants) is the same idea for vLLM
servers; where a bug lives in the engine core, its patch is reused from there rather than written twice.

`kills` maps the engine tests (file::name) that must fail under the mutant to the oracle ids one of
which each failure must carry (JUnit properties, as the GPU tier's: tests/core/verdict.py): failing
for another reason, or with no oracle, does not show that the tier detects the bug. `fails_as` as in the
plugin: a liveness oracle (api.status, api.answers) kills only a defect marked as what it sees.
Importable without vLLM (the harness lists the catalogue before forking); patches import vLLM lazily.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import sleepwake_mutants
from sleepwake_mutants import ERROR_ANSWER, shared

ENV = "SLEEPWAKE_ENGINE_MUTANT"


@dataclasses.dataclass(frozen=True)
class Mutant(sleepwake_mutants.Mutant):
    """The GPU plugin's Mutant, whose patch may also be a function of this module (engine-only bugs);
    a reused plugin bug keeps the plugin's "module:function"."""

    patch: str | Callable[[], None]  # type: ignore[assignment]  # wider than the plugin's, for engine-only bugs

    def apply(self) -> None:
        if callable(self.patch):
            shared.applying(self.name)
            self.patch()
        else:
            super().apply()


def _no_double_sleep_guard():
    from vllm.v1.executor.abstract import Executor

    def make(original):
        def sleep(self, level=1):
            self.is_sleeping = False  # the guard reads this: a second sleep reaches the workers again
            return original(self, level)

        return sleep

    shared.wrap(Executor, "sleep", make)


def _offload_before_drain():
    from vllm.v1.engine.core import EngineCoreProc

    def make(original):
        def pause_scheduler(self, mode="abort", clear_cache=True):
            original(self, mode=mode, clear_cache=clear_cache)
            return None  # "paused at once": EngineCore.sleep offloads without waiting for the drain

        return pause_scheduler

    shared.wrap(EngineCoreProc, "pause_scheduler", make)


def _is_sleeping_ignores_executor():
    from vllm.v1.engine.core import EngineCore

    shared.replace(EngineCore, "is_sleeping", lambda self: self.is_scheduler_paused())


def _abort_outputs_dropped():
    from vllm.v1.engine.core import EngineCoreProc

    shared.replace(EngineCoreProc, "_send_abort_outputs", lambda self, aborted_reqs: None)


# The offline front door's own code (vllm.LLM, LLMEngine, InprocClient, and EngineCore.pause_scheduler,
# which only the in-process engine runs: EngineCoreProc overrides it): killed by tests/engine/test_llm_door.py.
def _llm_wake_up_drops_tags():
    from vllm.v1.engine.llm_engine import LLMEngine

    def make(original):
        return lambda self, tags=None: original(self, None)  # every wake maps every pool

    shared.wrap(LLMEngine, "wake_up", make)


def _llm_sleep_ignores_level():
    from vllm.v1.engine.llm_engine import LLMEngine

    def make(original):
        return lambda self, level=1, mode="abort": original(self, 1 if level >= 1 else 0, mode)

    shared.wrap(LLMEngine, "sleep", make)


def _inproc_sleep_skips_pause():
    from vllm.v1.engine.core_client import InprocClient

    def sleep(self, level=1, mode="abort"):
        if level >= 1:
            self.engine_core.model_executor.sleep(level)  # the executor alone: the scheduler keeps running

    shared.replace(InprocClient, "sleep", sleep)


def _inproc_keep_aborts():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        return lambda self, mode="abort", clear_cache=True: original(
            self, mode="abort" if mode == "keep" else mode, clear_cache=clear_cache
        )

    shared.wrap(EngineCore, "pause_scheduler", make)


# The async front door's own code (vllm.v1.engine.async_llm.AsyncLLM, in the caller's process; its engine core
# is a forked EngineCoreProc the patches do not touch): killed by tests/engine/test_async_llm_door.py.
def _async_wake_up_drops_tags():
    from vllm.v1.engine.async_llm import AsyncLLM

    def make(original):
        async def wake_up(self, tags=None):
            await original(self, None)  # every wake maps every pool

        return wake_up

    shared.wrap(AsyncLLM, "wake_up", make)


def _async_is_sleeping_stale():
    from vllm.v1.engine.async_llm import AsyncLLM

    def remembering(asleep):
        def make(original):
            async def call(self, *args, **kwargs):
                await original(self, *args, **kwargs)
                self.sleepwake_asleep = asleep  # the front end's record of its last call

            return call

        return make

    async def is_sleeping(self):
        return getattr(self, "sleepwake_asleep", False)  # never asks the engine

    shared.wrap(AsyncLLM, "sleep", remembering(True))
    shared.wrap(AsyncLLM, "wake_up", remembering(False))
    shared.replace(AsyncLLM, "is_sleeping", is_sleeping)


def _async_reset_prefix_cache_unsent():
    from vllm.v1.engine.async_llm import AsyncLLM

    async def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        return True  # answered by the front end; the engine's cache keeps its blocks

    shared.replace(AsyncLLM, "reset_prefix_cache", reset_prefix_cache)


def _plugin(name: str) -> dict:
    """The plugin entry's issue, doc and patch, for a bug reused from it."""
    m = sleepwake_mutants.MUTANTS[name]
    return {"issue": m.issue, "doc": m.doc, "patch": m.patch}


_GATE = "tests/engine/test_partial_wake.py::"
_BOOK = "tests/engine/test_bookkeeping.py::"
_WALK = "tests/engine/test_state_walk.py::test_walk_visits_every_pair_of_its_shard"
_LLM = "tests/engine/test_llm_door.py::"
_ASYNC = "tests/engine/test_async_llm_door.py::"
HELD = ("requests.held_until_resident", "requests.held_while_asleep")
MUTANTS = {
    m.name: m
    for m in [
        Mutant(
            "resume_on_partial_wake",
            kills={
                _GATE + "test_partial_wake_keeps_scheduling_paused": HELD,
                _GATE + "test_scheduling_tag_does_not_resume_a_partial_wake": HELD,
                "tests/engine/test_http_routes.py::test_partial_wake_over_http_holds_the_request": HELD,
                _BOOK + "test_unknown_tag_is_ignored": HELD,
                _BOOK + "test_an_awake_tag_beside_a_sleeping_one_wakes_neither": HELD,
            },
            **_plugin("resume_on_partial_wake"),
        ),
        # The second sleep reaches the worker, which unmaps released memory: a CUDA error, the call's error answer.
        Mutant(
            "no_double_sleep_guard",
            "#31618, #48310",
            "Executor.sleep loses its `is_sleeping` guard: a second /sleep reaches the workers and "
            "unmaps memory that is already released.",
            {_BOOK + "test_second_sleep_is_a_no_op": ("api.status", "executor.worker_calls")},
            _no_double_sleep_guard,
            fails_as=(ERROR_ANSWER,),
        ),
        Mutant(
            "offload_before_drain",
            "#45520, #34528",
            "sleep(mode='wait') offloads at once instead of after the in-flight requests finish: the "
            "next decode step runs on released memory.",
            {"tests/engine/test_pause_modes.py::test_wait_mode_drains_before_offload": ("requests.ends_in_race",)},
            _offload_before_drain,
        ),
        Mutant(
            "is_sleeping_ignores_executor",
            "#34528, #44483",
            "EngineCore.is_sleeping reads only the scheduler's pause: an engine whose memory is "
            "released but whose scheduler was resumed reads awake.",
            {_BOOK + "test_is_sleeping_reads_the_executor": ("flags.is_sleeping",)},
            _is_sleeping_ignores_executor,
        ),
        Mutant(
            "wake_awake_tag_aborts",
            kills={_BOOK + "test_wake_while_awake_is_a_no_op": ("api.status",)},
            fails_as=(ERROR_ANSWER,),
            **_plugin("wake_awake_tag_aborts"),
        ),
        # The shards whose walks reach it: they move with the plan (plan.plan_walks), and this test's
        # failure names the ones that killed it.
        Mutant(
            "sleep_while_paused_keeps_prefix_cache",
            kills={_WALK + f"[shard{k}]": ("prefix_cache.hit_iff_cached",) for k in (0, 2)},
            **_plugin("sleep_while_paused_keeps_prefix_cache"),
        ),
        # The walk's newer regions (the plugin's waiting.py and walk.py), the plugin's patches as they are: each
        # killed by three of the walk's shards that reach it early (docs/walk-reach.md names the pair), but
        # abort_spares_waiting: where an abort sleep leaves a waiting request open, the walk's engine tier stops
        # at liveness.NoAnswer (a wall-clock wait that ran out: errored, engine_walk._ended), so a test of its own
        # shows it, stepping the engine (no wall-clock wait). pause_mode_sticky's ends_in_race is read when the
        # wait sleep answered (engine_walk._judge_existing), no wait either: neither entry is marked a hang here.
        Mutant(
            "abort_spares_waiting",
            kills={
                "tests/engine/test_pause_modes.py::test_abort_mode_ends_the_waiting_requests_too": (
                    "requests.abort_aborts",
                )
            },
            **_plugin("abort_spares_waiting"),
        ),
        *[
            Mutant(name, kills={_WALK + f"[shard{k}]": ids for k in shards}, **_plugin(name))
            for name, shards, ids in (
                ("paused_new_admits_waiting", (0, 1, 2), ("requests.held_while_paused", "requests.held_while_asleep")),
                ("drain_admits_late_arrivals", (0, 1, 3), ("requests.held_while_paused", "requests.held_while_asleep")),
                (
                    "keep_without_preemption",
                    (5, 8, 10),
                    ("prefix_cache.hit_iff_cached", "api.reset_prefix_cache_result"),
                ),
                ("scheduling_tag_resumes", (0, 1, 2), HELD),
                ("wake_aborts_queued", (0, 1, 2), ("output.finish_length",)),
                ("keep_reset_aborts_frozen", (0, 1, 2), ("requests.held_while_asleep",)),
                ("preempted_restarts_output", (2, 3, 4), ("output.finish_length", "requests.resumes_after_keep")),
                ("reset_prefix_cache_preempts_running", (1, 4, 10), ("api.reset_prefix_cache_result",)),
                ("reload_resets_prefix_cache", (0, 1, 2), ("prefix_cache.hit_iff_cached",)),
                ("two_tag_wake_maps_first_tag", (1, 4, 6), ("device_bytes.wake_shortfall",)),
                # Here the fake worker's pool flags show the weights left asleep (the GPU's band cannot: model.py).
                ("scheduling_tag_kept", (0, 1, 2), ("flags.is_sleeping", "device_bytes.weights_wake_mapped")),
                ("pause_mode_sticky", (0, 2, 3), ("requests.ends_in_race",)),
                ("reload_aborts_requests", (0, 1, 2), ("requests.held_while_paused", "requests.held_until_resident")),
            )
        ],
        Mutant(
            "llm_wake_up_drops_tags",
            "#34528 (LLM.wake_up tags); vLLM's sleep-mode recipe: wake the weights, load new ones, then the KV cache",
            "LLM.wake_up(tags) wakes every pool whatever the tags: a trainer's wake of the weights alone, to "
            "load new ones before the KV cache comes back, maps the KV cache too.",
            {_LLM + "test_llm_sleeps_and_wakes_at_each_level_and_serves_after": ("flags.is_sleeping",)},
            _llm_wake_up_drops_tags,
        ),
        Mutant(
            "llm_sleep_ignores_level",
            "#34528 (LLM.sleep level); the level-2 refit recipe",
            "LLM.sleep(level=2) sleeps at level 1: the weights are copied to host memory instead of "
            "discarded, and a refit's reload lands on the old weights' host copy.",
            {_LLM + "test_llm_sleeps_and_wakes_at_each_level_and_serves_after": ("executor.worker_calls",)},
            _llm_sleep_ignores_level,
        ),
        Mutant(
            "inproc_sleep_skips_pause",
            "#34528 (sleep/pause with the inline engine), #31618",
            "The in-process engine's sleep releases memory without pausing the scheduler: requests enqueued "
            "at level 0 run, and at level 1 a forward pass touches released memory.",
            {_LLM + "test_llm_level0_holds_enqueued_requests_until_scheduling_wakes": ("flags.is_sleeping",)},
            _inproc_sleep_skips_pause,
        ),
        Mutant(
            "inproc_keep_aborts",
            "#32351 (pause mode keep)",
            "The in-process engine treats mode keep as abort: a request kept across a level-0 sleep is "
            "ended instead of resumed.",
            {_LLM + "test_llm_keep_freezes_an_enqueued_request_and_it_resumes": ("requests.resumes_after_keep",)},
            _inproc_keep_aborts,
        ),
        Mutant(
            "async_wake_up_drops_tags",
            "#34528 (wake_up tags); verl's and NeMo-RL's refit: wake the weights, load new ones, then the KV cache",
            "AsyncLLM.wake_up(tags) wakes every pool whatever the tags: a rollout actor's wake of the weights "
            "alone, to load new ones before the KV cache comes back, maps the KV cache too.",
            {_ASYNC + "test_async_sleep_and_staged_wake_serve_the_tokens_of_before": ("flags.is_sleeping",)},
            _async_wake_up_drops_tags,
        ),
        Mutant(
            "async_is_sleeping_stale",
            "#44483 (/is_sleeping after a partial wake), #34528",
            "AsyncLLM.is_sleeping answers from the front end's record of its last sleep or wake call instead "
            "of asking the engine: after a wake of the weights alone it reads awake while the KV cache sleeps.",
            {_ASYNC + "test_async_sleep_and_staged_wake_serve_the_tokens_of_before": ("flags.is_sleeping",)},
            _async_is_sleeping_stale,
        ),
        Mutant(
            "async_reset_prefix_cache_unsent",
            "#17103, #22726 (stale prefix cache)",
            "AsyncLLM.reset_prefix_cache answers True without reaching the engine: the next rollout hits "
            "blocks cached with the old weights.",
            {_ASYNC + "test_async_reset_prefix_cache_empties_the_cache": ("prefix_cache.hit_iff_cached",)},
            _async_reset_prefix_cache_unsent,
        ),
        Mutant(
            "async_pause_keep_aborts",
            kills={
                _ASYNC + "test_async_keep_freezes_the_request_in_flight_and_it_resumes[pause]": (
                    "requests.held_while_paused",
                    "requests.resumes_after_keep",
                )
            },
            **_plugin("async_pause_keep_aborts"),
        ),
        Mutant(
            "abort_outputs_dropped",
            "#45326, #45520",
            "sleep(mode='abort') aborts the in-flight requests in the engine but never tells the "
            "front end: their streams stay open.",
            {
                "tests/engine/test_pause_modes.py::test_abort_mode_sends_abort_outputs_before_offload": (
                    "requests.abort_aborts",
                )
            },
            _abort_outputs_dropped,
        ),
    ]
}


def apply(name: str) -> None:
    """Applies the named mutant ("none" or "": nothing); unknown names raise with the known ones."""
    if name in ("", "none"):
        return
    if name not in MUTANTS:
        raise ValueError(f"{ENV}={name!r} names no engine mutant; known: {', '.join(sorted(MUTANTS))}")
    from tests.engine.lib import cpu_vllm  # noqa: F401  (pins vLLM's platform before the patch imports it)

    MUTANTS[name].apply()
