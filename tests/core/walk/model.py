"""What a client of a sleep-mode vLLM server observes, as pure functions of a small state.

The walk (operations.py, plan.py) drives a server through sequences of sleep-API calls and requests and
checks after every step what this module predicts for the state it believes the server is in. The
predictions follow vLLM 0.26.0's source, which 0.24.0 and 0.25.0 share for the sleep path (the same
lines tests/sleep_wake/fakes/fake_engine.py follows); where a release diverges from what the API
documents, the prediction takes the pinned value from thresholds.KNOWN_DIVERGENCES for the release.

Memory predictions depend on the state only, never on the history that led to it: every bound is
relative to readings taken once per server (Sizes, the host bytes awake) and to the thresholds table.
"""

from __future__ import annotations

import dataclasses

from tests.core import host_bands, metrics, thresholds

WEIGHTS, KV_CACHE = "weights", "kv_cache"
TAGS = (WEIGHTS, KV_CACHE)
CHECKPOINTS = ("A", "B")  # A: what the server starts on; B: same shapes, other seed (pushed)
# What a forward computes with after a level-2 sleep woke without a reload: the weights pool is mapped
# again but holds whatever the new pages hold. No golden predicts its tokens; its status, finish reason
# and token count are still the API's to keep.
GARBAGE = "garbage"
# Level 3 (known divergence sleep_level_out_of_range_accepted) is left out: only level 2 saves the model
# buffers (gpu_worker.py:197), which live in the weights pool, and reload_weights loads parameters only
# (gpu_model_runner.py:5506, 5529; reload/layerwise.py:258-269 puts a layer without weights, such as the
# rotary embedding's cos_sin_cache, back as it was), so after level 3 no reset sequence short of a
# restart is known to bring back INITIAL.
LEVELS = (0, 1, 2)
# vLLM's scheduler pause (v1/core/sched/interface.py PauseState): a keep sleep pauses everything, so
# requests in flight freeze where they are (PAUSED_ALL); abort and wait stop only new requests, so the
# running ones may still be stepped (PAUSED_NEW: a wait sleep drains them). core.py pause_scheduler.
PAUSE_NEW, PAUSE_ALL = "new", "all"
PAUSES = (None, PAUSE_NEW, PAUSE_ALL)
# The walk's prompts: "short" is shorter than one KV block (16 tokens), so the prefix cache never holds
# it; "long" spans several blocks, so a repeat hits the cache when its blocks are there.
PROMPT_KINDS = ("short", "long")
# Requests sent while scheduling is paused wait in the scheduler's queue: "plain" ones (a short prompt,
# n=4, a stream), "long" ones, whose blocks fill the prefix cache once they run, and "long_pair": a second
# long prompt (or more) waiting beside the first, which hits the first one's blocks when both run
# (long_prompts_hit).
QUEUED_KINDS = ("plain", "long", "long_pair")


