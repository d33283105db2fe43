"""The state walk: planned, seeded sequences of every operation a sleep-mode client can send (generates,
sleeps of every level and pause mode with and without a request in flight, staged and full wakes,
unknown tags, weight pushes and reloads, prefix-cache resets, misuse), each step judged against the
model of tests/sleep_wake/walk (flags, gauge, health, GPU and host bytes, golden output of the serving
checkpoint, cached tokens, how requests in flight end) by the oracles.

One seeded plan (each cell its own seed, plan.cell_seed) visits every reachable (state, operation) pair
of the model; its walks are dealt out over SHARDS test classes, one per Bazel shard (tools/matrix.bzl
SHARD_COUNTS; pytest_main keeps a class whole in its shard, so each shard runs one class, one server, its
share of the walks); a class fails when its walks leave one of its pairs unvisited. A
full wake after a wake of one tag ends a server's usable life (known divergence
full_wake_remaps_resident_pool): those pairs are probed last, one kind per shard (plan.terminal_probes).
SLEEPWAKE_WALK_REPLAY="op,op,..." runs that sequence instead of the plan (the replay a failure prints).
"""

import os

import pytest

from tests.sleep_wake.lib import host_memory, measure, memory, oracle
from tests.sleep_wake.lib.memory import settled_gpu_bytes
from tests.sleep_wake.walk import model, plan, runner
from tools.launcher.config import resolve_model

SHARDS = 6
SEED = 20261201
MAX_STEPS = 60


@pytest.fixture(scope="class")
def walk_context(server, client, golden, recorder, cell):
    """Both checkpoints' goldens (B's taken after a push at level 2, which keeps no host copy: the
    server is back in INITIAL afterwards), and the readings every band is relative to."""
    checkpoints = {"A": resolve_model(server.config.model), "B": resolve_model(os.environ["SLEEPWAKE_MODEL_B"])}
    goldens = {"A": runner.take_goldens(client)}
    for name in ("B", "A"):
        client.sleep(level=2)
        client.wake_up(["weights"])
        client.reload_weights(checkpoints[name])
        client.wake_up(["kv_cache"])
        client.reset_prefix_cache()
        taken = runner.take_goldens(client)
        goldens.setdefault(name, taken)
    same = [p for p in goldens["A"].greedy if goldens["A"].greedy[p].token_ids == goldens["B"].greedy[p].token_ids]
    if same or taken.greedy[runner.LONG].token_ids != goldens["A"].greedy[runner.LONG].token_ids:
        raise oracle.Precondition(f"checkpoint B must serve other tokens than A ({same} alike), and A pushed back "
                                  "its own: the walk's goldens are not sound")
    client.reset_prefix_cache()  # the goldens cached the long prompt; the walk starts with nothing cached
    client.complete(runner.PROMPTS[0])  # a forward: eager mode reserves its activation blocks again
    sizes = model.Sizes(settled_gpu_bytes(server, "walk start (INITIAL)", recorder=recorder),
                        memory.checkpoint_tensor_bytes(checkpoints["A"]), server.config.kv_cache_bytes)
    host_awake = host_memory.server_host_memory(server)[0].rss
    return runner.Context(server, client, recorder, cell.id, checkpoints, goldens, sizes, host_awake)


def _walk(shard: int, walk_context, recorder) -> None:
    walker = runner.Walker(walk_context)
    seed = plan.cell_seed(SEED, walk_context.cell_id)
    planned = plan.run_shard(walker, shard, SHARDS, seed, MAX_STEPS)
    if planned is None:  # a replay: its failure, if any, is the verdict
        return
    pairs, walks = planned
    probes = plan.terminal_probes()[shard::SHARDS]
    for probe in probes:  # at most one: it ends the server's usable life (full_wake_remaps_resident_pool)
        walker.probe(probe)
    visited, consecutive = plan.coverage(walks)
    missing = set(pairs) - visited
    recorder.record(measure.current_test(), "walk_coverage", len(pairs & visited), "pairs", shard=shard,
                    seed=seed, shard_pairs=len(pairs), steps=walker.step_index, walks=len(walks),
                    consecutive_pairs=len(consecutive), unvisited=sorted(str(op) for _, op in missing))
    oracle.equal("walk.pairs_visited", len(missing), 0,
                 f"shard {shard}: (state, operation) pairs of its share its walks left unvisited "
                 f"({sorted(f'{op} in {s.describe()}' for s, op in missing)[:5]})")


def _shard_class(shard: int):
    def test_walk_visits_every_pair_of_its_shard(self, walk_context, recorder):
        _walk(shard, walk_context, recorder)
    return type(f"TestStateWalkShard{shard}", (), {
        "__doc__": f"Shard {shard} of {SHARDS} of the model's reachable (state, operation) pairs.",
        "test_walk_visits_every_pair_of_its_shard": test_walk_visits_every_pair_of_its_shard})


for _shard in range(SHARDS):
    globals()[f"TestStateWalkShard{_shard}"] = _shard_class(_shard)
del _shard
