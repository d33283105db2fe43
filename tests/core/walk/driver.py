"""The one walk driver: it runs planned walks on any tier and judges every step by the model (Jepsen's
habit: the history is checked against the model after every operation, not at the end of one
hand-written path).

The driver owns what every tier shares: the model's state, the order of a step (the precondition, the
operation, its own result, the state's invariants, the prefix cache's probes), the record of the steps
that actually ran (coverage is counted from them, never from the plan), the replay a failure prints and
the terminal probes, and it judges what a tier observed where observations.py defines the observation (a
terminal pair's, today). A tier (the GPU's tests/sleep_wake/walk/gpu_walk.py, the engine tier's
tests/engine/lib/engine_walk.py) supplies how an operation is performed and what it can observe: the
Subject protocol below. A pair a tier cannot honour is named in its `cannot_honour` with the reason, never
skipped silently.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from tests.core import oracle, thresholds
from tests.core.walk import model, observations, plan
from tests.core.walk import operations as ops
from tests.core.walk.model import State
from tools.matrix import HTTP


@dataclasses.dataclass
class Step:
    """One step that ran: the state before, the operation, the state the model says it left."""

    before: State
    op: ops.Operation
    after: State


class Subject(Protocol):
    """How one tier performs the walk's operations and observes the server.

    Each operation method gets the state before, the state the model predicts after, and where the
    step is (for messages); it performs the call and judges the call's own result (operations.
    Operation.oracles). check_state judges the invariants of the state the server is now in;
    probe_cache and look_at_emptied_cache send the long prompt where the driver says the cache must
    be looked at; terminal makes a terminal pair's call and observes it and what follows it (the pin
    of its known divergence says what to observe; the driver judges the observation:
    observations.check_terminal); judged hears each oracle id the driver is about to check on the step;
    ran records a step that ran (its measurements)."""

    replay_on: str  # what a replay runs on, for the failure's message ("a fresh server")

    def generate(self, op, before: State, after: State, where: str) -> None: ...
    def sleep(self, op, before: State, after: State, where: str) -> None: ...
    def wake(self, op, before: State, after: State, where: str) -> None: ...
    def reload(self, op, before: State, after: State, where: str) -> None: ...
    def reset_prefix_cache(self, op, before: State, after: State, where: str) -> None: ...
    def push(self, op, before: State, after: State, where: str) -> None: ...
    def pause(self, op, before: State, after: State, where: str) -> None: ...
    def resume(self, op, before: State, after: State, where: str) -> None: ...
    def cancel_queued(self, op, before: State, after: State, where: str) -> None: ...
    def check_state(self, state: State, where: str) -> None: ...
    def probe_cache(self, state: State, where: str) -> None: ...
    def look_at_emptied_cache(self, state: State, where: str) -> None: ...
    def terminal(self, op, state: State, pin: thresholds.Pin, where: str) -> observations.Terminal: ...
    def judged(self, oracle_ids: list[str]) -> None: ...
    def ran(self, step: Step, index: int) -> None: ...
    def pick(self, shard: int) -> str: ...


class Walker:
    """One server's walks, from INITIAL, step by step."""

    def __init__(self, subject: Subject, version: str, door: str = HTTP):
        self.subject = subject
        self.version = version
        self.door = door  # the front door the tier sends through: its walk has the pairs it can reach
        self.state = model.INITIAL
        self.step_index = 0
        self.executed: list[list[Step]] = []  # per walk, the steps that ran, in order
        # A step emptied the prefix cache (a sleep of level >= 1, a reset) and no request of the long
        # prompt has looked since: where the plan sends none before the next reset, the driver looks
        # itself (subject.look_at_emptied_cache), else a cache that was never emptied passes unseen.
        self.emptied_unseen = False

    def step(self, op) -> None:
        before = self.state
        ops.require_applicable(op, before, self.step_index, self.door)
        after = op.apply(before)
        where = f"step {self.step_index} ({op} from {before.describe()})"
        perform = self.subject.generate if op.name in ops.GENERATES else getattr(self.subject, op.name)
        perform(op, before, after, where)
        self._arrived(Step(before, op, after), where)

    def _arrived(self, step: Step, where: str) -> None:
        """The model's state is now step.after: its invariants are checked, the step counted as run."""
        self.state = step.after
        self.emptied_unseen = ops.emptied_cache_unseen(self.emptied_unseen, step.op, step.before, step.after)
        self.subject.check_state(step.after, where)
        if model.hits_cache(step.after, "long"):
            # The cached blocks are part of the state: after every step that keeps them, a repeat still
            # hits them. Asking leaves the state as it is; where nothing is cached, asking would cache
            # it, so only a generate_cached looks there, or the look after an emptying step.
            self.subject.probe_cache(step.after, f"the cache probe after {where}")
        elif self.emptied_unseen and model.can_run(step.after):
            self.emptied_unseen = False
            self.subject.look_at_emptied_cache(step.after, f"the first look at the emptied cache after {where}")
        if not self.executed:
            self.executed.append([])
        self.executed[-1].append(step)
        self.subject.ran(step, self.step_index)
        self.step_index += 1

    def run(self, walks, seed: int, shard: int) -> None:
        """Every walk in order; a failure carries the replay of the walk so far and its shrunk form."""
        for walk in walks:
            start = self.state
            self.executed.append([])
            for i, op in enumerate(walk):
                try:
                    self.step(op)
                except oracle.OracleFailure as failure:
                    raise plan.with_replay(
                        failure,
                        seed,
                        shard,
                        walk,
                        i,
                        start,
                        self.subject.replay_on,
                        self.subject.pick(shard),
                        self.door,
                    ) from None

    def probe(self, walk) -> str:
        """A terminal probe (plan.terminal_probes): the walk to a terminal pair, then its call, judged with
        everything observable after it against the pin of its known divergence. Where the divergence
        applies the server is not walked any further; where it does not, the pair behaved as documented
        and the state the model then predicts is checked like any step's. Returns the divergence's name."""
        *prefix, last = walk
        self.executed.append([])
        for op in prefix:
            self.step(op)
        before = self.state
        name = ops.terminal(last, before)
        if name is None:
            raise oracle.Precondition(
                f"walk probe: {last} in ({before.describe()}) is no terminal pair; "
                "plan.terminal_probes made a probe that is not one"
            )
        pin = thresholds.divergence(name, self.version, self.door)
        where = f"probe {last} from ({before.describe()})"
        observed = self.subject.terminal(last, before, pin, where)
        observations.check_terminal(observed, pin, before, self.version, where, self.subject.judged)
        if not pin.applies:
            self._arrived(Step(before, last, ops.effect(last, before)), where)
        else:
            self.executed[-1].append(Step(before, last, before))
            self.step_index += 1
        return name

    def steps(self) -> list[list[tuple]]:
        """[[(state before, operation), ...] per walk] of what ran (plan.steps_coverage's shape)."""
        return [[(s.before, s.op) for s in walk] for walk in self.executed]

    def coverage(self):
        """What the executed steps visited: pairs, and consecutive operations within a walk (terminal
        probes' last steps included: they ran)."""
        return plan.steps_coverage(self.steps())