@dataclasses.dataclass(frozen=True)
class State:
    """The server as the walk models it; every field is what some observation depends on.

    level: the executor's sleep level while a tag is asleep (1 or 2; a second /sleep does not change
      it, abstract.py sleep returns when already sleeping), 0 while only scheduling is paused, None
      when fully awake.
    asleep_tags: the executor's sleeping tags.
    pause: the scheduler's pause (PAUSE_NEW, PAUSE_ALL or None), by a /sleep or a /pause alike (both are
      core.py pause_scheduler); a wake lifts it only once no tag is asleep (core.py wake_up), /resume
      whatever sleeps (core.py resume_scheduler: with a tag asleep that is a terminal pair).
    gauge_level: the level of the last /sleep, None once a /wake_up came after it: the gauge shows
      what vLLM wrote last (async_llm.py sleep and wake_up each call record_sleep_state; /pause and
      /resume write nothing, so after a level-0 sleep lifted by /resume it still reads level 0).
    weights: what the weights pool holds once resident: "A", "B", or None for garbage (a level-2 sleep
      keeps no copy; it stays garbage until a reload). While a level-1 sleep holds the host copy, the
      copy's checkpoint.
    model_path: what reload_weights without a path loads: the last checkpoint pushed with a path
      (known divergence reload_without_path_loads_last_pushed, which the transitions assume). A push of
      tensors (operations.push: the model's load_weights, past reload_weights) does not move it, so the
      weights may differ from it: a later reload without a path then loads it (TRL #5312's revert).
    host_cached: PyTorch's caching host allocator holds a weight-sized pinned block since a level-1
      copy was given back by a wake (known divergence host_copy_cached_after_wake). Nothing short of
      a restart clears it, so plan.py leaves it out of coverage pairs.
    prefix: what the long prompt's cached KV blocks were computed with ("A", "B" or GARBAGE), None
      when they are not cached. A reload keeps them (the caller resets the cache after a weight
      update: vLLM's RLHF examples do), so they may be stale: computed with other weights than serve.
    held: a streaming request a keep sleep froze mid-decode, by the weights that computed its first
      tokens ("A", "B" or GARBAGE); None when there is none. It finishes once scheduling resumes.
    held_kv: the held request still owns its KV blocks (a level-0 keep: it sits in the running queue
      and resumes where it stopped); False once a cache reset preempted it to the waiting queue (a
      level >= 1 sleep's, or a /pause with clear_cache: scheduler.py
      reset_prefix_cache(reset_running_requests=True)): the wake or /resume that runs it recomputes its
      prompt and tokens so far, then it goes on.
    queued: the kinds of requests sent while scheduling was paused (QUEUED_KINDS), waiting in the
      scheduler's queue until scheduling resumes or an abort sleep ends them.
    """

    level: int | None = None
    asleep_tags: frozenset = frozenset()
    pause: str | None = None
    gauge_level: int | None = None
    weights: str | None = "A"
    model_path: str = "A"
    host_cached: bool = False
    prefix: str | None = None
    held: str | None = None
    held_kv: bool = False
    queued: frozenset = frozenset()

    def __post_init__(self):
        problem = _inconsistency(self)
        if problem:
            raise ValueError(f"inconsistent walk state {self}: {problem}; fix the transition that made it")

    @property
    def paused(self) -> bool:
        return self.pause is not None

    @property
    def prefix_cached(self) -> bool:
        return self.prefix is not None

    def sort_key(self) -> tuple:
        """A total order independent of hash seeds (frozenset and None do not sort by themselves)."""
        return (
            -1 if self.level is None else self.level,
            tuple(sorted(self.asleep_tags)),
            self.pause or "",
            -1 if self.gauge_level is None else self.gauge_level,
            self.weights or "",
            self.model_path,
            self.host_cached,
            self.prefix or "",
            self.held or "",
            self.held_kv,
            tuple(sorted(self.queued)),
        )

    def describe(self) -> str:
        where = "awake" if self.level is None else f"level {self.level}"
        parts = [where]
        if self.asleep_tags:
            parts.append("asleep " + "+".join(sorted(self.asleep_tags)))
        if self.paused:
            parts.append(f"paused ({'all' if self.pause == PAUSE_ALL else 'new requests'})")
        if self.gauge_level is not None:
            parts.append(f"gauge level {self.gauge_level}")
        parts.append(f"weights {self.weights or GARBAGE}")
        parts.append(f"path {self.model_path}")
        if self.host_cached:
            parts.append("host cached")
        if self.prefix is not None:
            parts.append(f"prefix cached ({self.prefix}{', stale' if self.prefix != served(self) else ''})")
        if self.held is not None:
            parts.append(f"held stream ({self.held}, {'KV kept' if self.held_kv else 'preempted'})")
        if self.queued:
            parts.append("queued " + "+".join(sorted(self.queued)))
        return ", ".join(parts)


def served(state: State) -> str:
    """What a forward computes with once the weights are resident: a checkpoint's name or GARBAGE."""
    return state.weights or GARBAGE


