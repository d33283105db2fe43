"""The walk's operations: each a client call (or a request) with the model's precondition and effect.

Effects follow vLLM 0.26.0 (0.24.0 and 0.25.0 alike on these lines):
  * a request (generate_*) runs at once while scheduling runs; while it is paused the request is
    accepted and waits in the scheduler's queue (core.py pause_scheduler: "all pause modes queue new
    adds") until the wake that resumes scheduling, or until an abort sleep ends it.
  * /sleep?level=L&mode=M (async_llm.py:931-937, core.py:860-896 and 1764-1803, abstract.py:318-329):
    abort ends every request, running or waiting; wait lets the running ones finish first (PAUSED_NEW);
    keep freezes them (PAUSED_ALL). Level >= 1 then resets the caches, which preempts a frozen request
    back to the waiting queue, and, unless the executor already sleeps (then it only warns), puts both
    tags to sleep; only level 1 copies the weights to the host (sleep_mode_backend.py:125), so after
    level 2 they wake as garbage. The gauge is rewritten on every /sleep, asleep or not.
  * /wake_up?tags=... (core.py:898-914, abstract.py:331-356): "scheduling" is dropped; the executor
    ignores the call when awake or when any tag named is not asleep (an unknown one included);
    scheduling resumes once no tag is asleep, and the waiting requests run. The gauge reads awake after
    every /wake_up.
  * reload_weights(path) (gpu_model_runner.py:5517-5519): loads `path`, or the model path, into the
    weights pool and keeps `path` as the model path; it leaves the prefix cache as it was.
  * a push of checkpoint A or B (tests/core/pushes.py, the ways RL trainers push: tensors made in the
    engine's process, or CUDA-IPC handles of a trainer process's tensors) hands the tensors to the
    model's load_weights through the suite's worker extension (tools/launcher/weight_receiver.py), past
    reload_weights: the weights pool holds the checkpoint, the model path stays, so a later reload
    without a path loads the model path (TRL #5312's revert); the prefix cache keeps its blocks, stale
    once other weights serve.
  * /pause?mode=M&clear_cache=C (AsyncLLM.pause_generation; serve/dev/rlhf/api_router.py) is a sleep's
    scheduler pause alone (EngineCoreProc.pause_scheduler, core.py:1764-1803): the same modes, the
    caches reset with reset_running_requests once the engine is idle when C (core.py _reset_caches:
    a keep's frozen request is preempted, its KV dropped), no executor sleep and no gauge write.
    /resume (core.py:852-854 resume_scheduler) lifts the pause with no look at the executor: the
    waiting requests run, and with a tag asleep that is a terminal pair (the gauge stays what the last
    /sleep wrote). /is_paused reads the scheduler's pause, which a /sleep sets too.
  * cancel_queued: a request sent while scheduling is paused whose client goes away while it waits (the
    walk opens a stream of the long prompt, waits until /load counts it, and closes the connection). The
    server cancels its handler (serve/utils/api_utils.py with_cancellation; a stream's StreamingResponse
    listens for the disconnect), which cancels AsyncLLM.generate, which aborts it (async_llm.py generate:
    except CancelledError/GeneratorExit -> abort -> EngineCore.abort_requests, core.py, ->
    scheduler.py finish_requests(FINISHED_ABORTED) takes it off the waiting queue): the state is as before
    it, and the wake or /resume that lifts the pause runs nothing of it.
Where a release answers otherwise than the API documents and the server is no longer usable after it
(terminal()), the walk probes the pair as a shard's last step (plan.terminal_probes).
Through an in-process front door (tools/matrix.bzl FRONT_DOORS) the same model holds; what the door cannot
send (door_host.CANNOT: vllm.LLM streams nothing and makes one call at a time) takes those operations out
of its walk, with the door's reason (door_why_not), so its pairs are the model's pairs that door can reach.
vllm.LLM sends a request that must wait (scheduling paused) with LLM.enqueue (entrypoints/llm.py: it adds
the request and returns), and the wake that runs it collects it with LLM.wait_for_completion (offline_utils.py
_run_engine steps the engine until no request is unfinished); an abort ends it, and the multiprocess engine
core sends its abort output (core.py EngineCoreProc.pause_scheduler), which wait_for_completion returns, while
the colocated door's in-process engine sends none (known divergence llm_door_abort_end_lost, pinned).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tests.core import oracle, pushes, thresholds
from tests.core.walk import model
from tests.core.walk.model import CHECKPOINTS, KV_CACHE, PAUSE_ALL, PAUSE_NEW, WEIGHTS, State
from tools.launcher import door_host
from tools.matrix import HTTP

MODES = ("abort", "wait", "keep")
WAKE_TAGS = (
    None,
    (WEIGHTS,),
    (KV_CACHE,),
    ("scheduling",),
    ("no_such_tag",),
    (WEIGHTS, KV_CACHE),
    (WEIGHTS, "scheduling"),
    (KV_CACHE, "scheduling"),
)
RELOAD_PATHS = (None, "A", "B")
# The ways a push moves tensors into the engine (tests/core/pushes.py): from disk stays `reload`; vLLM's
# native weight-transfer API needs ray, which the venv lacks (docs/walk/not-walked.md).
PUSH_WAYS = (pushes.TENSOR, pushes.IPC)
# /pause's clear_cache, as the query spells it.
CLEAR_CACHE = {"true": True, "false": False}
GENERATES = ("generate_fresh", "generate_cached", "generate_n4", "generate_stream")
CANCEL_QUEUED = "cancel_queued"  # a request waiting in the queue, its client gone (the module's docstring)
# What is in flight when a /sleep lands (a sleep's third parameter, the last field of its token): nothing
# (0); one stream mid-decode (1); (mode wait) that stream and a second request sent while the sleep drains
# the first (2); one request answered whole, not streamed; one stream of n=4 seeded choices; two streams at
# once. model.IN_FLIGHT_REQUESTS says what each sends.
IN_FLIGHT = (0, 1, 2, model.WHOLE, model.N4, model.TWO)
# /reset_prefix_cache?reset_running_requests=true, as a token's parameter.
RESET_RUNNING = "running"
# Every operation in ALL answers 200, misuse included: the routers only int() the level and take the
# tags as given (serve/dev/sleep/api_router.py:24-41), and the engine ignores a sleep while asleep, a
# wake while awake and a tag that is not asleep. A terminal pair's answer is pinned per release.
EXPECTED_STATUS = 200
# What the walk checks after every step, whatever the operation (plus model.device_band/host_band), and
# /is_paused where the door can ask (after_every_step).
AFTER_EVERY_STEP = ("flags.is_sleeping", "flags.gauge", "server.healthy")
IS_PAUSED = "flags.is_paused"
_NONE = "-"  # a parameter left out in a token: a full wake, a reload without a path
# Known divergences that end a server's usable life where they apply, so a walk probes them last.
FULL_WAKE_REMAPS = "full_wake_remaps_resident_pool"
KV_FIRST_AFTER_LEVEL2 = "kv_first_wake_after_level2_restores_into_unmapped_weights"
RELOAD_ASLEEP = "reload_while_weights_asleep"
RESUME_ASLEEP = "resume_while_kv_cache_asleep"
# The oracle each terminal pair's probe fails: its call's answer and the whole state after it.
TERMINAL_ORACLES = {
    FULL_WAKE_REMAPS: "api.full_wake_from_partial",
    KV_FIRST_AFTER_LEVEL2: "api.kv_first_wake_after_level2",
    RELOAD_ASLEEP: "api.reload_while_weights_asleep",
    RESUME_ASLEEP: "api.resume_while_asleep",
}
# What a client of the doors can send that the model holds no operation for, with why: not_walked.py lists
# them beside the pairs. Each names the test that runs it instead.
NOT_MODELLED = {
    "worker-level sleep and wake (collective_rpc sleep / wake_up, verl before #6456)": (
        "the workers unmap and map their pools past the executor's tag bookkeeping, the scheduler pause and "
        "the prefix-cache reset (gpu_worker.py Worker.sleep / wake_up; abstract.py sleeping_tags stay "
        "empty), so the model would need a second set of asleep tags the engine does not know: /is_sleeping "
        "false, the gauge awake, the device bytes asleep, an engine-level wake a no-op, and every request a "
        "forward over an unmapped pool that kills the engine (nothing holds it off them), as would a second "
        "worker sleep or a wake of a resident pool (CUDA errors). All but the verl sequence's own states would "
        "be pinned failures with no probe; that sequence (worker sleep level 2, worker wake of the weights, a "
        "push, a prefix-cache reset, worker wake of the KV cache, a request) is "
        "tests/sleep_wake/test_rl_recipes.py::TestRlRecipes::test_verl_worker_level_sleep, on the async_llm door"
    ),
    "push:native (vLLM's weight-transfer API: start_weight_update, update_weights, finish_weight_update)": (
        "it needs the server started with vLLM's IPC backend (SLEEPWAKE_WEIGHT_TRANSFER=ipc), whose module "
        "imports ray (vllm/distributed/weight_transfer/ipc_engine.py:11), and the walk cells' servers start "
        "without it: its moves are push:ipc's (CUDA-IPC handles of a trainer's tensors loaded into the awake "
        "weights pool), which the walk takes in every state; tests/sleep_wake/test_weight_sync.py takes the "
        "native way on every weight_sync cell whose release has the API (tools/matrix.bzl CLASS_SERVER_SETTINGS, "
        "tests/core/pushes.py NativePush)"
    ),
    "push:disk": "it is the walk's reload:A and reload:B (collective_rpc reload_weights with weights_path)",
    "/pause landing while a request decodes (OpenRLHF's and SkyRL's partial rollout)": (
        "the walk's requests in flight land with sleeps, and sleep:0:<mode>:1 is the same scheduler pause "
        "(core.py sleep at level 0 awaits pause_scheduler(mode, clear_cache=False)); a /pause then reaches the "
        "request it froze, pause:keep:true preempting it as pause_generation(mode='keep') does. The sequences "
        "with the /pause itself mid-decode: test_rl_recipes.py test_openrlhf_partial_rollout and "
        "test_skyrl_fully_async"
    ),
    "a push while a request decodes (NeMo-RL's in-flight weight update)": (
        "the walk pushes between steps, where no request runs (a request frozen or waiting under a pause does "
        "meet the push: its end after the resume is judged); test_rl_recipes.py "
        "test_nemo_rl_async_update_in_flight pushes mid-decode"
    ),
}
# The classes of an operation the walk does not make in a state (LeftOut; not_walked.py lists the pairs).
MEANINGLESS = "meaningless for the API"  # no client can send it there, or the door cannot send it at all
PINNED = "pinned vLLM failure"  # a known divergence: probed as a shard's last step (plan.terminal_probes)
UNWALKED = "not yet walked"  # a client can send it and nothing pins what vLLM does: the walk owes it
LEFT_OUT_KINDS = (MEANINGLESS, PINNED, UNWALKED)


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """Why the walk does not make an operation in a state (reason), and that reason's class (kind: one of
    LEFT_OUT_KINDS)."""

    kind: str
    reason: str

    def __post_init__(self):
        if self.kind not in LEFT_OUT_KINDS:
            raise ValueError(f"LeftOut of unknown class {self.kind!r} ({self.reason}); use one of {LEFT_OUT_KINDS}")


@dataclasses.dataclass(frozen=True)
class Operation:
    """name and params: sleep (level, mode, in_flight) with in_flight one of IN_FLIGHT, wake
    (tags,) with tags a tuple or None for a full wake, reload (path,) with path "A", "B" or None, push
    (way, checkpoint) with way one of PUSH_WAYS, pause (mode, clear_cache), reset_prefix_cache () or
    (RESET_RUNNING,) for reset_running_requests=true; the generates, cancel_queued and resume take none.
    str() is the
    operation's token in a replay script (plan.script)."""

    name: str
    params: tuple = ()

    def __str__(self) -> str:
        if self.name == "sleep":
            level, mode, in_flight = self.params
            return f"sleep:{level}:{mode}:{in_flight}"
        if self.name == "wake":
            return "wake:" + ("+".join(self.params[0]) if self.params[0] is not None else _NONE)
        if self.name == "reload":
            return "reload:" + (self.params[0] or _NONE)
        if self.name == "push":
            return "push:%s:%s" % self.params
        if self.name == "pause":
            mode, clear_cache = self.params
            return f"pause:{mode}:{'true' if clear_cache else 'false'}"
        if self.params:
            return ":".join((self.name, *self.params))
        return self.name

    @property
    def resets_running(self) -> bool:
        """A /reset_prefix_cache with reset_running_requests=true."""
        return self.name == "reset_prefix_cache" and self.params == (RESET_RUNNING,)

    @property
    def mode(self) -> str | None:
        """The pause mode of a sleep or a /pause (MODES), None for any other operation."""
        if self.name == "sleep":
            return self.params[1]
        return self.params[0] if self.name == "pause" else None

    def why_not(self, state: State, door: str = HTTP) -> str | None:
        """None when the model predicts this operation in `state` and `door` can send it, else the reason
        it does not."""
        left = self.left_out(state, door)
        return left.reason if left else None

    def left_out(self, state: State, door: str = HTTP) -> LeftOut | None:
        """why_not with its class: what the door cannot send at all first (it is meaningless there, pinned
        or not elsewhere), then the model's preconditions, then vLLM's refusals and the door's limits."""
        unsendable = door_cannot_send(self, door)
        if unsendable:
            return LeftOut(MEANINGLESS, unsendable)
        left = _left_out(self, state)
        if left:
            return left
        refused = door_refuses(self, door) or door_loses_end(self, state, door)
        if refused:
            return LeftOut(PINNED, refused)
        cannot = door_why_not(self, state, door)
        return LeftOut(MEANINGLESS, cannot) if cannot else None

    def applicable(self, state: State, door: str = HTTP) -> bool:
        return self.why_not(state, door) is None

    def apply(self, state: State) -> State:
        left = _left_out(self, state)
        if left:
            raise ValueError(f"{self} is not applicable in state ({state.describe()}): {left.reason}")
        return _APPLY[self.name](self, state)

    def misuse(self, state: State) -> str | None:
        """The misuse this operation is in `state`, if any; it still answers EXPECTED_STATUS."""
        sleeping = model.sleeping(state)
        if self.name == "sleep" and sleeping:
            return "sleep while asleep"
        if self.name == "resume" and not state.paused:
            return "resume while not paused"
        if self.name != "wake":
            return None
        tags = self.params[0]
        if tags is not None and any(t not in model.TAGS + ("scheduling",) for t in tags):
            return "wake of an unknown tag"
        if not sleeping:
            return "wake while awake"
        if tags is not None and any(t in model.TAGS and t not in state.asleep_tags for t in tags):
            return "wake of a tag that is not asleep"
        return None

    def oracles(self, state: State) -> tuple:
        """The oracle ids that judge this operation's own result in `state` (AFTER_EVERY_STEP aside)."""
        ids = ["api.status"]
        if self.name in GENERATES:
            if not model.can_run(state):
                return tuple(ids + [model.held_oracle(state)])
            kind = "long" if self.name == "generate_cached" else "short"
            golden = model.golden_of(state, kind)
            ids.append("output.finish_length")
            if self.name == "generate_n4":
                ids += ["output.seeded_sampling"] if golden else []
            elif golden:
                ids.append(model.golden_oracle(golden))
            if self.name == "generate_fresh" and golden:
                ids.append("output.logprob_drift")
            if self.name == "generate_cached":
                ids.append("prefix_cache.hit_iff_cached")
            if self.name == "generate_stream":
                ids.append("requests.clean_end")
        elif self.name == "sleep":
            level, mode, in_flight = self.params
            after = self.apply(state)
            if in_flight:
                if state.weights is not None and in_flight != model.N4:  # n=4 samples: no greedy golden
                    ids.append(model.golden_oracle(state))
                outcome = model.in_flight_outcome(mode, level)
                ids += outcome.oracles
                if outcome.ends == "held" or in_flight == 2:  # the held one, the one arriving in the drain
                    ids.append(model.held_oracle(after))
                elif not (after.held or after.queued):
                    ids.append("requests.load_drains")
            ids += _paused_requests_oracles(mode, state)
        elif self.name == "pause":
            ids += [IS_PAUSED] + _paused_requests_oracles(self.params[0], state)
        elif self.name in ("wake", "resume"):
            if self.name == "resume":
                ids.append(IS_PAUSED)  # read right after the call, before the waiting requests are waited for
            after = self.apply(state)
            if (state.held or state.queued) and after.paused:
                ids.append(model.held_oracle(after))
            elif state.held or state.queued:
                if state.held:
                    ids += ["requests.resumes_after_keep"] + _resumed_oracles(after, state.held)
                if state.queued:
                    ids.append("output.finish_length")
                if "long" in state.queued:
                    ids.append("prefix_cache.hit_iff_cached")
        elif self.name == CANCEL_QUEUED:
            ids += [model.held_oracle(state), "requests.cancel_aborts"]
        elif self.name == "reset_prefix_cache":
            ids.append("api.reset_prefix_cache_result")
            if self.resets_running and state.held_kv:  # the frozen request preempted: it waits on
                ids.append(model.held_oracle(state))
        return tuple(dict.fromkeys(ids))


