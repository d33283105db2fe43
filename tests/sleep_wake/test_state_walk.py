"""The state walk: planned, seeded sequences of every operation a sleep-mode client can send (generates,
also while paused or asleep; sleeps of every level and pause mode with and without requests in flight or
waiting; staged, full, two-tag and tag-plus-scheduling wakes; unknown tags; reloads from disk and pushes
of tensors and CUDA-IPC handles as RL trainers push; /pause with each mode and clear_cache, and /resume,
where the door has them; prefix-cache resets; misuse), each step judged against the model of
tests/core/walk (flags, gauge, /is_paused, health, GPU and host bytes, golden output of the serving
checkpoint, cached tokens, how requests in flight and waiting end) by the oracles.

One seeded tour (each cell its own seed, plan.cell_seed) visits every situation pair of the cell's share of its
door's (plan.deal: every pair that reaches the worker, and its part of those decided above it, which the door's
cells of a runner split); it is cut into one walk per test class, the cell's shards (tools/matrix.bzl SHARD_COUNTS,
by the cell's front door and execution mode), which Bazel runs over at most BAZEL_MAX_SHARDS of its shards
(pytest_main keeps a class whole in its shard, so each class runs on one server, its walk); a class fails when the
steps that ran leave one of its pairs unvisited (walk/coverage.py, every tier's verdict). Pairs where a known
divergence ends a server's usable life are probed after a shard's walk, one kind in each of the cell's last shards
(walk/shards.py). The goldens come from the cell's golden actions (tests/sleep_wake/goldens: a fresh server on each
checkpoint), never from the server under test.
Servers (SLEEPWAKE_REUSE_SERVERS=1): a shard borrows the server a passing class of its configuration gave
back (tests/core/server_reuse.py; across test processes, the launcher's parking), once reset to a state
the walk starts in and checked by the model's own invariants of that state against the fresh readings
that travel with the server (lend_check); a refusal means a fresh server. Every band is relative to those
fresh readings, so a walk on a lent server is judged as on a fresh one. A shard that probes never gives
its server back.
SLEEPWAKE_WALK_REPLAY="op,op,..." runs that sequence instead of the plan (the replay a failure prints), in
the shard a --test_filter picks; a run that picks none refuses it. A cell is full only when its shards
together walked every pair of its door that reaches the worker and ran every probe, and the door's cells
together walked every pair of the door (tools/results/walk_gate.py, the report's gate): a filtered, replayed
or stopped shard leaves it partial. SLEEPWAKE_WALK_SHARE=door (plan.SHARE_VAR: the fake tier's and the
mutants' single cells) walks every pair of the door in this cell.
"""

import dataclasses
import functools
import os

import pytest

from tests.core import cells, expect, goldens, host_bands, host_memory, memory, oracle, server_reuse, servers
from tests.core.walk import coverage, driver, model, plan
from tests.sleep_wake.walk import gpu_walk, shards
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


def _context(cell, lent, client, recorder, trainer=None) -> gpu_walk.Context:
    """Both checkpoints' goldens, from fresh servers of this cell (the golden actions), and the readings
    every band is relative to: the server's fresh readings (server_reuse.Fresh), taken once, after its
    warm-up and before any sleep, push or reload, and travelling with it when it is lent on."""
    server, fresh = lent.server, lent.fresh
    checkpoints = {"A": resolve_model(server.config.model), "B": resolve_model(os.environ["SLEEPWAKE_MODEL_B"])}
    taken = {name: _goldens(cell, name, path) for name, path in checkpoints.items()}
    same = [p for p in gpu_walk.WALK_PROMPTS if taken["A"].greedy[p].token_ids == taken["B"].greedy[p].token_ids]
    if same:
        raise oracle.Precondition(
            f"checkpoint B must serve other tokens than A ({same} alike): the walk's "
            "goldens cannot tell the checkpoints apart"
        )
    sizes = model.Sizes(
        fresh.device_bytes, memory.checkpoint_tensor_bytes(checkpoints["A"]), server.config.kv_cache_bytes
    )
    return gpu_walk.Context(
        server, client, recorder, cell.id, checkpoints, taken, sizes, fresh.host_bytes, cell.door, trainer
    )