def _inconsistency(s: State) -> str | None:
    if s.level not in (None,) + LEVELS or s.gauge_level not in (None,) + LEVELS:
        return "levels are None, 0, 1 or 2"
    if not s.asleep_tags <= set(TAGS):
        return f"tags are a subset of {TAGS}"
    if s.pause not in PAUSES:
        return f"pauses are {PAUSES}"
    if s.weights not in CHECKPOINTS + (None,) or s.model_path not in CHECKPOINTS:
        return f"checkpoints are {CHECKPOINTS}"
    if s.asleep_tags and not (s.paused and s.level in (1, 2)):
        return "a tag asleep means a level-1 or level-2 sleep with scheduling paused"
    if not s.asleep_tags and s.level != (0 if s.paused else None):
        return "with no tag asleep the level is 0 while paused, None otherwise"
    if not s.paused and s.gauge_level not in (None, 0):
        return (
            "scheduling resumes in a wake, which writes the awake gauge, or in a /resume, which only a "
            "level-0 sleep's pause leaves to lift (with a tag asleep it is a terminal pair)"
        )
    if s.prefix not in (None, GARBAGE) + CHECKPOINTS or s.held not in (None, GARBAGE) + CHECKPOINTS:
        return f"blocks and tokens are computed with {CHECKPOINTS} or {GARBAGE}"
    if (s.held is not None or s.queued) and not s.paused:
        return "requests wait only while scheduling is paused: the wake that resumes it runs them"
    if s.held_kv and (s.held is None or s.pause != PAUSE_ALL or s.level != 0):
        return (
            "a held request keeps its KV blocks only under a level-0 keep: a new-requests pause "
            "drains it, a level >= 1 sleep's cache reset preempts it"
        )
    if not set(s.queued) <= set(QUEUED_KINDS):
        return f"queued requests are of the kinds {QUEUED_KINDS}"
    if "long_pair" in s.queued and "long" not in s.queued:
        return "a second long prompt waits only beside a first"
    return None


INITIAL = State()


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Readings of one server taken at the start of its first walk (state INITIAL, after a forward):
    awake_bytes its processes' GPU bytes (NVML), weights_bytes the checkpoint's tensor bytes,
    kv_bytes the KV cache it was given (SLEEPWAKE_KV_CACHE_BYTES)."""

    awake_bytes: int
    weights_bytes: int
    kv_bytes: int


@dataclasses.dataclass(frozen=True)
class Bound:
    oracle: str
    relation: str  # ">=" or "<="
    value: float
    what: str

    def holds(self, measured: float) -> bool:
        return measured >= self.value if self.relation == ">=" else measured <= self.value


@dataclasses.dataclass(frozen=True)
class Band:
    """Bytes predicted for a state: every bound must hold, each failing one fails its own oracle."""

    bounds: tuple

    @property
    def lo(self) -> float:
        return max([b.value for b in self.bounds if b.relation == ">="], default=0)

    @property
    def hi(self) -> float:
        return min([b.value for b in self.bounds if b.relation == "<="], default=float("inf"))

    def violations(self, measured: float) -> list:
        return [b for b in self.bounds if not b.holds(measured)]


# --- flags ---------------------------------------------------------------------------------------
def sleeping(state: State) -> bool:
    """/is_sleeping (core.py:916-918): the scheduler paused or a tag asleep."""
    return state.paused or bool(state.asleep_tags)


def is_paused(state: State) -> bool:
    """/is_paused (core.py is_scheduler_paused): the scheduler's pause, whether a /sleep or a /pause set it
    [oracle flags.is_paused]."""
    return state.paused


def flags(state: State, version: str) -> tuple[bool, dict]:
    """(/is_sleeping, vllm:engine_sleep_state) [oracles flags.is_sleeping, flags.gauge].

    The gauge is what the last call wrote: /sleep?level=L writes record_sleep_state(1, L) every time, the
    executor asleep or not (async_llm.py:937); /wake_up writes (0, 0) (async_llm.py:943), so after a wake
    that left a tag asleep it reads awake on the releases of gauge_awake_while_partially_asleep and the
    slept level's gauge where vLLM behaves as documented."""
    is_sleeping = sleeping(state)
    if state.gauge_level is not None:
        return is_sleeping, dict(metrics.GAUGE_BY_LEVEL[state.gauge_level])
    if state.asleep_tags:
        pin = thresholds.divergence("gauge_awake_while_partially_asleep", version)
        return is_sleeping, dict(pin.expected[state.level])
    return is_sleeping, dict(metrics.GAUGE_AWAKE)


