"""A shard's coverage verdict, every tier's: what the steps that ran (driver.Walker.coverage) visited of
the shard's share of the plan's pairs, the tier's record of it, and walk.pairs_visited, which fails the
shard where a pair of its share is unvisited.

Counted from the executed steps, never from the planned walks: those visit every pair of their share by
construction (plan.plan_shards), so a verdict read from them passes a walker that ran nothing. Both
tiers' tests (tests/sleep_wake/test_state_walk.py, tests/engine/test_state_walk.py) and the driver's unit
tests call verdict, so a count that drifted back to the plan fails on a CPU, not unseen on a GPU.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

from tests.core import measure, oracle
from tests.core.walk import operations as ops
from tests.core.walk import plan
from tools.results import walk_gate

KEY = walk_gate.KEY  # the GPU tier's entry: the report judges a cell by its shards' (tools/results/walk_gate.py)


@dataclasses.dataclass(frozen=True)
class Covered:
    """What a shard's executed steps visited of its share."""

    shard: int
    share: frozenset  # the shard's pairs (plan.plan_shards)
    walks: int  # the share's planned walks
    visited: frozenset  # every pair the steps that ran visited, of the share or not
    consecutive: collections.Counter  # consecutive operations within a walk that ran
    steps: int  # the steps that ran, terminal probes' included
    states: tuple[str, ...]  # the states they left from and arrived at, by name, sorted
    walked: frozenset  # the door's reachable pairs among `visited`: all but the terminal probes' last steps
    worker: frozenset = frozenset()  # those of `walked` whose step reached the worker (operations.reaches_worker)

    @property
    def missing(self) -> frozenset:
        return self.share - self.visited

    def unvisited(self) -> list[str]:
        return sorted(map(plan.describe_pair, self.missing))


def covered(walker, shard: int, share, walks) -> Covered:
    """The share's coverage by walker's executed steps (walks: the share's planned walks, counted only)."""
    visited, consecutive = walker.coverage()
    # By name, so that the report can count the cell's states over its shards (each arrival was checked
    # against the model).
    states = {s.describe() for walk in walker.executed for step in walk for s in (step.before, step.after)}
    steps = [
        step
        for walk in walker.executed
        for step in walk
        if ops.terminal(step.op, step.before) is None  # a terminal pair is no reachable pair: it is probed
    ]
    walked = {plan.pair_of(step.before, step.op) for step in steps}
    # Counted by the steps that ran: a pair's rule is one answer for its whole situation (plan_unit_test).
    worker = {plan.pair_of(step.before, step.op) for step in steps if ops.reaches_worker(step.op, step.before)}
    return Covered(
        shard,
        frozenset(share),
        len(walks),
        frozenset(visited),
        consecutive,
        walker.step_index,
        tuple(sorted(states)),
        frozenset(walked),
        frozenset(worker),
    )


def verdict(walker, shard: int, share, walks, record: Callable[[Covered], object]) -> Covered:
    """The verdict of a shard whose walks ran to the end: record(covered) first (the GPU's walk_coverage
    entry, the engine tier's JSON), so that a failing shard's gaps are on file, then walk.pairs_visited."""
    done = covered(walker, shard, share, walks)
    record(done)
    oracle.equal(
        "walk.pairs_visited",
        len(done.missing),
        0,
        f"shard {shard}: situation pairs of its share the steps that ran left unvisited ({done.unvisited()[:5]})",
    )
    return done


def record_walk_coverage(
    recorder, done: Covered, seed: int, door: str, probed: list, completed: bool, replay: bool = False
) -> dict:
    """The GPU tier's walk_coverage entry of a shard, also where a failure stopped its walks (completed=False:
    the report counts its pairs, not the shard) and where it walked a replay instead of its share (replay).
    The report's gate (tools/results/walk_gate.py) unions the shards' worker_visited_pairs against the door's
    pairs that reach the worker, cell by cell, their visited_pairs over the door's cells against every pair of
    the door, and counts their probes against the door's: a shard's verdict proves its share only."""
    return recorder.record(
        measure.current_test(),
        KEY,
        len(done.share & done.visited),
        "pairs",
        shard=done.shard,
        seed=seed,
        shard_pairs=len(done.share),
        completed=completed,
        steps=done.steps,
        walks=done.walks,
        states=len(done.states),
        visited_states=list(done.states),
        model_states=plan.model_state_count(door),
        door=door,
        situations=len({sit for sit, _ in done.visited}),
        consecutive_pairs=len(done.consecutive),
        terminal_probes=probed,
        unvisited=done.unvisited(),
        visited_pairs=sorted(map(plan.describe_pair, done.walked)),
        worker_visited_pairs=sorted(map(plan.describe_pair, done.worker)),
        door_pairs=plan.pair_count(door),
        worker_pairs=plan.worker_pair_count(door),
        door_probes=len(plan.terminal_probes(door)),
        replay=replay,
    )