def _paused_requests_oracles(mode: str, state: State) -> list:
    """What judges a pause's (a sleep's or a /pause's) end of the requests that already waited in `state`:
    an abort ends them all; a wait drains a level-0 keep's frozen request before it answers."""
    ids = []
    if mode == "abort" and (state.held or state.queued):
        ids.append("requests.abort_aborts")
    if mode == "wait" and state.held_kv:
        ids += ["requests.ends_in_race"] + _resumed_oracles(state, state.held)
    return ids


def _resumed_oracles(state: State, origin: str | None) -> list:
    """What judges the tokens of a held request that runs on in `state`: its checkpoint's uninterrupted
    run where the model predicts it, else only its count."""
    return ["prefix_cache.kept_paused_request" if model.resumed_golden(state, origin) else "output.finish_length"]


def sleep(level: int, mode: str = "abort", in_flight=0) -> Operation:
    if in_flight not in IN_FLIGHT:
        raise ValueError(f"no walk sleep with {in_flight!r} in flight; the walk's are {IN_FLIGHT}")
    return Operation("sleep", (level, mode, in_flight))


def wake(tags=None) -> Operation:
    return Operation("wake", (None if tags is None else tuple(tags),))


def reload(path: str | None = None) -> Operation:
    return Operation("reload", (path,))