# --- requests ------------------------------------------------------------------------------------
def can_run(state: State) -> bool:
    """A request sent now is scheduled and completes (scheduling resumes only with every tag resident)."""
    return not state.paused and not state.asleep_tags


def serves(state: State) -> str | None:
    """The checkpoint whose golden a request returns once it runs; None: garbage weights (after a
    level-2 sleep, until a reload), whose output no golden predicts."""
    return state.weights


def golden_oracle(of) -> str:
    """The oracle a golden mismatch fails, for a State or a checkpoint's name: the pushed checkpoint's
    own while B serves, else the plain one."""
    name = of.weights if isinstance(of, State) else of
    return "weights.pushed_checkpoint_golden" if name == "B" else "output.golden_tokens"


def golden_of(state: State, prompt_kind: str) -> str | None:
    """The checkpoint whose golden a request of `prompt_kind` returns when it runs in `state`, None when
    no golden predicts its tokens: garbage weights, or the long prompt over cached blocks computed with
    other weights (a reload keeps them; a repeat is served from them). Its finish reason and token
    count are predicted either way."""
    if prompt_kind not in PROMPT_KINDS:
        raise ValueError(f"unknown prompt kind {prompt_kind!r}; the walk's are {PROMPT_KINDS}")
    if state.weights is None:
        return None
    if prompt_kind == "long" and state.prefix not in (None, state.weights):
        return None
    return state.weights


def hits_cache(state: State, prompt_kind: str) -> bool:
    """Whether a request of `prompt_kind` sent now reports cached prompt tokens (> 0)
    [prefix_cache.hit_iff_cached]. Only the long prompt, only when its blocks are cached: the first
    request after a level >= 1 sleep or a reset hits none."""
    if prompt_kind not in PROMPT_KINDS:
        raise ValueError(f"unknown prompt kind {prompt_kind!r}; the walk's are {PROMPT_KINDS}")
    return prompt_kind == "long" and state.prefix is not None and can_run(state)


def held_oracle(state: State) -> str:
    """The oracle a request that ran while it should wait fails, by why it waits in `state`."""
    if state.level == 0:
        return "requests.held_while_paused"
    if len(state.asleep_tags) < len(TAGS):
        return "requests.held_until_resident"
    return "requests.held_while_asleep"


@dataclasses.dataclass(frozen=True)
class InFlight:
    """How a streaming request in flight when a /sleep lands ends, and the oracles that judge the sleep
    (besides model.golden_oracle: the tokens it streams are the serving checkpoint's golden, or a prefix).

    ends: "aborted" before /sleep answers; "completed" by length before /sleep answers; "held": open
    and silent while paused, until the wake that resumes scheduling (a level-0 keep keeps its KV
    blocks; a level >= 1 keep's cache reset preempts it, and the wake recomputes what it had)."""

    ends: str
    oracles: tuple


IN_FLIGHT = {
    "abort": InFlight("aborted", ("requests.abort_aborts", "requests.abort_time", "requests.clean_end")),
    "wait": InFlight("completed", ("requests.ends_in_race", "output.finish_length")),
    # A held request is judged by held_oracle of the state the sleep left (paused, or asleep).
    "keep": InFlight("held", ()),
}


