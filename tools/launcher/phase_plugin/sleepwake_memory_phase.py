"""A start's memory phases, taken from inside the server: a vLLM general plugin that brackets each step
in which the GPU worker allocates device memory with the GPU's ALLOCATE phase (gpu_lease.memory_phase).

Why: a start that held the ALLOCATE phase from launch to /health (6-30 s under load) kept every
neighbour's sleep waiting for all of it, though the memory moves only inside the worker's start-up
steps (vllm/v1/worker/gpu_worker.py Worker, the same five in 0.24.0, 0.25.0 and 0.26.0): the CUDA context
and model runner (init_device), the weights (load_model), the profile run (determine_available_memory),
the KV cache (initialize_from_config) and the graphs and warm-up (compile_or_warm_up_model). Between
steps the phase is free, so a waiting sleep goes in between instead of after the whole start.

vLLM loads every `vllm.general_plugins` entry point in each of its processes; this one acts only where
the launcher set SLEEPWAKE_MEMORY_LOCK (a shared lease), and patches Worker when its module is
imported, so the API server process, which never imports it, pays nothing. After each step, still
inside the phase, it writes a MARK line to stderr (the server log) with the step, the seconds it waited
and held, and the bytes NVML lists for this process: the launcher checks at /health that no memory
moved after the last step (VllmServer._check_bracketed_start).

Where the launcher also set SLEEPWAKE_MEMORY_PHASE_CALLS (memory_phase_scope calls), it brackets the
worker's sleep (FREE), wake_up and reload_weights (ALLOCATE) too, so a sleep or wake holds its phase
only while the worker maps or unmaps, not across the client's round trip and the engine's pause (a
mode-wait sleep drains its requests first). Inside a client's EXCLUSIVE window that covers this process
(gpu_lease.exclusive_covering) such a call goes ahead without a phase: the window already excludes
every neighbour, and waiting would wait for it.
"""

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

ENV_LOCK = "SLEEPWAKE_MEMORY_LOCK"
ENV_TIMEOUT = "SLEEPWAKE_MEMORY_LOCK_TIMEOUT_S"
ENV_CALLS = "SLEEPWAKE_MEMORY_PHASE_CALLS"
MARK = "sleepwake-memory-phase "
TARGET = "vllm.v1.worker.gpu_worker"
STEPS = ("init_device", "load_model", "determine_available_memory", "initialize_from_config",
         "compile_or_warm_up_model")
# Worker methods that map or unmap a pool after the start, and the phase each holds (gpu_lease kinds).
CALLS = {"sleep": "free", "wake_up": "allocate", "reload_weights": "allocate"}
_WRAPPED = "__sleepwake_memory_phase__"


# The checkout (or runfiles tree) this file is in: the lock protocol is tools/launcher/gpu_lease.py's, and a
# server started outside Bazel may not have the checkout on its path.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _launcher_on_path() -> None:
    try:
        import tools.launcher  # noqa: F401
    except ImportError:
        sys.path.append(_ROOT)  # appended: nothing the server already imports is shadowed


def _process_bytes() -> int | None:
    try:
        from tools.launcher.nvml import Nvml
        return Nvml().process_bytes([os.getpid()])
    except Exception as e:  # no NVML where the step ran: the launcher's check reports the missing figure
        print("%s nvml unavailable: %s" % (MARK.strip(), e), file=sys.stderr, flush=True)
        return None


def bracket(owner, lock_path: str, timeout_s: float, process_bytes=_process_bytes) -> None:
    """Wraps owner's STEPS (methods present on it) so that each runs inside the ALLOCATE phase."""
    _launcher_on_path()
    from tools.launcher import gpu_lease

    for step in STEPS:
        original = getattr(owner, step, None)
        if original is None or getattr(original, _WRAPPED, False):
            continue

        def method(self, *args, _step=step, _original=original, **kwargs):
            with gpu_lease.memory_phase_at(lock_path, gpu_lease.ALLOCATE, timeout_s,
                                          what="start:" + _step) as waited:
                begin = time.monotonic()
                result = _original(self, *args, **kwargs)
                held = time.monotonic() - begin
                used = process_bytes()
            print(MARK + json.dumps({"step": _step, "waited_s": round(waited, 4), "held_s": round(held, 4),
                                     "pid": os.getpid(), "process_bytes": used}), file=sys.stderr, flush=True)
            return result
        setattr(method, _WRAPPED, True)
        method.__name__ = step
        setattr(owner, step, method)


def bracket_calls(owner, lock_path: str, timeout_s: float) -> None:
    """Wraps owner's CALLS (methods present on it) so that each runs inside its memory phase, or none
    where a client's EXCLUSIVE window covers this process."""
    _launcher_on_path()
    from tools.launcher import gpu_lease

    for name, kind in CALLS.items():
        original = getattr(owner, name, None)
        if original is None or getattr(original, _WRAPPED, False):
            continue

        def method(self, *args, _name=name, _kind=kind, _original=original, **kwargs):
            covered = gpu_lease.covered_by_exclusive(lock_path, os.getpid())
            with contextlib.nullcontext() if covered else gpu_lease.memory_phase_at(
                    lock_path, _kind, timeout_s, what=_name + "@worker"):
                return _original(self, *args, **kwargs)
        setattr(method, _WRAPPED, True)
        method.__name__ = name
        setattr(owner, name, method)


def _patch(worker_class, lock_path: str, timeout_s: float, calls: bool) -> None:
    bracket(worker_class, lock_path, timeout_s)
    if calls:
        bracket_calls(worker_class, lock_path, timeout_s)


def read_steps(log_text: str) -> list[dict]:
    """The MARK records of a server log, in order. vLLM prefixes what its engine-core process writes
    ("(EngineCore_DP0 pid=123) "), so a record may start anywhere in its line."""
    records = []
    for line in log_text.splitlines():
        at = line.find(MARK + "{")
        if at >= 0:
            records.append(json.loads(line[at + len(MARK):]))
    return records


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches the worker module's Worker right after the module executes, in whichever process."""

    def __init__(self, lock_path: str, timeout_s: float, module: str = TARGET, calls: bool = False):
        self.lock_path, self.timeout_s, self.module, self.calls = lock_path, timeout_s, module, calls

    def find_spec(self, name, path, target=None):
        if name != self.module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _patch(module.Worker, self.lock_path, self.timeout_s, self.calls)
        spec.loader.exec_module = exec_module
        return spec


def register() -> None:
    """The vllm.general_plugins entry point."""
    lock_path = os.environ.get(ENV_LOCK)
    if not lock_path:
        return
    timeout_s = float(os.environ.get(ENV_TIMEOUT, "600"))
    calls = os.environ.get(ENV_CALLS) == "1"
    if TARGET in sys.modules:
        _patch(sys.modules[TARGET].Worker, lock_path, timeout_s, calls)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(lock_path, timeout_s, calls=calls))