def push(way: str, checkpoint: str) -> Operation:
    return Operation("push", (way, checkpoint))


def pause(mode: str = "abort", clear_cache: bool = True) -> Operation:
    return Operation("pause", (mode, bool(clear_cache)))


RESET_PREFIX_CACHE = Operation("reset_prefix_cache")
RESET_PREFIX_CACHE_RUNNING = Operation("reset_prefix_cache", (RESET_RUNNING,))
RESUME = Operation("resume")
CANCEL = Operation(CANCEL_QUEUED)

ALL = (
    [Operation(name) for name in GENERATES]
    + [sleep(level, mode, n) for level in model.LEVELS for mode in MODES for n in IN_FLIGHT if n != 2 or mode == "wait"]
    + [wake(tags) for tags in WAKE_TAGS]
    + [reload(path) for path in RELOAD_PATHS]
    + [RESET_PREFIX_CACHE, RESET_PREFIX_CACHE_RUNNING]
    + [push(way, checkpoint) for way in PUSH_WAYS for checkpoint in CHECKPOINTS]
    + [pause(mode, clear) for mode in MODES for clear in CLEAR_CACHE.values()]
    + [RESUME, CANCEL]
)
BY_TOKEN = {str(op): op for op in ALL}
if len(BY_TOKEN) != len(ALL):
    raise ValueError("two walk operations share a token; a replay could not tell them apart")


