"""Builds vLLM 0.26.0's real EngineCore and EngineCoreProc around the fake worker, on the CPU.

Real: VllmConfig (from a tiny Qwen3 config.json), EngineCore / EngineCoreProc, the Scheduler and KV
cache manager, UniProcExecutor (the executor a single-GPU server uses, with Executor's sleep
bookkeeping) and WorkerWrapperBase. Fake: only the worker class the executor instantiates by name
(ParallelConfig.worker_cls), fakes/worker.py. EngineCoreProc is built without its ZMQ handshake and
socket threads: the test plays the socket threads' part through `input_queue` and `output_queue`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue

from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: pins the platform)
from tests.engine.fakes import child_worker
from tests.engine.fakes.child_worker import ChildWorker
from tests.engine.fakes.output_queue import RecordingOutputQueue
from tests.engine.fakes.timeline import Timeline
from tests.engine.fakes.worker import FakeWorker
from tools.checkpoints import make_synthetic_model
from vllm import envs
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
from vllm.v1.engine import EngineCoreRequestType
from vllm.v1.engine.core import EngineCore, EngineCoreProc, EngineShutdownState
from vllm.v1.executor.uniproc_executor import UniProcExecutor

WORKER_CLS = f"{FakeWorker.__module__}.{FakeWorker.__qualname__}"
MAX_MODEL_LEN = 256

# The attributes EngineCoreProc.__init__ sets before and around EngineCore.__init__, minus the ZMQ
# handshake's. test_vllm_internals.py compares this with vLLM's source so a new one is noticed.
PROC_ATTRIBUTES = (
    "input_queue",
    "output_queue",
    "engine_index",
    "engines_running",
    "shutdown_state",
    "tensor_ipc_receiver",
    "has_coordinator",
    "frontend_stats_publish_address",
    "publish_dp_lb_stats",
    "addresses",
    "process_input_queue_block",
    "output_thread",
)


def write_model_dir(path: str) -> str:
    """The tiny synthetic Qwen3's config files (no weights: the fake worker loads none)."""
    os.makedirs(path, exist_ok=True)
    for name, content in [
        ("config.json", make_synthetic_model.config_json(make_synthetic_model.TINY)),
        ("generation_config.json", make_synthetic_model.generation_config_json()),
    ]:
        with open(os.path.join(path, name), "w", encoding="utf-8") as f:
            json.dump(content, f)
    return path


def vllm_config(model_dir: str, worker_cls: str = WORKER_CLS, worker_extension_cls: str = "") -> VllmConfig:
    return VllmConfig(
        model_config=ModelConfig(
            model=model_dir,
            skip_tokenizer_init=True,
            enforce_eager=True,
            dtype="bfloat16",
            max_model_len=MAX_MODEL_LEN,
            seed=0,
            # enable_sleep_mode only gates vLLM's CuMem allocator, which the fake worker stands in
            # for; the platform check behind it rejects the CPU. EngineCore.sleep does not read it.
            enable_sleep_mode=False,
        ),
        cache_config=CacheConfig(block_size=16, enable_prefix_caching=True),
        # async_scheduling off: the engine steps with EngineCore.step, one forward per step, which
        # is what the tests count. 0.26.0's default turns it on only for executors that support it.
        scheduler_config=SchedulerConfig(
            max_model_len=MAX_MODEL_LEN,
            is_encoder_decoder=False,
            max_num_batched_tokens=MAX_MODEL_LEN,
            max_num_seqs=8,
            async_scheduling=False,
        ),
        device_config=DeviceConfig(device="cpu"),
        parallel_config=ParallelConfig(
            worker_cls=worker_cls, worker_extension_cls=worker_extension_cls, distributed_executor_backend="uni"
        ),
    )


@dataclasses.dataclass
class Built:
    """An engine and the boundary it talks to."""

    engine: EngineCore  # an EngineCoreProc for the queue-driven tests
    worker: FakeWorker
    timeline: Timeline

    def shutdown(self) -> None:
        """EngineCore.shutdown without its last call, cleanup_dist_env_and_memory.

        That call empties the accelerator's cache: on a host without one torch raises, and on a GPU
        runner it would touch CUDA. This engine set up no distributed state for it to undo.
        """
        engine = self.engine
        engine.structured_output_manager.clear_backend()
        engine.model_executor.shutdown()
        engine.scheduler.shutdown()
        # EngineCore.__init__ froze the GC heap (freeze_gc_heap); it stays frozen. Unfreezing it, as
        # EngineCore.shutdown does, makes the next engine's freeze re-scan all of vLLM and torch
        # (its CPU: docs/design.md); what stays frozen instead is this engine's few Python objects.
        envs.disable_envs_cache()  # EngineCore.__init__ cached the environment (enable_envs_cache)


