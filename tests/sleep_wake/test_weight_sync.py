"""Weight sync: a server started on checkpoint A takes checkpoint B's weights the way an RL trainer pushes
new weights between rollouts, then serves exactly what a server started on B serves, through every
later sleep, and A's output again once A is pushed back.

Push (vLLM 0.26.0): POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": B}}
-> v1/worker/gpu_worker.py Worker.reload_weights -> v1/worker/gpu_model_runner.py
GPUModelRunner.reload_weights (MRV2's runner calls the same method), which sets model_config.model to
the path and loads the files in place through the model's load_weights (layerwise reload copies into
the existing, CuMem-pooled parameters). It is sent inside a sleep, as trainers do: sleep, wake weights,
reload, wake kv_cache (the documented level-2 recovery). The oracle is B's own golden (token ids and
per-token logprobs) from a fresh server of this cell on B: a cached Bazel action takes it once per
cell and vLLM build (tests/sleep_wake/goldens, SLEEPWAKE_GOLDEN_B); the two checkpoints' goldens must
differ, or a push that did nothing would pass.

The push is the contract's axis (lib/pushes.py): every test runs once per way an RL trainer moves weights,
from disk (above), as tensors into the model's load_weights in the engine's process (TRL colocate), as
CUDA-IPC handles from a trainer process (verl, NeMo-RL, OpenRLHF) and through vLLM's own weight-transfer
API, with the same oracles. Only a disk push moves the model path; after any other, reload_weights
without a path loads what the server started on (vLLM's docstring: "the path of the original model"),
the revert TRL met when its trainer recovered a level-2 sleep that way.
"""

import os

import pytest

from tests.core import expect, goldens, oracle, pushes, servers, thresholds
from tests.core.prompts import CHECKPOINT_GOLDEN_PROMPTS, LONG_PROMPTS
from tools.launcher.config import resolve_model

ISSUE = "weight sync"
SYNC_PROMPTS = CHECKPOINT_GOLDEN_PROMPTS
CYCLES = 3
PUSH_WAYS = pushes.WAYS
NATIVE_OFF = (
    "vLLM's weight-transfer API needs the server started with its IPC backend (SLEEPWAKE_WEIGHT_TRANSFER=ipc or "
    "auto, tools/matrix.bzl CLASS_SERVER_SETTINGS), whose module imports ray "
    "(vllm/distributed/weight_transfer/ipc_engine.py), which vLLM does not require; this cell's server has none: "
)


@pytest.fixture(scope="class")
def checkpoint_b() -> str:
    value = os.environ.get("SLEEPWAKE_MODEL_B", "")
    if not value:
        pytest.fail(
            "SLEEPWAKE_MODEL_B is unset: the matrix sets it to checkpoint B's config.json "
            "(tools/defs.bzl gpu_cell_env); outside Bazel export it yourself"
        )
    return resolve_model(value)  # absolute: the engine resolves weights_path in its own cwd


@pytest.fixture(scope="class")
def golden_b(cell, checkpoint_b) -> dict:
    """Checkpoint B's golden on this cell and vLLM build, from the file the golden action wrote."""
    path = os.environ.get("SLEEPWAKE_GOLDEN_B", "")
    if not path:
        pytest.fail(
            "SLEEPWAKE_GOLDEN_B is unset: the matrix sets it to checkpoint B's golden on this cell "
            "(tools/defs.bzl); outside Bazel write one with python -m "
            "tests.sleep_wake.goldens.take_golden and export its path"
        )
    return goldens.read(
        path,
        runner=cell.runner,
        mode=cell.mode,
        identity=servers.identity(),
        checkpoint=goldens.checkpoint_name(checkpoint_b),
        prompts=SYNC_PROMPTS,
    )


@pytest.fixture(scope="class")
def checkpoint_a(server, checkpoint_b) -> str:
    path = resolve_model(server.config.model)
    if path == checkpoint_b:
        pytest.fail(
            f"the cell serves {path}, which is checkpoint B itself: SLEEPWAKE_MODEL (or "
            "VLLM_TEST_MODEL) and SLEEPWAKE_MODEL_B must name different checkpoints"
        )
    return path


@pytest.fixture(scope="class")
def golden_a(client, golden) -> dict:
    return {**golden, **expect.take_golden(client, LONG_PROMPTS)}


@pytest.fixture(scope="class")
def trainer(client):
    """The RL trainer beside the server, holding the checkpoints' tensors for the pushes that cross processes."""
    trainer = servers.trainer_class()(client)
    yield trainer
    trainer.close()


@pytest.fixture(params=PUSH_WAYS)
def push(request, cell, trainer) -> pushes.Push:
    if request.param == pushes.NATIVE and cell.config.weight_transfer == "none":
        pytest.skip(NATIVE_OFF + cell.native_off)
    return pushes.way(request.param, cell.door, trainer)


@pytest.fixture(autouse=True)
def back_on_checkpoint_a(client, checkpoint_a):
    """A test that fails with B loaded must not hand B to the next one: A is reloaded after each test
    (awake first: a reload into a sleeping pool writes unmapped memory)."""
    yield
    if client.health():
        if client.is_sleeping():
            client.wake_everything()
        client.reload_weights(checkpoint_a)
        client.reset_prefix_cache()


def _expect_goldens_differ(golden_a: dict, golden_b: dict) -> None:
    same = [p for p in SYNC_PROMPTS if golden_a[p].token_ids == golden_b[p].token_ids]
    if same:
        raise oracle.Precondition(
            f"checkpoints A and B give the same greedy tokens for {same}, so a push that changed nothing "
            "would pass; B must be the generator with another seed (//tools/checkpoints:synthetic_qwen3_b)"
        )