def parse(token: str) -> Operation:
    try:
        return BY_TOKEN[token.strip()]
    except KeyError:
        raise ValueError(f"unknown walk operation {token!r}; known: {', '.join(BY_TOKEN)}") from None


def terminal(op: Operation, s: State) -> str | None:
    """The known divergence that makes op in s a server's last usable call on the releases it lists (a
    probe: plan.terminal_probes), or None:
      * a /wake_up without tags while one tag is resident and the other asleep (FULL_WAKE_REMAPS);
      * after a level-2 sleep, a wake of the KV cache while the weights stay asleep: the first wake
        restores the model buffers saved on the host (gpu_worker.py:231-235) into the weights pool
        (allocated under the weights tag, gpu_worker.py:426), which is still unmapped
        (KV_FIRST_AFTER_LEVEL2; the fix, vllm-project/vllm#45619, was closed unmerged);
      * reload_weights while the weights are asleep: it writes the unmapped weights pool, and vLLM
        has no guard (RELOAD_ASLEEP);
      * /resume while a tag is asleep: the scheduler runs the requests over the unmapped pool, since
        resume_scheduler looks at no executor (core.py:852; RESUME_ASLEEP)."""
    if op.name == "wake":
        if op.params[0] is None and 0 < len(s.asleep_tags) < len(model.TAGS):
            return FULL_WAKE_REMAPS
        woken = _executor_woken(op.params[0], s.asleep_tags)
        if s.level == 2 and WEIGHTS in s.asleep_tags - woken and KV_CACHE in woken:
            return KV_FIRST_AFTER_LEVEL2
    if op.name == "reload" and WEIGHTS in s.asleep_tags:
        return RELOAD_ASLEEP
    if op.name == "resume" and s.asleep_tags:
        return RESUME_ASLEEP
    return None


