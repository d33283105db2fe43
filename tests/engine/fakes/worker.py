"""FakeWorker: the GPU worker behind vLLM's real UniProcExecutor, with the GPU memory as two flags.

vLLM's executor reaches its workers only through `collective_rpc` (method names on the worker). This
class answers every method the engine core, the executor and the sleep lifecycle call, by name, like
vllm/v1/worker/gpu_worker.py's Worker does, and models what the CuMemAllocator does to the two tagged
pools ("weights", "kv_cache") instead of touching a device:

- sleep(level) releases both pools (level 1 backs the weights up first, level 2 discards them);
  sleeping again while a pool is released raises, as unmapping released memory does on CUDA;
- wake_up(tags) maps the named pools back (None: all; a tag it does not hold is ignored, as in
  CuMemAllocator.wake_up); mapping a pool that is already resident raises;
- a forward pass (a step with scheduled tokens) while a pool is released is recorded, then raises
  ReleasedMemoryAccess: on a GPU it is the illegal memory access of vLLM #44395 (fixed by #44483) and
  #45520;
- model_runner.model.load_weights(weights), the model an RL trainer's push reaches through a worker
  extension (worker.model_runner.model.load_weights, as every framework writes it), records each tensor's
  name and a digest of its bytes in `pushed` and raises ReleasedMemoryAccess while the weights pool is
  released (on a GPU the copy writes unmapped memory). ExtensionWorker is the class vLLM mixes a worker
  extension into (WorkerWrapperBase.init_worker appends worker_extension_cls to the worker class's bases,
  for the whole process): a class of its own keeps FakeWorker as every other test builds it.

Everything that crossed the boundary is appended to `timeline` (fakes/timeline.py), which the engine
builder points at the test's Timeline. Unused worker methods keep WorkerBase's NotImplementedError.
"""

from __future__ import annotations

import hashlib

import torch

from tests.engine.fakes.timeline import Timeline
from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: pins the platform)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput
from vllm.v1.worker.worker_base import CompilationTimes, WorkerBase

TAGS = ("weights", "kv_cache")  # CuMemAllocator's pools, the tags /wake_up accepts
SAMPLED_TOKEN = 17  # every step samples this token: the tests follow requests, not text
BLOCK_SIZE = 16
NUM_BLOCKS = 64  # KV blocks the fake reports memory for: room for the tests' few short requests


class ReleasedMemoryAccess(RuntimeError):
    """A forward pass (or a second unmap) touched memory that sleep had released."""


