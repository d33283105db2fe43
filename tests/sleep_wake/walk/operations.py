"""The walk's operations: each a client call (or a request) with the model's precondition and effect.

Effects follow vLLM 0.26.0 (0.24.0 and 0.25.0 alike on these lines):
  * /sleep?level=L&mode=M (async_llm.py:931-937, core.py:860-896, abstract.py:318-329): pauses
    scheduling, level >= 1 clears the prefix cache and, unless the executor already sleeps (then it
    only warns), puts both tags to sleep; only level 1 copies the weights to the host
    (sleep_mode_backend.py:125), so after level 2 they wake as garbage. The gauge is rewritten on
    every /sleep, asleep or not.
  * /wake_up?tags=... (core.py:898-914, abstract.py:331-356): "scheduling" is dropped; the executor
    ignores the call when awake or when any tag named is not asleep (an unknown one included);
    scheduling resumes once no tag is asleep. The gauge reads awake after every /wake_up.
  * reload_weights(path) (gpu_model_runner.py:5517-5519): loads `path`, or the model path, into the
    weights pool and keeps `path` as the model path.
Operations the model cannot predict are not applicable; each says why in why_not.
"""

from __future__ import annotations

import dataclasses

from tests.sleep_wake.lib import oracle
from tests.sleep_wake.walk import model
from tests.sleep_wake.walk.model import KV_CACHE, WEIGHTS, State

MODES = ("abort", "wait", "keep")
WAKE_TAGS = (None, (WEIGHTS,), (KV_CACHE,), ("scheduling",), ("no_such_tag",))
RELOAD_PATHS = (None, "A", "B")
GENERATES = ("generate_fresh", "generate_cached", "generate_n4", "generate_stream")
# Every operation in ALL answers 200, misuse included: the routers only int() the level and take the
# tags as given (serve/dev/sleep/api_router.py:24-41), and the engine ignores a sleep while asleep, a
# wake while awake and a tag that is not asleep.
EXPECTED_STATUS = 200
# What the walk checks after every step, whatever the operation (plus model.device_band/host_band).
AFTER_EVERY_STEP = ("flags.is_sleeping", "flags.gauge", "server.healthy")
RESUME_ORACLES = ("requests.resumes_after_keep", "prefix_cache.kept_paused_request")
_NONE = "-"  # a parameter left out in a token: a full wake, a reload without a path


@dataclasses.dataclass(frozen=True)
class Operation:
    """name and params: sleep (level, mode, in_flight), wake (tags,) with tags a tuple or None for a
    full wake, reload (path,) with path "A", "B" or None; the generates and reset_prefix_cache take
    none. str() is the operation's token in a replay script (plan.script)."""
    name: str
    params: tuple = ()

    def __str__(self) -> str:
        if self.name == "sleep":
            level, mode, in_flight = self.params
            return f"sleep:{level}:{mode}:{int(in_flight)}"
        if self.name == "wake":
            return "wake:" + ("+".join(self.params[0]) if self.params[0] is not None else _NONE)
        if self.name == "reload":
            return "reload:" + (self.params[0] or _NONE)
        return self.name

    def why_not(self, state: State) -> str | None:
        """None when the model predicts this operation in `state`, else the reason it does not."""
        return _why_not(self, state)

    def applicable(self, state: State) -> bool:
        return _why_not(self, state) is None

    def apply(self, state: State) -> State:
        reason = _why_not(self, state)
        if reason:
            raise ValueError(f"{self} is not applicable in state ({state.describe()}): {reason}")
        return _APPLY[self.name](self, state)

    def misuse(self, state: State) -> str | None:
        """The misuse this operation is in `state`, if any; it still answers EXPECTED_STATUS."""
        sleeping = model.sleeping(state)
        if self.name == "sleep" and sleeping:
            return "sleep while asleep"
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
        if self.name in ("generate_fresh", "generate_stream"):
            ids += [model.golden_oracle(state), "output.finish_length"]
            ids += ["output.logprob_drift"] if self.name == "generate_fresh" else []
        elif self.name == "generate_cached":
            ids += [model.golden_oracle(state), "prefix_cache.hit_iff_cached"]
        elif self.name == "generate_n4":
            ids.append("output.seeded_sampling")
        elif self.name == "sleep" and self.params[2]:
            ids += [model.golden_oracle(state), *model.in_flight_outcome(self.params[1], self.params[0]).oracles]
        elif self.name == "wake" and state.held_stream:
            ids += RESUME_ORACLES
        elif self.name == "reset_prefix_cache":
            ids.append("api.reset_prefix_cache_result")
        return tuple(ids)


def sleep(level: int, mode: str = "abort", in_flight: bool = False) -> Operation:
    return Operation("sleep", (level, mode, in_flight))


def wake(tags=None) -> Operation:
    return Operation("wake", (None if tags is None else tuple(tags),))


def reload(path: str | None = None) -> Operation:
    return Operation("reload", (path,))


RESET_PREFIX_CACHE = Operation("reset_prefix_cache")

ALL = ([Operation(name) for name in GENERATES]
       + [sleep(level, mode, in_flight) for level in model.LEVELS for mode in MODES for in_flight in (False, True)
          if not in_flight or model.in_flight_predictable(mode, level)]
       + [wake(tags) for tags in WAKE_TAGS]
       + [reload(path) for path in RELOAD_PATHS]
       + [RESET_PREFIX_CACHE])
BY_TOKEN = {str(op): op for op in ALL}


def parse(token: str) -> Operation:
    try:
        return BY_TOKEN[token.strip()]
    except KeyError:
        raise ValueError(f"unknown walk operation {token!r}; known: {', '.join(BY_TOKEN)}") from None