# --- preconditions -------------------------------------------------------------------------------
def _executor_woken(tags, asleep: frozenset) -> frozenset:
    """The tags the executor wakes for /wake_up?tags=tags (none when it ignores the call)."""
    if tags is not None:
        tags = [t for t in tags if t != "scheduling"]
        if not tags:
            return frozenset()  # core.py wake_up: a scheduling-only wake does not reach the executor
    if not asleep or (tags is not None and any(t not in asleep for t in tags)):
        return frozenset()
    return asleep if tags is None else frozenset(tags)


# A push while the weights sleep is pinned by the reload's probe, not probed on its own: the same write.
PUSH_ASLEEP = (
    f"known divergence {RELOAD_ASLEEP} by the same write: a push hands its tensors to the model's "
    "load_weights (tools/launcher/weight_receiver.py WeightReceiver._sleepwake_load; TRL's in-process "
    "load_weights alike), which copies them into the parameters' storage, the weights pool a sleep "
    "unmapped, as reload_weights does (gpu_model_runner.py:5480-5530); vLLM guards neither, and the "
    "reload's probe (reload:B, at each level and set of tags asleep) pins what that write does to the server"
)


def _left_out(op: Operation, s: State) -> LeftOut | None:
    if op.name not in _APPLY:
        return LeftOut(MEANINGLESS, f"no operation named {op.name!r}")
    divergence = terminal(op, s)
    if divergence:
        return LeftOut(
            PINNED,
            f"known divergence {divergence}: on the releases it lists the server is not usable after it, "
            "so only a shard's last step makes it (plan.terminal_probes)",
        )
    if op.name == "push" and WEIGHTS in s.asleep_tags:
        return LeftOut(PINNED, PUSH_ASLEEP)
    if op.name in GENERATES:
        return None
    if op.name == CANCEL_QUEUED and model.can_run(s):
        return LeftOut(
            MEANINGLESS,
            "scheduling runs, so the request runs at once and never waits in the queue: a client going away "
            "mid-decode is a request in flight cut short, not a waiting one",
        )
    if op.name == "sleep":
        level, mode, in_flight = op.params
        if in_flight and not model.can_run(s):
            return LeftOut(
                MEANINGLESS,
                "no request can be in flight: scheduling is paused, so a request sent now waits (a generate)",
            )
        if in_flight == 2 and mode != "wait":
            return LeftOut(
                MEANINGLESS, "a request arriving during the sleep is a wait sleep's case: the others answer at once"
            )
        return None
    if op.resets_running and not s.held_kv:
        return LeftOut(
            MEANINGLESS,
            "reset_running_requests=true with no request running: it is the plain reset, made in the same "
            "situation (scheduler.py reset_prefix_cache preempts the running queue, which is empty)",
        )
    return None


