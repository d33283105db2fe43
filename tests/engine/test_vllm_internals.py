"""Pins the vLLM internals the engine tier builds on, so that a vLLM upgrade that moves one says which.

The tier drives private parts of vLLM 0.26.0 (EngineCoreProc built without its ZMQ handshake, its
busy-loop steps, the executor's and wrapper's attributes). Each check below fails with the name that
moved and the file of this tier to update, instead of an AttributeError deep inside a test. None is a
verdict on sleep mode: a moved internal is set-up the tier can no longer reach (oracle.Precondition).
"""

import importlib.metadata
import importlib.util
import inspect
import os
import re

import pytest

from tests.engine.lib import cpu_vllm  # noqa: F401  (first: the platform plugin, then vLLM)
import vllm.platforms
from sleepwake_engine_platform import UNSPECIFIED
from tests.engine.fakes.worker import FakeWorker
from tests.engine.lib import engines
from tests.core import oracle
from tools.launcher.phase_plugin import sleepwake_cpu_use as cpu_use_plugin
from tools.launcher.phase_plugin import sleepwake_memory_phase as phase_plugin
from vllm.platforms.interface import UnspecifiedPlatform
from vllm.v1.engine import EngineCoreRequestType
from vllm.v1.engine.core import EngineCore, EngineCoreProc, EngineShutdownState
from vllm.v1.executor.abstract import Executor
from vllm.v1.executor.uniproc_executor import UniProcExecutor
from vllm.v1.worker.worker_base import WorkerWrapperBase

# (owner, name, the tier's file that uses it)
NAMES = [
    (EngineCoreProc, "_process_input_queue", "lib/loop.py"),
    (EngineCoreProc, "_process_engine_step", "lib/loop.py"),
    (EngineCoreProc, "run_busy_loop", "lib/loop.py"),
    (EngineCoreProc, "_handle_client_request", "lib/engine_client.py"),
    (EngineCoreProc, "ENGINE_CORE_DEAD", "lib/loop.py, lib/engine_client.py"),
    (EngineCoreProc, "pause_scheduler", "mutants/catalogue.py"),
    (EngineCoreProc, "_send_abort_outputs", "mutants/catalogue.py"),
    (EngineCore, "step", "lib/steps.py"),
    (EngineCore, "preprocess_add_request", "lib/engine_requests.py"),
    (EngineCore, "resume_scheduler", "test_bookkeeping.py"),
    (EngineCore, "is_scheduler_paused", "test_*.py"),
    (EngineShutdownState, "REQUESTED", "lib/loop.py"),
    (EngineCoreRequestType, "UTILITY", "lib/engine_client.py"),
    (EngineCoreRequestType, "ADD", "lib/engine_requests.py"),
    (EngineCoreRequestType, "WAKEUP", "lib/loop.py"),
    (EngineCoreRequestType, "EXECUTOR_FAILED", "lib/engines.py"),
]


def _source(obj) -> str:
    return inspect.getsource(obj)


def _pinned(ok: bool, message: str) -> None:
    """The tier's premise holds, else the test fails saying what moved and what to update."""
    if not ok:
        raise oracle.Precondition(message)


@pytest.mark.parametrize("owner,name,user", NAMES, ids=[f"{o.__name__}.{n}" for o, n, _ in NAMES])
def test_internal_name_exists(owner, name, user):
    _pinned(
        hasattr(owner, name),
        f"vLLM no longer has {owner.__module__}.{owner.__name__}.{name}; update "
        f"tests/engine/{user} to what replaced it",
    )