# The requests a walk sleep finds in flight, beside the plain stream (operations.IN_FLIGHT's 1 and 2):
# name -> ((streamed, choices), ...), one entry per request. Every request and every choice ends as the
# sleep's mode says (IN_FLIGHT): an abort ends each choice of each with finish_reason "abort" (a choice
# that streamed no token yet sends nothing: completion/serving.py skips empty deltas), the n=4 children
# included (async_llm.py abort of the parent's child requests, parallel_sampling.py); a whole request
# then answers 200 with the tokens it had (completion/serving.py keeps "abort" as the finish reason).
WHOLE, N4, TWO = "whole", "n4", "two"
IN_FLIGHT_REQUESTS = {
    0: (),
    1: ((True, 1),),
    2: ((True, 1),),
    WHOLE: ((False, 1),),
    N4: ((True, 4),),
    TWO: ((True, 1),) * 2,
}


def in_flight_outcome(mode: str, level: int) -> InFlight:
    if mode not in IN_FLIGHT or level not in LEVELS:
        raise ValueError(
            f"no request in flight is modelled for /sleep?level={level}&mode={mode}; modes are "
            f"{tuple(IN_FLIGHT)}, levels {LEVELS}"
        )
    return IN_FLIGHT[mode]


def resumed_golden(state: State, origin: str | None) -> str | None:
    """The checkpoint whose golden a held request that started on `origin` ends with when scheduling
    resumes in `state` (after the wake): its own, if the same weights serve on; None when its tokens mix
    two sets of weights or garbage, which no golden predicts."""
    return origin if origin == served(state) and origin != GARBAGE else None


def long_prompts_hit(waiting: int, cached_at_resume: bool) -> int:
    """How many of `waiting` requests of the long prompt, queued while scheduling was paused, report cached
    tokens when it resumes: all but one, or all where its blocks were cached at the resume. The scheduler
    takes them in one step, and each caches its blocks as they are allocated (kv_cache_manager.py
    allocate_slots: cache_blocks up to the tokens this step computes), so every one after the first finds
    the first one's blocks (scheduler.py schedule: get_computed_blocks per waiting request)."""
    if waiting < 1:
        return 0
    return waiting if cached_at_resume else waiting - 1


def resets_prefix_cache(state: State, reset_running_requests: bool = False) -> bool:
    """Whether /reset_prefix_cache resets now: not while a running request holds blocks (scheduler.py
    reset_prefix_cache without reset_running_requests: a level-0 keep's frozen request does); with
    reset_running_requests it preempts that request first, and always resets."""
    return reset_running_requests or not state.held_kv


def reset_prefix_cache_result(version: str, door: str, resets: bool = True):
    """What /reset_prefix_cache reports through `door`: whether it reset, or None (an empty 200) from the
    API server's router on the releases of reset_prefix_cache_result_unreported [api.reset_prefix_cache_result]."""
    pin = thresholds.divergence("reset_prefix_cache_result_unreported", version, door)
    return pin.expected if pin.applies else resets