def door_refuses(op: Operation, door: str) -> str | None:
    """Why vLLM itself refuses op through `door`, as a known divergence pins it (checked by its own test,
    not walked): the in-process engine refuses a wait sleep before anything sleeps."""
    pin = thresholds.KNOWN_DIVERGENCES[WAIT_REFUSED]
    if op.name == "sleep" and op.params[1] == "wait" and door in pin.doors:
        return f"{WAIT_REFUSED}: {pin.reason} (tests/sleep_wake/test_rl_recipes.py checks the refusal)"
    return None


WAIT_REFUSED = "llm_door_wait_mode_refused"
ABORT_END_LOST = "llm_door_abort_end_lost"


def door_loses_end(op: Operation, s: State, door: str) -> str | None:
    """Why an abort sleep with requests enqueued is pinned on `door`, not walked: the in-process engine ends
    them and sends no output, so LLM.wait_for_completion (and every later LLM.generate, whose loop runs until
    no request is unfinished) never returns (checked by its own test)."""
    pin = thresholds.KNOWN_DIVERGENCES[ABORT_END_LOST]
    if op.mode == "abort" and s.queued and door in pin.doors:
        return f"{ABORT_END_LOST}: {pin.reason} (tests/engine/test_llm_door.py checks it)"
    return None


def door_cannot_send(op: Operation, door: str) -> str | None:
    """Why `door` has no such call at all, in any state (door_host.CANNOT), or None: no stream, no
    pause_generation / resume_generation."""
    if op.name in ("generate_stream", CANCEL_QUEUED):  # the walk's cancel closes a stream it opened
        return door_host.cannot(door, "stream")
    if op.name in ("pause", "resume"):
        return door_host.cannot(door, "pause")
    return None


def door_why_not(op: Operation, s: State, door: str) -> str | None:
    """Why `door` cannot send op in s (door_host.CANNOT), or None. A one-call-at-a-time door has no request
    in flight during a sleep and no stream; a request that would wait (scheduling paused) it sends with
    vllm.LLM.enqueue, which returns at once, so a wake can follow it (the door host's /enqueue; the wake that
    runs it collects its output with wait_for_completion)."""
    unsendable = door_cannot_send(op, door)
    if unsendable:
        return unsendable
    if op.name == "sleep" and op.params[2]:
        return door_host.cannot(door, "concurrent_calls")
    if op.name in GENERATES and not model.can_run(s) and door_host.cannot(door, "concurrent_calls"):
        return door_host.cannot(door, "enqueue")
    return None


def after_every_step(door: str) -> tuple:
    """The oracles every step's state is judged by through `door`: AFTER_EVERY_STEP, and /is_paused where
    the door has it."""
    return AFTER_EVERY_STEP + (() if door_host.cannot(door, "pause") else (IS_PAUSED,))


# --- effects -------------------------------------------------------------------------------------
def _generate(op: Operation, s: State) -> State:
    long = op.name == "generate_cached"
    if not model.can_run(s):
        kind = ("long_pair" if "long" in s.queued else "long") if long else "plain"
        return dataclasses.replace(s, queued=s.queued | {kind})
    return dataclasses.replace(s, prefix=s.prefix or model.served(s)) if long else s


def _pause_scheduler(s: State, mode: str, clear_cache: bool, in_flight: int = 0) -> State:
    """core.py pause_scheduler, which /sleep and /pause both await: abort ends every request, running or
    waiting; wait lets the running ones finish first (PAUSED_NEW), and the waiting ones (and one arriving
    during the drain) wait on; keep freezes them (PAUSED_ALL). clear_cache then resets the caches with
    reset_running_requests, which preempts a frozen request to the waiting queue."""
    held, held_kv, queued = s.held, s.held_kv, s.queued
    if mode == "abort":
        held, held_kv, queued = None, False, frozenset()
    elif mode == "wait":
        if held_kv:
            held, held_kv = None, False
        if in_flight == 2:
            queued = queued | {"plain"}
    elif in_flight:  # keep: the request in flight freezes where it is
        held, held_kv = model.served(s), True
    change: dict = dict(pause=PAUSE_ALL if mode == "keep" else PAUSE_NEW, held=held, held_kv=held_kv, queued=queued)
    if clear_cache:
        change.update(prefix=None, held_kv=False)
    if not s.asleep_tags:
        change["level"] = 0
    return dataclasses.replace(s, **change)


def _sleep(op: Operation, s: State) -> State:
    level, mode, in_flight = op.params
    change: dict = dict(gauge_level=level)
    if level >= 1 and not s.asleep_tags:
        change.update(level=level, asleep_tags=frozenset(model.TAGS), weights=s.weights if level == 1 else None)
    return dataclasses.replace(_pause_scheduler(s, mode, level >= 1, in_flight), **change)


def _cancel(op: Operation, s: State) -> State:
    """The request sent and aborted while it waited: the queue is as it was (scheduler.py finish_requests)."""
    return s


def _pause(op: Operation, s: State) -> State:
    mode, clear_cache = op.params
    return _pause_scheduler(s, mode, clear_cache)