def test_engine_core_proc_sets_the_attributes_the_builder_sets():
    body = _source(EngineCoreProc.__init__)
    sets = set(re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=(?!=)", body))
    _pinned(
        sets == set(engines.PROC_ATTRIBUTES),
        f"EngineCoreProc.__init__ now sets {sorted(sets - set(engines.PROC_ATTRIBUTES))} and no "
        f"longer sets {sorted(set(engines.PROC_ATTRIBUTES) - sets)}: update build_engine_core_proc and "
        "PROC_ATTRIBUTES in tests/engine/lib/engines.py",
    )
    _pinned(
        "super().__init__(" in body,
        "EngineCoreProc.__init__ no longer delegates to EngineCore.__init__; build_engine_core_proc "
        "in tests/engine/lib/engines.py calls EngineCore.__init__ in its place and must follow",
    )


def test_busy_loop_body_is_what_iterate_runs():
    body = _source(EngineCoreProc.run_busy_loop)
    calls = re.findall(r"self\.(\w+)\(\)", body)
    _pinned(
        calls == ["_handle_shutdown", "_process_input_queue", "_process_engine_step"],
        f"EngineCoreProc.run_busy_loop now calls {calls}; update iterate() in tests/engine/lib/loop.py",
    )


def test_utility_requests_have_the_shape_the_client_sends():
    body = _source(EngineCoreProc._handle_client_request)
    _pinned(
        "client_idx, call_id, method_name, args = request" in body,
        "EngineCoreProc._handle_client_request unpacks UTILITY requests differently; update "
        "QueueEngineClient._submit in tests/engine/lib/engine_client.py",
    )


def test_engine_core_init_takes_what_the_builder_passes():
    params = list(inspect.signature(EngineCore.__init__).parameters)
    _pinned(
        params[:5] == ["self", "vllm_config", "executor_class", "log_stats", "executor_fail_callback"],
        f"EngineCore.__init__ is now {params}; update tests/engine/lib/engines.py",
    )


def test_executor_bookkeeping_and_worker_reach():
    init = _source(Executor.__init__)
    for name in ("is_sleeping", "sleeping_tags"):
        _pinned(
            f"self.{name}" in init,
            f"Executor no longer keeps self.{name}; the tests and the "
            "no_double_sleep_guard mutant (tests/engine/mutants/catalogue.py) read it",
        )
    _pinned(
        "self.driver_worker = WorkerWrapperBase(" in _source(UniProcExecutor._init_executor),
        "UniProcExecutor no longer holds its worker as driver_worker; update _attach in tests/engine/lib/engines.py",
    )
    _pinned(
        "self.worker = worker_class(" in _source(WorkerWrapperBase.init_worker),
        "WorkerWrapperBase no longer holds the worker as .worker; update _attach in tests/engine/lib/engines.py",
    )


def _gpu_worker_methods() -> set[str]:
    """The names vllm/v1/worker/gpu_worker.py's Worker defines: read, not imported (gpu_worker imports
    CUDA-only modules)."""
    spec = importlib.util.find_spec("vllm.v1.worker.gpu_worker")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("vllm.v1.worker.gpu_worker is not in this vLLM: its Worker moved; update this test")
    with open(spec.origin, encoding="utf-8") as f:
        return set(re.findall(r"^    def (\w+)\(", f.read(), re.MULTILINE))


def test_fake_worker_answers_the_real_workers_method_names():
    real = _gpu_worker_methods()
    fake = {name for name, value in vars(FakeWorker).items() if callable(value) and not name.startswith("_")}
    _pinned(
        fake <= real,
        f"FakeWorker answers {sorted(fake - real)}, which vllm/v1/worker/gpu_worker.py's Worker no "
        "longer defines: vLLM's executor now calls other names; update tests/engine/fakes/worker.py",
    )


def test_the_memory_phase_plugin_finds_every_worker_method_it_brackets():
    # tools/launcher/phase_plugin brackets these Worker methods on a shared GPU; the launcher fails a
    # start that logs fewer, so a renamed step or call shows here first, on the CPU.
    real = _gpu_worker_methods()
    bracketed = set(phase_plugin.STEPS) | set(phase_plugin.CALLS)
    _pinned(
        bracketed <= real,
        f"vllm/v1/worker/gpu_worker.py's Worker no longer defines {sorted(bracketed - real)}:"
        " update STEPS or CALLS in tools/launcher/phase_plugin/sleepwake_memory_phase.py",
    )
    # The CPU-use plugin sets the CUDA context's scheduling flag in the same module's first step.
    _pinned(
        cpu_use_plugin.TARGET == phase_plugin.TARGET and "init_device" in real,
        f"the CPU-use plugin targets {cpu_use_plugin.TARGET}, the phase plugin {phase_plugin.TARGET}, and "
        "Worker.init_device must exist: update tools/launcher/phase_plugin/sleepwake_cpu_use.py",
    )
    plugins = {
        "sleepwake_memory_phase": "sleepwake_memory_phase:register",
        "sleepwake_cpu_use": "sleepwake_cpu_use:register",
    }
    for name in plugins:
        _pinned(
            not importlib.metadata.entry_points(group="vllm.general_plugins", name=name),
            f"the plugin {name} is found without its dir on the path: every vLLM here would load it",
        )
    dist = importlib.metadata.distributions(path=[os.path.dirname(phase_plugin.__file__)])
    found = {ep.name: ep.value for d in dist for ep in d.entry_points if ep.group == "vllm.general_plugins"}
    _pinned(
        found == plugins,
        f"the phase plugin's dir declares the entry points {found}, not {plugins}: update "
        "its dist-info in tools/launcher/phase_plugin",
    )


def test_the_platform_plugin_outranks_a_detected_gpu(monkeypatch):
    # What `import vllm` does on a GPU runner, where the builtin CUDA check activates: the single
    # out-of-tree platform plugin (tests/engine/platform_plugin) still decides.
    monkeypatch.setitem(vllm.platforms.builtin_platform_plugins, "cuda", lambda: "vllm.platforms.cuda.CudaPlatform")
    _pinned(
        vllm.platforms.resolve_current_platform_cls_qualname() == UNSPECIFIED,
        "vLLM no longer lets one out-of-tree platform plugin win over a detected GPU; update "
        "tests/engine/lib/cpu_vllm.py so the engine tier stays on the CPU under --config=gpu",
    )


def test_the_tier_ran_on_the_cpu():
    # Last in the run (the last file, the last test): by now every engine of the run has been built,
    # stepped, put to sleep and woken. On a GPU runner this shows the tier never made a CUDA context.
    import torch

    _pinned(
        isinstance(vllm.platforms.current_platform, UnspecifiedPlatform),
        f"vLLM runs on {type(vllm.platforms.current_platform).__name__}; see tests/engine/lib/cpu_vllm.py",
    )
    _pinned(
        not torch.cuda.is_initialized(),
        "something in the engine tier initialised CUDA: see tests/engine/lib/cpu_vllm.py",
    )
