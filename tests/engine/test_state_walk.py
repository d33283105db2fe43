"""The state walk on the engine subject: the model of tests/core/walk drives vLLM's real EngineCore.

The GPU walk's planning (plan.plan_shards, seeded plan.SEED, over SHARDS: one tour over every pair of the
door, not a cell's share of it, cut into one walk a shard), runs here against EngineCoreProc's real busy loop,
scheduler, KV cache manager and UniProcExecutor around the fake worker, with vLLM's own /sleep, /wake_up,
/is_sleeping, /reset_prefix_cache, /collective_rpc (reloads and pushes), /pause, /resume and /is_paused
routes over HTTP (lib/engine_walk.py, driven by the one walk driver, tests/core/walk/driver.py). After
every step it checks what the engine tier can observe against the model: /is_sleeping (route and engine),
the executor's sleeping tags, the scheduler's pause (/is_paused), the fake worker's pools and weights, that
a request
sent while asleep waits (and that no forward pass ran on released memory: the fake worker raises),
that a repeat of the long prompt hits cached tokens iff the model says its blocks are cached, and how
a request in flight ends under each pause mode. What it cannot observe is skipped per check
(engine_walk.SKIPPED), never per pair; a terminal pair it cannot honour is named in engine_walk.CANNOT_HONOUR.

A shard fails (walk.pairs_visited, the GPU walk's verdict: tests/core/walk/coverage.py) when the steps
that ran leave one of its pairs unvisited; its coverage (pairs, steps, consecutive pairs, checks made and
skipped) goes to the test log and to
engine_walk_shard<N>.json among the target's undeclared outputs. Shard i ends with terminal probe i
(plan.terminal_probes) where the engine tier can honour it: the full wake after a wake of one tag (the
fake worker refuses to map a resident pool as CuMemAllocator does), the reload while the weights
sleep (it refuses to write a released pool) and the /resume while a tag sleeps (the next forward pass
touches a released pool: the busy loop dies); the kv-first wake after level 2 is the GPU worker's
(engine_walk.CANNOT_HONOUR).
SLEEPWAKE_WALK_REPLAY="op,op,..." runs that sequence instead of the plan, in the shards a --test_filter picks
(a run that picks none refuses it).
"""

import json
import os
import time

import pytest

# The engine tier's own split, the GPU cells' being by front door and execution mode (tools/matrix.bzl
# SHARD_COUNTS): enough shards that each terminal probe has one, as on the GPU. The walk mutants name the
# shards that kill them under this deal (tests/engine/mutants/catalogue.py), so another count moves them.
SHARDS = 16


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """Two checkpoints of the tiny model (seeds 0 and 1) with their tensors: the paths reload_weights gets
    (the fake worker loads neither) and the tensors a push hands the model's load_weights."""
    from tools.checkpoints import make_synthetic_model

    out = {}
    for seed, name in enumerate(("A", "B")):
        path = str(tmp_path_factory.mktemp(f"tiny_qwen3_{name.lower()}"))
        make_synthetic_model.write_checkpoint(path, make_synthetic_model.TINY, seed=seed)
        out[name] = path
    return out


@pytest.fixture
def engine_server(engines, model_dir):
    """The engine with the suite's worker extension mixed into the fake worker, as every GPU server loads it
    (--worker-extension-cls), so a push runs the extension's own code."""
    from tests.engine.fakes.worker import ExtensionWorker
    from tests.engine.lib.engine_server import EngineServer
    from tools.launcher import weight_receiver

    extension = f"{weight_receiver.WeightReceiver.__module__}.{weight_receiver.WeightReceiver.__qualname__}"
    server = EngineServer(model_dir, f"{ExtensionWorker.__module__}.{ExtensionWorker.__qualname__}", extension)
    yield server
    server.close()


def _outputs_dir(tmp_path_factory) -> str:
    return os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or str(tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda shard: f"shard{shard}")
