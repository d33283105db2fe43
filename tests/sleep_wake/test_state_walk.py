"""The state walk: planned, seeded sequences of every operation a sleep-mode client can send (generates,
also while paused or asleep; sleeps of every level and pause mode with and without requests in flight or
waiting; staged, full, two-tag and tag-plus-scheduling wakes; unknown tags; reloads from disk and pushes
of tensors and CUDA-IPC handles as RL trainers push; /pause with each mode and clear_cache, and /resume,
where the door has them; prefix-cache resets; misuse), each step judged against the model of
tests/core/walk (flags, gauge, /is_paused, health, GPU and host bytes, golden output of the serving
checkpoint, cached tokens, how requests in flight and waiting end) by the oracles.

One seeded tour (each cell its own seed, plan.cell_seed) visits every pair of the cell's share of its door's
reachable (situation, operation) pairs (plan.deal: every pair that reaches the worker, and its part of those
decided above it, which the door's cells of a runner split); it is cut into one walk per test class, one
per Bazel shard (tools/matrix.bzl SHARD_COUNTS, by the cell's front door and execution mode; pytest_main keeps
a class whole in its shard, so each shard runs one class, one server, its walk); a class fails when the steps
that ran leave one of its pairs unvisited (walk/coverage.py, every tier's verdict). Pairs where a known
divergence ends a server's usable life are probed last, one kind per shard (plan.terminal_probes). The goldens
come from the cell's golden actions (tests/sleep_wake/goldens: a fresh server on each checkpoint), never from
the server under test.
SLEEPWAKE_WALK_REPLAY="op,op,..." runs that sequence instead of the plan (the replay a failure prints), in
the shard a --test_filter picks; a run that picks none refuses it. A cell is full only when its shards
together walked every pair of its door that reaches the worker and ran every probe, and the door's cells
together walked every pair of the door (tools/results/walk_gate.py, the report's gate): a filtered, replayed
or stopped shard leaves it partial. SLEEPWAKE_WALK_SHARE=door (plan.SHARE_VAR: the fake tier's and the
mutants' single cells) walks every pair of the door in this cell.
"""

import functools
import os

import pytest

from tests.core import cells, goldens, host_memory, memory, oracle, servers
from tests.core.memory import settled_gpu_bytes
from tests.core.walk import coverage, driver, model, plan
from tests.sleep_wake.walk import gpu_walk
from tools.launcher.config import resolve_model
from tools.matrix import shard_count

_CELL = cells.cell_from_env()
SHARDS = shard_count("state_walk", _CELL.mode, _CELL.door)
SHARE = plan.share_of_env(_CELL.door, _CELL.runner, _CELL.mode)


def _goldens(cell, name: str, checkpoint: str) -> gpu_walk.Goldens:
    """A checkpoint's walk goldens from its golden action's file (SLEEPWAKE_GOLDEN_A / _B)."""
    taken = goldens.read_checkpoint(
        goldens.env_path(name),
        runner=cell.runner,
        mode=cell.mode,
        identity=servers.identity(),
        checkpoint=goldens.checkpoint_name(checkpoint),
    )
    return gpu_walk.Goldens(
        {p: taken.greedy[p] for p in gpu_walk.WALK_PROMPTS}, taken.seeded.token_ids, taken.stream.token_ids[0]
    )


@pytest.fixture(scope="class")
def walk_trainer(client):
    """The RL trainer beside the server (tests/core/trainer.py), for the walk's pushes that cross processes;
    started on its first push."""
    trainer = servers.trainer_class()(client.allocation)
    yield trainer
    trainer.close()


@pytest.fixture(scope="class")
def walk_context(server, client, recorder, cell, walk_trainer):
    """Both checkpoints' goldens, from fresh servers of this cell (the golden actions), and the readings
    every band is relative to, taken on this fresh server before any sleep, push or reload."""
    checkpoints = {"A": resolve_model(server.config.model), "B": resolve_model(os.environ["SLEEPWAKE_MODEL_B"])}
    taken = {name: _goldens(cell, name, path) for name, path in checkpoints.items()}
    same = [p for p in gpu_walk.WALK_PROMPTS if taken["A"].greedy[p].token_ids == taken["B"].greedy[p].token_ids]
    if same:
        raise oracle.Precondition(
            f"checkpoint B must serve other tokens than A ({same} alike): the walk's "
            "goldens cannot tell the checkpoints apart"
        )
    # Every kind of request the walk sends, once, before the readings: the API server's heap grows by tens
    # of MiB at its first logprobs, n=4, long-prompt and streamed answers (past a walk's host band at its
    # first such step: docs/design.md), and eager mode reserves its activation blocks at the
    # first forward. The answers are judged against A's golden: the fresh server must serve it.
    gpu_walk.warm_up(client, taken["A"], streams=cells.door_cannot(cell, "stream") is None)
    client.reset_prefix_cache()
    sizes = model.Sizes(
        settled_gpu_bytes(server, "walk start (INITIAL)", recorder=recorder),
        memory.checkpoint_tensor_bytes(checkpoints["A"]),
        server.config.kv_cache_bytes,
    )
    host_awake = host_memory.server_host_memory(server)[0].rss
    return gpu_walk.Context(
        server, client, recorder, cell.id, checkpoints, taken, sizes, host_awake, cell.door, walk_trainer
    )


def _walk(shard: int, walk_context, recorder) -> None:
    subject = gpu_walk.GpuSubject(walk_context)
    door = walk_context.door
    walker = driver.Walker(subject, subject.version, door)
    seed = plan.cell_seed(plan.SEED, walk_context.cell_id)
    replay = bool(os.environ.get(plan.REPLAY_VAR))  # one failure's walk instead of the share: a partial cell

    def record_stopped() -> None:
        walks, pairs = ((), frozenset()) if replay else plan.plan_shards(SHARDS, seed, door, SHARE)[shard]
        done = coverage.covered(walker, shard, pairs, walks)
        coverage.record_walk_coverage(recorder, done, seed, door, probed=[], completed=False, replay=replay)

    try:
        with plan.recorded_when_stopped(record_stopped):
            planned = plan.run_shard(walker, shard, SHARDS, seed, door, SHARE)
        if planned is None:  # a replay: its failure, if any, is the verdict; its cell is partial
            done = coverage.covered(walker, shard, frozenset(), ())
            coverage.record_walk_coverage(recorder, done, seed, door, probed=[], completed=True, replay=True)
            return
        pairs, walks = planned
        probes = plan.terminal_probes(door)[shard::SHARDS]
        probed = [walker.probe(probe) for probe in probes]  # at most one: it ends the server's usable life
    finally:
        subject.close()
    record = functools.partial(
        coverage.record_walk_coverage, recorder, seed=seed, door=door, probed=probed, completed=True
    )
    coverage.verdict(walker, shard, pairs, walks, record)


def _shard_class(shard: int):
    def test_walk_visits_every_pair_of_its_shard(self, walk_context, recorder):
        _walk(shard, walk_context, recorder)

    return type(
        f"TestStateWalkShard{shard}",
        (),
        {
            "__doc__": f"Shard {shard} of {SHARDS} of the model's reachable (situation, operation) pairs.",
            "FRESH_SERVER": (
                "every band is relative to readings taken before any push or reload (tests/core/server_reuse.py)"
            ),
            "test_walk_visits_every_pair_of_its_shard": test_walk_visits_every_pair_of_its_shard,
        },
    )


for _shard in range(SHARDS):
    globals()[f"TestStateWalkShard{_shard}"] = _shard_class(_shard)
del _shard