def _scheduling_resumed(s: State, **change) -> State:
    """The scheduler unpaused (with `change` to the rest of the state): the held and waiting requests run,
    and a waiting long prompt caches its blocks."""
    resumed = dataclasses.replace(s, level=None, pause=None, held=None, held_kv=False, queued=frozenset(), **change)
    if "long" in s.queued:
        resumed = dataclasses.replace(resumed, prefix=s.prefix or model.served(resumed))
    return resumed


def _wake(op: Operation, s: State) -> State:
    asleep = s.asleep_tags - _executor_woken(op.params[0], s.asleep_tags)
    host_cached = s.host_cached or (model.holds_host_copy(s) and WEIGHTS not in asleep)
    if asleep:
        return dataclasses.replace(s, asleep_tags=asleep, gauge_level=None, host_cached=host_cached)
    return _scheduling_resumed(s, asleep_tags=frozenset(), gauge_level=None, host_cached=host_cached)


def _resume(op: Operation, s: State) -> State:
    return _scheduling_resumed(s) if s.paused else s


def _reload(op: Operation, s: State) -> State:
    target = op.params[0] or s.model_path
    return dataclasses.replace(s, weights=target, model_path=target)


def _push(op: Operation, s: State) -> State:
    return dataclasses.replace(s, weights=op.params[1])


def _reset(op: Operation, s: State) -> State:
    """scheduler.py reset_prefix_cache: refused while a running request holds blocks, unless
    reset_running_requests preempts it first (back to the waiting queue, its KV dropped)."""
    if not model.resets_prefix_cache(s, op.resets_running):
        return s
    return dataclasses.replace(s, prefix=None, held_kv=False)


_APPLY = {
    **{name: _generate for name in GENERATES},
    "sleep": _sleep,
    "wake": _wake,
    "reload": _reload,
    "reset_prefix_cache": _reset,
    "push": _push,
    "pause": _pause,
    "resume": _resume,
    CANCEL_QUEUED: _cancel,
}


def effect(op: Operation, state: State) -> State:
    """The state op leads to by the model's effects, also where the walk does not make it: a terminal
    pair on a release where its known divergence does not apply behaves as documented (a reload
    while the weights are asleep is then refused and changes nothing; a /resume while a tag sleeps
    leaves scheduling paused until every tag is resident, as a wake does since #44483)."""
    if terminal(op, state) in (RELOAD_ASLEEP, RESUME_ASLEEP):
        return state
    return _APPLY[op.name](op, state)


def emptied_cache_unseen(unseen: bool, op: Operation, before: State, after: State) -> bool:
    """Whether, after op took before to after, the walk has still to look at a prefix cache a step emptied
    (a sleep of level >= 1, a reset), or must see stay empty (a cancelled request of the long prompt, which
    would have cached it had it run), given whether it had to before: a generate_cached looks at it with
    its own result; a step that empties it again leaves one more to look at. Both walkers (the GPU's
    runner.py, the engine tier's engine_walk.py) look where the plan sends no such request before the
    next reset, which would hide a cache that was never emptied (sleep_while_paused_keeps_prefix_cache)."""
    if before.prefix_cached and not after.prefix_cached:
        return True
    if op.name == CANCEL_QUEUED and not after.prefix_cached and "long" not in after.queued:
        return True  # the cancelled long prompt, had it run at the wake, would have cached its blocks
    looked = (op.name == "generate_cached" and model.can_run(before)) or (
        "long" in before.queued and not after.paused
    )  # the waiting long prompt ran with the wake
    return unseen and not looked


def moves_memory(op: Operation, state: State) -> bool:
    """Whether the executor maps or unmaps a pool when op runs in state, by the model: its sleeping tags
    change. A sleep or wake that moves none needs no memory phase (the GPU lock orders only what can
    break a neighbour's sleep check), and the fake's device bytes stay put (model_vs_fake_unit_test)."""
    return op.apply(state).asleep_tags != state.asleep_tags


def require_applicable(op, state: State, step_index: int, door: str = HTTP) -> None:
    """Raises oracle.Precondition when the walk planned `op` where the model says it cannot run or `door`
    cannot send it: a planner bug, not a server's (every walker checks this before it acts)."""
    reason = op.why_not(state, door)
    if reason:
        raise oracle.Precondition(f"walk step {step_index}: {op} is not applicable in ({state.describe()}): {reason}")


# --- where an operation is decided: the worker, or above it (plan.deal) ---------------------------
# A cell's runner (MRV1, MRV2) and execution mode (eager, CUDA graphs) live in the worker: its model runner
# runs the forward passes, holds the pools a sleep unmaps and the parameters a reload or push writes. A pair
# whose path stops above the worker (the API server, AsyncLLM, EngineCore's scheduler, the executor's tag
# bookkeeping) runs the same code in every cell of its door, so plan.deal walks it in one cell per runner;
# a pair that reaches the worker is walked in every cell. vLLM 0.26.0's code decides; each rule below is a
# function of the state that plan.Situation keeps (level, tags asleep, pause, requests waiting or frozen), so
# one pair has one answer. docs/walk/dealt.md (tests.core.walk.dealt) lists them with their reasons.
@dataclasses.dataclass(frozen=True)
class Reach:
    """Whether an operation's path reaches the worker in a state (rule), and why (reason: vLLM's code)."""

    rule: Callable[[Operation, State], bool]
    reason: str