def _starts(ctx: gpu_walk.Context, version: str) -> list[model.State]:
    """The states a walk may start in on a server reset to INITIAL whose host bytes are in the model's band
    for it: INITIAL, and where the release's caching host allocator keeps a level-1 copy's pinned block
    after the wake (host_bands.copy_cached_after_wake), INITIAL with that block cached, as an earlier
    walk on the server leaves it (plan.reset_ops)."""
    candidates = [model.INITIAL]
    if host_bands.copy_cached_after_wake(version):
        candidates.append(dataclasses.replace(model.INITIAL, host_cached=True))
    host = host_memory.server_host_memory(ctx.server)[0].rss
    band = functools.partial(
        model.host_band, version=version, host_awake=ctx.host_awake, weights_bytes=ctx.sizes.weights_bytes
    )
    return [s for s in candidates if not band(s, cell_id=ctx.cell_id).violations(host)]


def _check_initial(ctx: gpu_walk.Context, start: model.State, where: str) -> None:
    """The model's own invariants of the walk's initial state `start` on ctx's server, each an oracle:
    it serves checkpoint A (A's goldens, greedy, seeded and streamed: gpu_walk.warm_up), nothing is
    in flight or waiting (/load), the prefix cache is empty again, and every invariant check_state
    measures (both flags, /is_paused, health, GPU and host bytes in their bands of the fresh readings)."""
    gpu_walk.warm_up(ctx.client, ctx.goldens["A"], streams=not ctx.door_cannot_stream)
    ctx.client.reset_prefix_cache()
    expect.load_drains(ctx.client, f"{where}: requests in flight or waiting")
    subject = gpu_walk.GpuSubject(ctx)
    try:
        subject.check_state(start, where)
    finally:
        subject.close()


def lend_check(cell, lent, client, recorder) -> str | None:
    """The walk's LEND_CHECK (tests/core/server_reuse.py): a lent server, reset, is in a state the walk
    starts in (lent.initial), by the model's own invariants against the server's fresh readings; else
    why not, and the shard gets a fresh server. Which state: the one whose host band holds the server's
    host bytes (_starts); the check of that state then measures everything else."""
    ctx = _context(cell, lent, client, recorder)
    version = client.version()
    starts = _starts(ctx, version)
    if len(starts) != 1:
        found = " and ".join(s.describe() for s in starts) or "none"
        return f"host bytes in the band of {found} of the walk's initial states: it cannot tell which it starts in"
    _check_initial(ctx, starts[0], "a lent server reset for the walk")
    lent.initial = starts[0]
    return None


@pytest.fixture(scope="class")
def walk_trainer(client):
    """The RL trainer beside the server (tests/core/trainer.py), for the walk's pushes that cross processes:
    its process starts now, its GPU memory is taken on the first push."""
    trainer = servers.trainer_class()(client)
    yield trainer
    trainer.close()


@pytest.fixture(scope="class")
def walk_context(lent, client, recorder, cell, walk_trainer):
    """The walk's context (_context) and the state it starts in: a lent server's, as its LEND_CHECK found it;
    a fresh server's INITIAL, checked here (its fresh readings are taken here when reuse is off), where a
    broken invariant is the shard's failure."""
    if lent.fresh is None:
        lent.fresh = server_reuse.read_fresh(
            cell, lent.server, client, resolve_model(lent.server.config.model), recorder
        )
    ctx = _context(cell, lent, client, recorder, walk_trainer)
    if lent.initial is None:
        _check_initial(ctx, model.INITIAL, "walk start (a fresh server)")
        return ctx, model.INITIAL
    return ctx, lent.initial


def _walk(shard: int, walk_context, recorder) -> None:
    context, start = walk_context
    subject = gpu_walk.GpuSubject(context)
    door = context.door
    walker = driver.Walker(subject, subject.version, door)
    walker.state = start
    seed = plan.cell_seed(plan.SEED, context.cell_id)
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
        probes = shards.probes_of(shard, SHARDS, door)
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

    attributes = {
        "__doc__": f"Shard {shard} of {SHARDS} of the model's reachable situation pairs.",
        "LEND_CHECK": staticmethod(lend_check),
        "test_walk_visits_every_pair_of_its_shard": test_walk_visits_every_pair_of_its_shard,
    }
    if shards.ends_server(shard, SHARDS, _CELL.door):
        attributes["ENDS_SERVER"] = "its terminal probe ends the server's usable life (plan.terminal_probes)"
    return type(f"TestStateWalkShard{shard}", (), attributes)


for _shard in range(SHARDS):
    globals()[f"TestStateWalkShard{_shard}"] = _shard_class(_shard)
del _shard