def test_walk_visits_every_pair_of_its_shard(shard, engine_server, checkpoints, tmp_path_factory, capsys):
    import vllm
    from tests.engine.lib import engine_walk
    from tests.core.walk import coverage, driver, model, operations, plan

    started = time.monotonic()
    subject = engine_walk.EngineSubject(engine_server, vllm.__version__, checkpoints)
    walker = driver.Walker(subject, vllm.__version__)
    planned = plan.run_shard(walker, shard, SHARDS, plan.SEED)
    if planned is None:  # a replay: its failure, if any, is the verdict
        return
    pairs, walks = planned
    probes = [
        p
        for p in plan.terminal_probes()[shard::SHARDS]
        if operations.terminal(p[-1], plan.run(model.INITIAL, p[:-1])) not in engine_walk.CANNOT_HONOUR
    ]
    probed = [walker.probe(probe) for probe in probes]

    def record(done) -> None:
        """The coverage JSON and the log line; a check skipped without a reason fails the shard before
        its coverage does."""
        _write_coverage(done, subject, probed, started, _outputs_dir(tmp_path_factory), capsys)
        unexplained = sorted(set(subject.skipped) - set(engine_walk.SKIPPED))
        if unexplained:
            pytest.fail(
                f"checks the GPU walk makes that this walk neither makes nor explains: {unexplained}; "
                "check them in lib/engine_walk.py or say why not in engine_walk.SKIPPED"
            )

    coverage.verdict(walker, shard, pairs, walks, record)


def _write_coverage(done, subject, probed: list, started: float, outputs: str, capsys) -> None:
    """engine_walk_shard<N>.json among the target's undeclared outputs, and its line in the test log."""
    from tests.engine.lib import engine_walk
    from tests.core.walk import plan

    record = {
        "shard": done.shard,
        "seed": plan.SEED,
        "shard_pairs": len(done.share),
        "pairs_visited": len(done.share & done.visited),
        "all_pairs_visited": len(done.visited),
        "walks": done.walks,
        "steps": done.steps,
        "consecutive_pairs": len(done.consecutive),
        "unvisited": done.unvisited(),
        "terminal_probes": probed,
        "cannot_honour": engine_walk.CANNOT_HONOUR,
        **subject.coverage_record(),
        "seconds": round(time.monotonic() - started, 1),
    }
    with open(os.path.join(outputs, f"engine_walk_shard{done.shard}.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    with capsys.disabled():
        print(
            f"\nengine walk shard {done.shard}: {record['pairs_visited']}/{len(done.share)} pairs, {done.steps} "
            f"steps in {done.walks} walks, {len(done.consecutive)} consecutive pairs, probes {probed}, "
            f"{sum(subject.checked.values())} checks made, {sum(subject.skipped.values())} skipped, "
            f"{record['seconds']} s"
        )


def test_the_shards_cover_every_reachable_pair():
    from tests.core.walk import plan

    shards = [pairs for _, pairs in plan.plan_shards(SHARDS, plan.SEED)]
    assert set().union(*shards) == plan.reachable_pairs()
    assert len(shards) == SHARDS and all(shards)


def test_the_walk_tier_names_known_oracles_and_makes_no_bare_assert():
    """The GPU suite's lint (tests/core/unit/oracle_unit_test.py) does not read tests/engine: the
    same two rules for the walk's engine subject. Every check goes through an oracle id of oracle.ORACLES."""
    import ast

    from tests.engine.lib import engine_walk
    from tests.core import oracle

    tree = ast.parse(open(engine_walk.__file__, encoding="utf-8").read())
    assert not [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    assert not [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Raise)
        and isinstance(n.exc, ast.Call)
        and isinstance(n.exc.func, ast.Name)
        and n.exc.func.id == "AssertionError"
    ]
    families = {o.split(".")[0] for o in oracle.ORACLES}
    formatted = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    named = {
        n.value
        for n in ast.walk(tree)
        if id(n) not in formatted
        and isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and n.value.count(".") == 1
        and " " not in n.value
        and n.value.split(".")[0] in families
    }
    assert named and named <= set(oracle.ORACLES), sorted(named - set(oracle.ORACLES))
    assert set(engine_walk.STAND_INS) <= set(engine_walk.SKIPPED)
