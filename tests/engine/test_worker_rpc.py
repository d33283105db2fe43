"""What RL frameworks call on vLLM's workers through collective_rpc, past the engine's sleep API, on the
in-process door (vllm.LLM: LLM.collective_rpc -> InprocClient -> EngineCore.collective_rpc ->
UniProcExecutor.collective_rpc -> WorkerWrapperBase -> the worker), around the fake worker:

- a tensor push: the suite's worker extension (tools/launcher/weight_receiver.py, the class every server
  loads with --worker-extension-cls), mixed into the worker class by vLLM's WorkerWrapperBase as on a GPU,
  hands a checkpoint's tensors made in the engine's process to the model's load_weights (TRL colocate);
- the workers' own sleep and wake (collective_rpc("sleep" | "wake_up"), verl before #6456): the pools
  unmapped and mapped back with the executor's bookkeeping, the scheduler pause and the prefix-cache reset
  all skipped (v1/worker/gpu_worker.py Worker.sleep / wake_up, v1/executor/abstract.py).

The fake worker cannot rebuild CUDA-IPC handles, so the IPC way (load_ipc_tensors) stays the GPU's.
"""

import hashlib
import json
import os
import struct
from unittest import mock

import pytest
import torch

from tests.engine.fakes.worker import TAGS, ExtensionWorker, ReleasedMemoryAccess
from tests.engine.lib import checks
from tests.core import oracle
from tools.checkpoints import make_synthetic_model
from tools.launcher import weight_receiver
from vllm import SamplingParams

PROMPT = {"prompt_token_ids": [1, 2, 3, 4]}
TOKENS = 4
EXTENSION = f"{weight_receiver.WeightReceiver.__module__}.{weight_receiver.WeightReceiver.__qualname__}"


@pytest.fixture
def push_door(engines, model_dir):
    """vllm.LLM whose worker class has the suite's worker extension mixed in by vLLM: (llm, Built)."""
    llm, built = engines.build_llm(
        model_dir,
        worker_cls=f"{ExtensionWorker.__module__}.{ExtensionWorker.__qualname__}",
        worker_extension_cls=EXTENSION,
    )
    yield llm, built
    built.shutdown()


@pytest.fixture(scope="module")
def checkpoint_b(tmp_path_factory) -> str:
    """A second checkpoint of the engine's tiny model (seed 1): the weights a trainer pushes."""
    path = str(tmp_path_factory.mktemp("tiny_qwen3_b"))
    make_synthetic_model.write_checkpoint(path, make_synthetic_model.TINY, seed=1)
    return path