def _push(client, level: int, path: str, what: str, push: pushes.Push) -> None:
    """The trainer's step: sleep, wake the weights, push `path` into them, wake the KV cache."""
    client.sleep(level=level)
    expect.asleep(client, level, step=f"sleep level {level} to push {what}", issue=ISSUE)
    client.wake_up(["weights"])
    push.push(client, path)
    client.wake_up(["kv_cache"])
    expect.awake(
        client,
        step=f"pushing {what} (sleep level {level}, wake weights, {push.name} push, wake kv_cache)",
        issue=ISSUE,
    )


def _sleep_and_wake(client, level: int, step: str) -> None:
    client.sleep(level=level)
    expect.asleep(client, level, step=f"{step}: sleep level {level}", issue=ISSUE)
    client.wake_up()
    expect.awake(client, step=f"{step}: full wake", issue=ISSUE)


def _expect(
    client, recorder, cell, golden: dict, step: str, oracle_id: str = "weights.pushed_checkpoint_golden"
) -> None:
    """The checkpoint whose golden this is serves it: token ids and per-token logprobs."""
    expect.golden_with_logprobs(
        client, recorder, golden, SYNC_PROMPTS, cell.id, step=step, issue=ISSUE, oracle_id=oracle_id
    )


def _push_b(client, recorder, cell, golden_a, golden_b, checkpoint_b, level: int, push: pushes.Push) -> None:
    _expect_goldens_differ(golden_a, golden_b)
    _push(client, level, checkpoint_b, "checkpoint B", push)
    _expect(client, recorder, cell, golden_b, f"pushing checkpoint B ({push.name}) during a level-{level} sleep")


def _push_a_back(client, recorder, cell, golden_a, checkpoint_a, level: int, after: str, push: pushes.Push) -> None:
    """Switching back restores the first golden."""
    _push(client, level, checkpoint_a, "checkpoint A back", push)
    _expect(client, recorder, cell, golden_a, f"pushing checkpoint A back ({push.name}) after {after}")


class TestWeightSync:
    def test_pushed_weights_survive_level1_sleep(
        self, client, golden_a, golden_b, checkpoint_a, checkpoint_b, recorder, cell, push
    ):
        _push_b(client, recorder, cell, golden_a, golden_b, checkpoint_b, level=1, push=push)
        _sleep_and_wake(client, 1, "checkpoint B")
        _expect(client, recorder, cell, golden_b, "checkpoint B, then a level-1 sleep and full wake")
        _push_a_back(client, recorder, cell, golden_a, checkpoint_a, 1, "a level-1 sleep", push)

    def test_pushed_weights_survive_cycles(
        self, client, golden_a, golden_b, checkpoint_a, checkpoint_b, recorder, cell, push
    ):
        _push_b(client, recorder, cell, golden_a, golden_b, checkpoint_b, level=2, push=push)
        for cycle in range(1, CYCLES + 1):
            _sleep_and_wake(client, 1, f"checkpoint B, cycle {cycle}")
            _expect(client, recorder, cell, golden_b, f"checkpoint B, then level-1 cycle {cycle}")
        _push_a_back(client, recorder, cell, golden_a, checkpoint_a, 2, f"{CYCLES} cycles", push)

    def test_pushed_weights_survive_staged_wake(
        self, client, golden_a, golden_b, checkpoint_a, checkpoint_b, recorder, cell, push
    ):
        _push_b(client, recorder, cell, golden_a, golden_b, checkpoint_b, level=1, push=push)
        client.sleep(level=1)
        expect.asleep(client, 1, step="checkpoint B: sleep level 1", issue=ISSUE)
        client.wake_up(["weights"])
        expect.partially_asleep(client, step="checkpoint B: wake weights", issue=ISSUE)
        client.wake_up(["kv_cache"])
        expect.awake(client, step="checkpoint B: wake kv_cache", issue=ISSUE)
        _expect(client, recorder, cell, golden_b, "checkpoint B, then a staged wake (weights, kv_cache)")
        _push_a_back(client, recorder, cell, golden_a, checkpoint_a, 1, "a staged wake", push)

    def test_pushed_weights_survive_level2_reload(
        self, client, golden_a, golden_b, checkpoint_a, checkpoint_b, recorder, cell, push
    ):
        _push_b(client, recorder, cell, golden_a, golden_b, checkpoint_b, level=2, push=push)
        _push(client, 2, checkpoint_b, "checkpoint B again", push)
        _expect(client, recorder, cell, golden_b, f"checkpoint B, then a level-2 sleep and a {push.name} push of B")
        client.sleep(level=2)
        expect.asleep(client, 2, step="checkpoint B: sleep level 2", issue=ISSUE)
        client.recover_from_level2()
        expect.awake(client, step="checkpoint B: level 2, plain recovery", issue=ISSUE)
        if push.name == pushes.DISK:
            # A disk push moved the model path, so the plain recovery reloads the pushed checkpoint: pinned.
            pin = thresholds.divergence("reload_without_path_loads_last_pushed", client.version())
            want, why = pin.expected, pin.describe()
        else:
            # Tensors never move the model path: reload_weights reloads the checkpoint the server started on.
            want, why = "checkpoint A", "the model path a tensor push leaves"
        _expect(
            client,
            recorder,
            cell,
            {"checkpoint B": golden_b, "checkpoint A": golden_a}[want],
            f"checkpoint B by {push.name}, then level 2 and reload_weights without a path ({want}'s golden, {why})",
            oracle_id="weights.served_after_plain_reload",
        )
        _push_a_back(client, recorder, cell, golden_a, checkpoint_a, 2, "the level-2 reloads", push)