def _runs_requests(s: State, after: State) -> bool:
    """Scheduling resumes from s to after with a request waiting or frozen: the worker runs it."""
    return s.paused and not after.paused and (s.held is not None or bool(s.queued))


REACHES_WORKER = {
    **{
        name: Reach(
            lambda op, s: model.can_run(s),
            "where scheduling runs, the request's forward passes run in the model runner (gpu_model_runner.py "
            "execute_model, or MRV2's gpu/model_runner.py); while paused or asleep it waits in the scheduler's "
            "queue (core.py add_request, scheduler.py schedule skips while paused), and the wake or /resume that "
            "lifts the pause runs it, which is that operation's pair",
        )
        for name in GENERATES
    },
    "sleep": Reach(
        lambda op, s: op.params[0] >= 1 or bool(op.params[2]) or s.held_kv,
        "level >= 1: pause_scheduler resets the caches (core.py _reset_caches: collective_rpc reset_mm_cache and "
        "reset_encoder_cache on every worker) and the executor sleeps the workers (abstract.py sleep: "
        "collective_rpc sleep, unless already asleep). Level 0 is pause_scheduler(mode, clear_cache=False) in "
        "EngineCore alone, unless a request decodes on the worker when it lands (in flight, of every kind: a "
        "stream, a whole request, an n=4 stream's choices, two streams, one arriving in a wait's drain; the "
        "pause mode then aborts, drains or freezes it there) or a level-0 keep froze one there, whose KV blocks "
        "and batch slot the worker holds",
    ),
    "wake": Reach(
        lambda op, s: moves_memory(op, s) or _runs_requests(s, op.apply(s)),
        "it reaches the worker where the executor maps a pool (abstract.py wake_up: collective_rpc wake_up) or "
        "where scheduling resumes with a request waiting or frozen (the worker runs it); else the executor "
        "only warns (not sleeping, or a tag not asleep), a scheduling-only wake never calls it (core.py "
        "wake_up), and resume_scheduler is the scheduler's",
    ),
    "reload": Reach(
        lambda op, s: True,
        "collective_rpc reload_weights: the model runner loads the checkpoint into its parameters "
        "(gpu_model_runner.py reload_weights)",
    ),
    "push": Reach(
        lambda op, s: True,
        "the worker extension hands the tensors to the model's load_weights in the worker "
        "(tools/launcher/weight_receiver.py)",
    ),
    "reset_prefix_cache": Reach(
        lambda op, s: False,
        "EngineCore.reset_prefix_cache calls the scheduler's KV cache manager only (core.py reset_prefix_cache); "
        "no worker is called. With reset_running_requests=true the scheduler also preempts its running requests "
        "(scheduler.py reset_prefix_cache: _preempt_request frees their blocks and puts them back in the waiting "
        "queue), bookkeeping of its own: the worker drops the request from its persistent batch only when the "
        "next SchedulerOutput names it (preempted_req_ids: MRV2's finish_requests, MRV1's _update_states), at "
        "the wake or /resume that lets it run, whose pair (a held request preempted) reaches the worker",
    ),
    "pause": Reach(
        lambda op, s: op.params[1] or s.held_kv,
        "clear_cache resets the caches (core.py _reset_caches: collective_rpc reset_mm_cache and "
        "reset_encoder_cache on every worker, each runner its own); without it pause_scheduler sets the "
        "scheduler's pause in EngineCore alone, unless a level-0 keep froze a request on the worker",
    ),
    CANCEL_QUEUED: Reach(
        lambda op, s: False,
        "the API server sees the client go away (serve/utils/api_utils.py with_cancellation; a stream's "
        "StreamingResponse) and cancels AsyncLLM.generate, which aborts the request (async_llm.py generate and "
        "abort); EngineCore.abort_requests (core.py) has the scheduler finish it (scheduler.py finish_requests: "
        "FINISHED_ABORTED, off the waiting queue). A waiting request was never scheduled, so no worker holds a "
        "block or batch slot of it and none is called",
    ),
    "resume": Reach(
        lambda op, s: _runs_requests(s, op.apply(s)),
        "resume_scheduler sets the scheduler's pause state (core.py resume_scheduler); it reaches the worker only "
        "through the requests it lets run, where one waits or is frozen",
    ),
}


def reaches_worker(op: Operation, state: State) -> bool:
    """Whether op's path in state reaches the worker, where the runner and execution mode matter
    (REACHES_WORKER). An operation with no rule reaches it: walked in every cell until one says otherwise."""
    reach = REACHES_WORKER.get(op.name)
    return True if reach is None else bool(reach.rule(op, state))