# --- device bytes (NVML, the server's processes) ---------------------------------------------------
def device_band(state: State, sizes: Sizes, cell_id: str) -> Band:
    """The GPU bytes the server's processes hold in `state`.

    Resident pools give the awake bytes less the shortfall a sleep may leave (eager: the activation
    blocks torch's caching allocator gave up, reserved again by the next forward) up to the growth a
    remap may add. A pool asleep is unmapped: both asleep is bounded by the level's fraction of awake
    (level 1 also by its residue and the KV cache freed); one asleep by the other's bytes, the weights
    pool within weights_wake_bytes_rel_error_max of the checkpoint's tensor bytes."""
    awake, w, kv = sizes.awake_bytes, sizes.weights_bytes, sizes.kv_bytes
    shortfall = thresholds.get("wake_shortfall_bytes_max", cell_id)
    growth = thresholds.get("wake_restore_bytes_max", cell_id)
    err = thresholds.get("weights_wake_bytes_rel_error_max", cell_id)
    freed_kv = kv * thresholds.get("sleep_freed_kv_fraction_min", cell_id)
    asleep = state.asleep_tags
    if not asleep:
        return Band(
            (
                Bound("device_bytes.wake_shortfall", ">=", awake - shortfall, "every pool resident"),
                Bound("device_bytes.wake_growth", "<=", awake + growth, "every pool resident"),
            )
        )
    if asleep == {WEIGHTS, KV_CACHE} and state.level == 1:
        return Band(
            (
                Bound(
                    "device_bytes.level1_asleep",
                    "<=",
                    awake * thresholds.get("level1_bytes_fraction_max", cell_id),
                    "asleep at level 1",
                ),
                Bound(
                    "device_bytes.level1_residue",
                    "<=",
                    thresholds.get("level1_residue_bytes_max", cell_id),
                    "asleep at level 1",
                ),
                Bound("device_bytes.level1_freed_kv", "<=", awake - freed_kv, "asleep at level 1"),
            )
        )
    if asleep == {WEIGHTS, KV_CACHE}:
        return Band(
            (
                Bound(
                    "device_bytes.level2_asleep",
                    "<=",
                    awake * thresholds.get("level2_bytes_fraction_max", cell_id),
                    "asleep at level 2",
                ),
            )
        )
    if asleep == {KV_CACHE}:
        # Every pool but the KV cache resident: the awake bytes less the KV cache and what a sleep may leave
        # short; a weights wake that maps less than the checkpoint falls below it (the context alone is
        # more than the checkpoint's bytes, so those would bound nothing).
        return Band(
            (
                Bound("device_bytes.weights_wake_mapped", ">=", awake - kv - shortfall - w * err, "weights resident"),
                Bound("device_bytes.weights_wake_kv_unmapped", "<=", awake - freed_kv, "KV cache asleep"),
                Bound(
                    "device_bytes.weights_wake_fraction",
                    "<=",
                    awake * thresholds.get("weights_wake_bytes_fraction_max", cell_id),
                    "KV cache asleep",
                ),
            )
        )
    return Band(
        (
            Bound("device_bytes.kv_wake_mapped", ">=", awake - w * (1 + err) - shortfall, "KV cache resident"),
            Bound("device_bytes.kv_wake_weights_unmapped", "<=", awake - w * (1 - err) + growth, "weights asleep"),
        )
    )


# --- host bytes (VmRSS of the server's process tree) -----------------------------------------------
def holds_host_copy(state: State) -> bool:
    """A level-1 sleep copied the weights to pinned host memory and no wake of the weights came since
    (only level 1 offloads: sleep_mode_backend.py:125)."""
    return state.level == 1 and WEIGHTS in state.asleep_tags


def host_band(state: State, version: str, host_awake: int, weights_bytes: int, cell_id: str | None = None) -> Band:
    """The host bytes of the server's process tree in `state`, against host_awake read once in INITIAL
    before the server's first level-1 sleep (state-based: no reading depends on an earlier one); the
    bounds and why: tests/core/host_bands.py."""
    lo_copy, hi_copy = host_bands.copy_held(host_awake, weights_bytes, cell_id)
    drift = host_bands.drift(cell_id)
    if holds_host_copy(state):
        return Band(
            (
                Bound("host_bytes.level1_copy_min", ">=", lo_copy, "level-1 host copy held"),
                Bound("host_bytes.level1_copy_max", "<=", hi_copy, "level-1 host copy held"),
            )
        )
    hi_oracle = "host_bytes.level2_asleep" if state.level == 2 and state.asleep_tags else "host_bytes.cycle_spread"
    if state.host_cached:
        if host_bands.copy_cached_after_wake(version):
            return Band(
                (
                    Bound("host_bytes.retained_after_wake", ">=", lo_copy, "pinned block cached"),
                    Bound("host_bytes.retained_after_wake", "<=", hi_copy, "pinned block cached"),
                )
            )
        return Band((Bound("host_bytes.retained_after_wake", "<=", host_awake + drift, "host copy given back"),))
    return Band((Bound(hi_oracle, "<=", host_awake + drift, "no host copy ever made"),))