class FakeWorker(WorkerBase):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.timeline = Timeline()  # replaced by the engine builder with the test's own
        self.resident = {tag: False for tag in TAGS}
        self.weights_intact = False  # False after a level-2 sleep until reload_weights
        self.fail_next_sleep: str | None = None  # set by a test: the next sleep raises this text
        self.pushed: dict[str, str] = {}  # tensor name -> digest of what load_weights received last
        self.model_runner = FakeModelRunner(FakeModel(self))
        self._layers = [
            f"model.layers.{i}.self_attn.attn" for i in range(self.model_config.get_num_layers(self.parallel_config))
        ]

    # --- start-up, in the order EngineCore and UniProcExecutor call it ----------------------------
    def init_device(self) -> None:
        self.device = torch.device("cpu")

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        self.resident["weights"] = True
        self.weights_intact = True

    def get_kv_cache_spec(self) -> dict[str, KVCacheSpec]:
        spec = FullAttentionSpec(
            block_size=BLOCK_SIZE,
            num_kv_heads=self.model_config.get_num_kv_heads(self.parallel_config),
            head_size=self.model_config.get_head_size(),
            dtype=self.model_config.dtype,
        )
        return {name: spec for name in self._layers}

    def determine_available_memory(self) -> int:
        spec = next(iter(self.get_kv_cache_spec().values()))
        return NUM_BLOCKS * spec.page_size_bytes * len(self._layers)

    def initialize_from_config(self, kv_cache_config: KVCacheConfig) -> None:
        self.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
        self.resident["kv_cache"] = True

    def compile_or_warm_up_model(self) -> CompilationTimes:
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    # --- the forward pass ----------------------------------------------------------------------
    def execute_model(self, scheduler_output) -> ModelRunnerOutput:
        # As GPUModelRunner.execute_model: a step with no scheduled tokens returns before any kernel
        # runs (it only carries finished/aborted ids), so it touches no pool.
        if not scheduler_output.total_num_scheduled_tokens:
            return EMPTY_MODEL_RUNNER_OUTPUT
        req_ids = list(scheduler_output.num_scheduled_tokens)
        released = [tag for tag in TAGS if not self.resident[tag]]
        # Recorded before the raise: the pass ran (on a GPU its kernels are what crash), so a test that
        # asks whether a request was scheduled sees it rather than only the engine's death.
        self.timeline.add("forward", *req_ids)
        if released:
            raise ReleasedMemoryAccess(
                f"forward pass of requests {req_ids} scheduled while {' and '.join(released)} "
                "released: on a GPU an illegal memory access (vLLM #44395/#44483, #45520)"
            )
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[[SAMPLED_TOKEN] for _ in req_ids],
        )

    def sample_tokens(self, grammar_output) -> ModelRunnerOutput:
        raise NotImplementedError(
            "FakeWorker.execute_model returns its output; sample_tokens is "
            "only called after an execute_model that returned None"
        )

    def take_draft_token_ids(self):
        return None  # no speculative decoding

    # --- sleep mode ----------------------------------------------------------------------------
    def sleep(self, level: int = 1) -> None:
        released = [tag for tag in TAGS if not self.resident[tag]]
        if released:
            raise ReleasedMemoryAccess(
                f"sleep(level={level}) of {' and '.join(released)} that an earlier sleep already "
                "released: on a GPU, unmapping released memory is a CUDA error (the executor's "
                "double-sleep guard, vllm/v1/executor/abstract.py, exists to prevent it)"
            )
        self.timeline.add("sleep", level)
        # gpu_worker.Worker.sleep releases first and checks the device's free memory after, so a
        # failed check leaves the memory released.
        self.resident = {tag: False for tag in TAGS}
        if level >= 2:
            self.weights_intact = False
        if self.fail_next_sleep:
            message, self.fail_next_sleep = self.fail_next_sleep, None
            raise AssertionError(message)

    def wake_up(self, tags: list[str] | None = None) -> None:
        wanted = [tag for tag in TAGS if tags is None or tag in tags]
        mapped = [tag for tag in wanted if self.resident[tag]]
        if mapped:
            raise ReleasedMemoryAccess(
                f"wake_up({tags}) maps {' and '.join(mapped)} that is already resident: on a GPU, "
                "create_and_map of mapped memory is a CUDA error"
            )
        self.timeline.add("wake_up", *(tags if tags is not None else ["<all>"]))
        for tag in wanted:
            self.resident[tag] = True

    def reload_weights(self, *args, **kwargs) -> None:
        if not self.resident["weights"]:
            raise ReleasedMemoryAccess(
                "reload_weights while the weights pool is released; wake tags=weights first (the level-2 recipe)"
            )
        self.timeline.add("reload_weights")
        self.weights_intact = True

    def _load_weights(self, weights) -> set[str]:
        if not self.resident["weights"]:
            raise ReleasedMemoryAccess(
                "load_weights into the weights pool while it is released: on a GPU the copy writes unmapped "
                "memory; wake tags=weights first (every framework's recipe)"
            )
        names = set()
        for name, tensor in weights:
            self.pushed[name] = tensor_digest(tensor)
            names.add(name)
        self.timeline.add("load_weights", len(names))
        self.weights_intact = True
        return names

    # --- cache resets the engine core sends on sleep (EngineCore._reset_caches) -----------------
    def reset_mm_cache(self) -> None:
        return None  # no multimodal inputs

    def reset_encoder_cache(self) -> None:
        return None  # no encoder

    def shutdown(self) -> None:
        self.resident = {tag: False for tag in TAGS}


def tensor_digest(tensor: torch.Tensor) -> str:
    """A digest of a tensor's bytes, whatever its dtype."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()


class FakeModel(torch.nn.Module):
    """The served model as a push reaches it: load_weights(weights) returns the names it loaded, as
    vLLM's models do (AutoWeightsLoader), and records them in the worker. A module with no parameters,
    since vLLM walks the driver's model as one (LLMEngine._cleanup_instance_caches)."""

    def __init__(self, worker: FakeWorker) -> None:
        super().__init__()
        self._worker = worker

    def load_weights(self, weights) -> set[str]:
        return self._worker._load_weights(weights)


class FakeModelRunner:
    def __init__(self, model: FakeModel) -> None:
        self.model = model


class ExtensionWorker(FakeWorker):
    """The fake worker a worker extension is mixed into (engines.build_llm worker_extension_cls)."""