def _file_tensors(checkpoint: str) -> dict[str, str]:
    """Tensor name -> sha256 of its bytes, read from the safetensors file's own header and offsets: the
    expectation from the file, not from any loader the push runs through."""
    with open(os.path.join(checkpoint, "model.safetensors"), "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    header.pop("__metadata__", None)
    return {name: hashlib.sha256(data[slice(*entry["data_offsets"])]).hexdigest() for name, entry in header.items()}


def _push(llm, checkpoint: str):
    """collective_rpc("load_checkpoint_tensors"), TRL's push: the extension's device synchronize and
    cache release stand still on a host without an accelerator (torch would look for CUDA there)."""
    with (
        mock.patch.object(torch.accelerator, "synchronize", lambda *a, **k: None),
        mock.patch.object(torch.accelerator, "empty_cache", lambda *a, **k: None),
    ):
        return llm.collective_rpc("load_checkpoint_tensors", kwargs={"checkpoint": checkpoint})


def _generate(llm, what: str) -> None:
    [out] = checks.answers(
        what, llm.generate, [PROMPT], SamplingParams(max_tokens=TOKENS, ignore_eos=True), use_tqdm=False
    )
    oracle.equal(
        "output.finish_length",
        (out.outputs[0].finish_reason, len(out.outputs[0].token_ids)),
        ("length", TOKENS),
        f"{what}: (finish reason, tokens)",
    )


def _pushed(built, checkpoint: str, results, where: str) -> None:
    """What reached the model: every tensor of the checkpoint, byte for byte, one count per worker."""
    expected = _file_tensors(checkpoint)
    oracle.equal(
        "weights.pushed_checkpoint_golden",
        {"results": results, "tensors": built.worker.pushed},
        {"results": [len(expected)], "tensors": expected},
        f"{where}: the rpc's results and the tensors the model's load_weights received (name -> sha256)",
    )


def test_tensor_push_reaches_the_model_through_the_worker_extension(push_door, checkpoint_b):
    llm, built = push_door
    results = checks.answers("collective_rpc('load_checkpoint_tensors')", _push, llm, checkpoint_b)
    _pushed(built, checkpoint_b, results, "a push while awake")
    checks.worker_calls(built.timeline, "reload_weights", [], "a tensor push (not a reload from disk)")
    _generate(llm, "a request after the push")


def test_tensor_push_between_the_staged_wakes_of_a_level2_sleep(push_door, checkpoint_b):
    """TRL colocate's sync (trl/generation/vllm_generation.py 444-501 at f2cd577): sleep(level=2),
    wake_up(tags=["weights"]), the push, wake_up(tags=["kv_cache"]), generate."""
    llm, built = push_door
    checks.answers("LLM.sleep(level=2)", llm.sleep, level=2)
    checks.answers("LLM.wake_up(['weights'])", llm.wake_up, ["weights"])
    checks.resident(built.worker, {"kv_cache"}, "after the weights wake", 2)
    results = checks.answers("collective_rpc('load_checkpoint_tensors') between the wakes", _push, llm, checkpoint_b)
    checks.answers("LLM.wake_up(['kv_cache'])", llm.wake_up, ["kv_cache"])
    _pushed(built, checkpoint_b, results, "a push between the weights and the KV-cache wake of a level-2 sleep")
    _generate(llm, "a request after the KV-cache wake")


def _executor(llm, built, where: str) -> None:
    """The engine does not know the workers sleep: the executor's flags and tags, the engine's is_sleeping."""
    executor = built.engine.model_executor
    oracle.equal(
        "flags.is_sleeping",
        {
            "executor": (executor.is_sleeping, set(executor.sleeping_tags)),
            "is_sleeping()": llm.llm_engine.is_sleeping(),
            "scheduler paused": built.engine.is_scheduler_paused(),
        },
        {"executor": (False, set()), "is_sleeping()": False, "scheduler paused": False},
        f"{where}: a sleep at the workers passes the executor's bookkeeping and the scheduler by",
    )


@pytest.mark.parametrize("level", [1, 2])
def test_worker_level_sleep_and_wake_pass_the_executor_by(llm_door, level):
    """verl before #6456 (volcengine/verl b178a3c, vllm_rollout.py 131-143): collective_rpc("sleep",
    level) and collective_rpc("wake_up", tags) at the workers. The executor's guards then see nothing:
    its own wake is a no-op ("Executor is not sleeping.", abstract.py wake_up), and a worker wake of a
    tag already awake reaches the allocator, which maps it again (cumem.py wake_up never reads is_asleep)."""
    llm, built = llm_door
    checks.answers(f"collective_rpc('sleep', level={level})", llm.collective_rpc, "sleep", kwargs={"level": level})
    checks.worker_calls(built.timeline, "sleep", [(level,)], f"collective_rpc('sleep', level={level})")
    _executor(llm, built, f"after collective_rpc('sleep', level={level})")
    checks.resident(built.worker, set(TAGS), f"after collective_rpc('sleep', level={level})", level)
    checks.answers("LLM.wake_up() after a sleep at the workers", llm.wake_up)
    checks.worker_calls(built.timeline, "wake_up", [], "the engine's wake after a sleep at the workers")
    checks.resident(built.worker, set(TAGS), "after the engine's wake (a no-op)", level)
    checks.answers(
        "collective_rpc('wake_up', tags=['weights'])", llm.collective_rpc, "wake_up", kwargs={"tags": ["weights"]}
    )
    checks.resident(built.worker, {"kv_cache"}, "after collective_rpc('wake_up', tags=['weights'])", level)
    checks.raises(
        "executor.worker_calls",
        "a second collective_rpc('wake_up', tags=['weights']): no executor guard keeps it off the allocator",
        ReleasedMemoryAccess,
        "already resident",
        llm.collective_rpc,
        "wake_up",
        None,
        (),
        {"tags": ["weights"]},
    )
    checks.answers(
        "collective_rpc('wake_up', tags=['kv_cache'])", llm.collective_rpc, "wake_up", kwargs={"tags": ["kv_cache"]}
    )
    checks.worker_calls(built.timeline, "wake_up", [("weights",), ("kv_cache",)], "the workers' own wakes")
    _executor(llm, built, "after the workers' own wakes")
    checks.resident(built.worker, set(), "after the workers' own wakes", level)
    oracle.equal(
        "output.golden_tokens",
        built.worker.weights_intact,
        level == 1,
        f"the weights after a level-{level} sleep at the workers and their wakes (level 1 copies them to the "
        "host, level 2 discards them: garbage until a push)",
    )
    _generate(llm, "a request after the workers' own wakes")