def _attach(engine: EngineCore) -> Built:
    worker = engine.model_executor.driver_worker.worker
    timeline = Timeline()
    worker.timeline = timeline
    return Built(engine, worker, timeline)


def build_engine_core(model_dir: str) -> Built:
    """The in-process engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0): pause modes abort and keep."""
    return _attach(EngineCore(vllm_config(model_dir), UniProcExecutor, log_stats=False))


def build_llm(model_dir: str, log_stats: bool = False, worker_cls: str = WORKER_CLS, worker_extension_cls: str = ""):
    """vLLM's offline front door, `vllm.LLM`, as TRL's colocated trainers hold it: the engine core in
    this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, vLLM's InprocClient) around the fake worker. Real:
    LLM, LLMEngine, its output processor and InprocClient. Only the config is the engine tier's: the
    CPU platform has no device type for EngineArgs to build one from. log_stats: vLLM's stat loggers on
    (the sleep gauge among them; LLM turns them off unless told). worker_extension_cls: the class vLLM's
    WorkerWrapperBase mixes into worker_cls (--worker-extension-cls). Returns (llm, Built of its core)."""
    from unittest import mock

    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    config = vllm_config(model_dir, worker_cls, worker_extension_cls)
    with (
        mock.patch.dict(os.environ, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}),
        mock.patch.object(EngineArgs, "create_engine_config", lambda self, *args, **kwargs: config),
    ):
        llm = LLM(model=model_dir, skip_tokenizer_init=True, worker_cls=worker_cls, disable_log_stats=not log_stats)
    return llm, _attach(llm.llm_engine.engine_core.engine_core)


async def build_async_llm(model_dir: str, log_stats: bool = False):
    """vLLM's `AsyncLLM` as NeMo-RL's and verl's rollout actors hold it: the real AsyncLLM, its
    AsyncMPClient, and an EngineCoreProc in a process of its own, forked (vLLM's default start method
    off Ray; the actors' Ray processes spawn it, which would re-import vLLM for seconds per test), its
    sockets and handshake unchanged, around the fake worker (fakes/child_worker.py: the test reaches it
    only by collective_rpc). Async because AsyncLLM binds its output handler and ZMQ sockets to the
    running loop: the loop that builds it is the one that must drive it. Only the config is the engine
    tier's, as in build_llm. log_stats: vLLM's stat loggers on (the sleep gauge among them). The caller
    shuts it down (AsyncLLM.shutdown ends the engine process)."""
    from unittest import mock

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    config = vllm_config(model_dir, f"{ChildWorker.__module__}.{ChildWorker.__qualname__}")
    init = EngineCoreProc.__init__

    def init_and_hand_over(self, *args, **kwargs):
        # Runs in the forked engine process: the patch is in place when AsyncLLM forks it.
        init(self, *args, **kwargs)
        child_worker.hand_over(self)

    with (
        # Fork, whatever the environment asks: only a forked child inherits the patch below.
        mock.patch.dict(os.environ, {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}),
        mock.patch.object(AsyncEngineArgs, "create_engine_config", lambda self, *args, **kwargs: config),
        mock.patch.object(EngineCoreProc, "__init__", init_and_hand_over),
    ):
        engine_args = AsyncEngineArgs(model=model_dir, skip_tokenizer_init=True, disable_log_stats=not log_stats)
        return AsyncLLM.from_engine_args(engine_args)


def build_engine_core_proc(model_dir: str) -> Built:
    """EngineCoreProc, the engine a server runs (also "wait" mode), with queues instead of sockets.

    EngineCoreProc.__init__ does a ZMQ handshake with a front end and starts socket threads; this
    sets the attributes it would set (PROC_ATTRIBUTES) and runs the rest of its construction,
    EngineCore.__init__, unchanged. The busy loop then reads `input_queue` and writes `output_queue`
    (a RecordingOutputQueue) exactly as with sockets.
    """
    proc = EngineCoreProc.__new__(EngineCoreProc)
    proc.input_queue = queue.Queue()
    proc.engine_index = 0
    proc.engines_running = False
    proc.shutdown_state = EngineShutdownState.RUNNING
    proc.tensor_ipc_receiver = None
    proc.has_coordinator = False  # no data parallelism
    proc.frontend_stats_publish_address = None
    proc.publish_dp_lb_stats = False
    proc.addresses = None  # only the socket threads read it
    proc.process_input_queue_block = True
    proc.output_thread = None  # no socket thread
    proc.output_queue = None  # set below, once the timeline exists
    executor_fail_callback = lambda: proc.input_queue.put_nowait(  # noqa: E731 (as vLLM's)
        (EngineCoreRequestType.EXECUTOR_FAILED, b"")
    )
    EngineCore.__init__(
        proc, vllm_config(model_dir), UniProcExecutor, log_stats=False, executor_fail_callback=executor_fail_callback
    )
    built = _attach(proc)
    proc.output_queue = RecordingOutputQueue(built.timeline)
    return built