def terminal(op: Operation, s: State) -> bool:
    """A /wake_up without tags while one tag is resident and the other asleep: the pinned divergence
    full_wake_remaps_resident_pool ends the server's usable life, so a walk makes it last (a probe)."""
    return op.name == "wake" and op.params[0] is None and 0 < len(s.asleep_tags) < len(model.TAGS)


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


def _why_not(op: Operation, s: State) -> str | None:
    if op.name not in _APPLY:
        return f"no operation named {op.name!r}"
    if s.held_stream and op.name != "wake":
        return "a stream frozen by a level-0 keep is open: only the wake that resumes it is modelled"
    if op.name in GENERATES:
        if not model.can_run(s):
            return "a request would wait for the wake (held requests are not part of the walk)"
        if model.serves(s) is None:
            return "garbage weights: no golden predicts the output, and the blocks it caches would be garbage"
        return None
    if op.name == "sleep":
        level, mode, in_flight = op.params
        if in_flight and not (model.in_flight_predictable(mode, level) and model.can_run(s)
                              and model.serves(s) is not None):
            return "a request in flight needs a server that serves a golden and a predictable pause mode"
        if s.paused and mode != "abort":
            return ("while asleep the pause modes differ only for requests in flight, of which there are "
                    "none: abort stands for all three")
        return None
    if op.name == "wake":
        if terminal(op, s):
            return ("a full wake after a wake of one tag fails and leaves the server asleep for good on every "
                    "supported release (known divergence full_wake_remaps_resident_pool): only a shard's last "
                    "step makes it (plan.terminal_probes)")
        woken = _executor_woken(op.params[0], s.asleep_tags)
        if s.level == 2 and WEIGHTS in s.asleep_tags - woken and KV_CACHE in woken:
            return ("after a level-2 sleep the first wake restores the model buffers saved on the host "
                    "(gpu_worker.py:231-235) into the weights pool (allocated under the weights tag, "
                    "gpu_worker.py:426): woken before the weights, the KV cache leaves that pool unmapped")
        return None
    if op.name == "reload":
        if WEIGHTS in s.asleep_tags:
            return "the weights are asleep: reload_weights would write unmapped memory"
        target = op.params[0] or s.model_path
        if s.prefix_cached and target != s.weights:
            return ("the prefix cache holds blocks computed with the weights a reload replaces (reload_weights "
                    "does not reset it): reset_prefix_cache first")
        return None
    return None


# --- effects -------------------------------------------------------------------------------------
def _generate(op: Operation, s: State) -> State:
    return dataclasses.replace(s, prefix_cached=True) if op.name == "generate_cached" else s


def _sleep(op: Operation, s: State) -> State:
    level, mode, in_flight = op.params
    change = dict(paused=True, gauge_level=level, held_stream=in_flight and mode == "keep")
    if level >= 1:
        change["prefix_cached"] = False
    if level >= 1 and not s.asleep_tags:
        change.update(level=level, asleep_tags=frozenset(model.TAGS), weights=s.weights if level == 1 else None)
    elif not s.asleep_tags:
        change["level"] = 0
    return dataclasses.replace(s, **change)


def _wake(op: Operation, s: State) -> State:
    asleep = s.asleep_tags - _executor_woken(op.params[0], s.asleep_tags)
    host_cached = s.host_cached or (model.holds_host_copy(s) and WEIGHTS not in asleep)
    if asleep:
        return dataclasses.replace(s, asleep_tags=asleep, gauge_level=None, host_cached=host_cached)
    return dataclasses.replace(s, level=None, asleep_tags=frozenset(), paused=False, gauge_level=None,
                               host_cached=host_cached, held_stream=False)


def _reload(op: Operation, s: State) -> State:
    target = op.params[0] or s.model_path
    return dataclasses.replace(s, weights=target, model_path=target)


def _reset(op: Operation, s: State) -> State:
    return dataclasses.replace(s, prefix_cached=False)


_APPLY = {**{name: _generate for name in GENERATES}, "sleep": _sleep, "wake": _wake, "reload": _reload,
          "reset_prefix_cache": _reset}


def effect(op: Operation, state: State) -> State:
    """The state op leads to by the model's effects, also where the walk does not make it: a terminal
    full wake (terminal()) on a release where full_wake_remaps_resident_pool does not apply wakes every
    tag as documented."""
    return _APPLY[op.name](op, state)


def emptied_cache_unseen(unseen: bool, op: Operation, before: State, after: State) -> bool:
    """Whether, after op took before to after, the walk has still to look at a prefix cache a step emptied
    (a sleep of level >= 1, a reset), given whether it had to before: a generate_cached looks at it with
    its own result; a step that empties it again leaves one more to look at. Both walkers (the GPU's
    runner.py, the engine tier's walk_driver.py) look where the plan sends no such request before the
    next reset, which would hide a cache that was never emptied (sleep_while_paused_keeps_prefix_cache)."""
    if before.prefix_cached and not after.prefix_cached:
        return True
    return unseen and op.name != "generate_cached"


def moves_memory(op: Operation, state: State) -> bool:
    """Whether the executor maps or unmaps a pool when op runs in state, by the model: its sleeping tags
    change. A sleep or wake that moves none needs no memory phase (the GPU lock orders only what can
    break a neighbour's sleep check), and the fake's device bytes stay put (model_vs_fake_unit_test)."""
    return op.apply(state).asleep_tags != state.asleep_tags


def require_applicable(op, state: State, step_index: int) -> None:
    """Raises oracle.Precondition when the walk planned `op` where the model says it cannot run: a
    planner bug, not a server's (every walker checks this before it acts)."""
    reason = op.why_not(state)
    if reason:
        raise oracle.Precondition(f"walk step {step_index}: {op} is not applicable in "
                                  f"({state.describe()}): {reason}")
