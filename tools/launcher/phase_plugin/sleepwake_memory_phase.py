"""A server's memory phases, taken from inside it: a vLLM general plugin that brackets each step in which
the GPU worker moves device memory with the GPU's memory phase (gpu_lease.memory_phase): its start-up
steps and, once it runs, its sleep (FREE), wake and weight reload (ALLOCATE).

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
and held, the bytes NVML lists for this process and the calls it brackets: the launcher checks at /health
that no memory moved after the last step and that every call is bracketed (VllmServer._check_bracketed_start).

"""

import contextlib
import json
import os
import sys
import threading
import time

if __package__:  # imported by the launcher, as tools.launcher.phase_plugin.*
    from .sleepwake_on_import import patch_when_imported
else:  # loaded by vLLM from its entry point, this folder on the server's PYTHONPATH
    # (the type check reads the package's copy above; this name resolves only on the server's path)
    from sleepwake_on_import import patch_when_imported  # type: ignore[import-not-found,no-redef]

ENV_LOCK = "SLEEPWAKE_MEMORY_LOCK"
ENV_TIMEOUT = "SLEEPWAKE_MEMORY_LOCK_TIMEOUT_S"
ENV_COVER = "SLEEPWAKE_MEMORY_COVER"  # the server's cover file (gpu_lease.covered)
ENV_BUDGET = "SLEEPWAKE_MEMORY_BUDGET"  # what each phase declares (memory_budget.Budget.to_env)
# vLLM 0.26.0's check of a sleep (vllm/v1/worker/gpu_worker.py Worker.sleep, line 220): device-wide free
# memory must not shrink across it. A sleep call that fails it is marked with VLLM_ASSERT_KEY.
VLLM_SLEEP_ASSERT = "Memory usage increased after sleeping."
VLLM_ASSERT_KEY = "vllm_assert"
MARK = "sleepwake-memory-phase "
TARGET = "vllm.v1.worker.gpu_worker"
STEPS = (
    "init_device",
    "load_model",
    "determine_available_memory",
    "initialize_from_config",
    "compile_or_warm_up_model",
)
# A running server's calls that move device memory: (the phase's kind, its `what` in the GPU's trace).
# gpu_lease.BRIEF names wake and reload: they may pass a waiting sleep while a start step is inside.
CALLS = {"sleep": ("free", "sleep"), "wake_up": ("allocate", "wake"), "reload_weights": ("allocate", "reload")}
_WRAPPED = "__sleepwake_memory_phase__"
# Our call wrappers, by identity: a mutant that wraps one (functools.wraps copies its attributes) is not
# ours, and the next start step wraps it again, so its own allocations fall inside the phase too.
_OURS: set = set()
_inside = threading.local()  # .held: a call wrapper of ours is running, so a nested one holds its phase


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


def _reserved_bytes() -> int | None:
    """The bytes torch's caching allocator holds mapped in this process (its segments, every pool), where
    torch is imported and has its CUDA context; None elsewhere. A call that leaves it higher mapped new device
    memory that no sleep of this server frees: what a narrower phase for reloads is judged by."""
    torch = sys.modules.get("torch")
    try:
        return int(torch.cuda.memory_reserved()) if torch is not None and torch.cuda.is_initialized() else None
    except Exception:  # a torch without CUDA, or one half torn down: no figure
        return None


def _mark(record: dict) -> None:
    print(MARK + json.dumps(record), file=sys.stderr, flush=True)


def bracket(
    owner,
    lock_path: str,
    timeout_s: float,
    process_bytes=_process_bytes,
    cover_path: str | None = None,
    budget=None,
) -> None:
    """Wraps owner's STEPS (methods present on it) so that each runs inside the ALLOCATE phase, and its
    CALLS so that each runs inside its own (bracket_calls); each step first wraps again a call that a
    plugin loaded later wrapped over ours. budget: what each phase declares (memory_budget.Budget);
    None, nothing, under the kinds rule."""
    _launcher_on_path()
    from tools.launcher import gpu_lease, memory_budget

    budget = budget or memory_budget.Budget("kinds", {}, 0)

    for step in STEPS:
        original = getattr(owner, step, None)
        if original is None or getattr(original, _WRAPPED, False):
            continue

        def method(self, *args, _step=step, _original=original, **kwargs):
            cls = type(self)  # a subclass that overrides a call would bypass the class's wrapper
            bracket_calls(cls, lock_path, timeout_s, cover_path, budget)
            what = "start:" + _step
            phase = gpu_lease.memory_phase_at(
                lock_path, gpu_lease.ALLOCATE, timeout_s, what=what, declared=budget.of(what), rule=budget.rule
            )
            with phase as waited:
                begin = time.monotonic()
                result = _original(self, *args, **kwargs)
                held = time.monotonic() - begin
                used = process_bytes()
            _mark(
                {
                    "step": _step,
                    "waited_s": round(waited, 4),
                    "held_s": round(held, 4),
                    "pid": os.getpid(),
                    "process_bytes": used,
                    "calls": sorted(n for n in CALLS if getattr(cls, n, None) in _OURS),
                }
            )
            return result

        setattr(method, _WRAPPED, True)
        method.__name__ = step
        setattr(owner, step, method)
    bracket_calls(owner, lock_path, timeout_s, cover_path, budget)


# The pools a worker maps (CuMemAllocator's tags): a sleep frees sleep_frees_bytes only from all of them.
_POOLS = frozenset({"weights", "kv_cache"})
_ASLEEP = "__sleepwake_asleep__"  # on the worker: the pools its last sleep unmapped and no wake mapped back


def _declared(self, what: str, budget) -> int | None:
    """What the call's phase declares: a sleep its allowance while the worker is fully awake, else
    nothing (a sleep of a sleeping or half-woken worker frees less than its figure); a wake or reload its size."""
    if what == "sleep":
        return budget.sleep_allowance if not getattr(self, _ASLEEP, frozenset()) else 0
    return budget.of(what)


def _track_pools(self, what: str, args, kwargs, ok: bool) -> None:
    if what == "sleep":
        setattr(self, _ASLEEP, _POOLS)  # a failed sleep may have unmapped some: assume all
    elif what == "wake" and ok:
        tags = kwargs.get("tags", args[0] if args else None)
        setattr(self, _ASLEEP, frozenset() if tags is None else getattr(self, _ASLEEP, frozenset()) - set(tags))


def bracket_calls(owner, lock_path: str, timeout_s: float, cover_path: str | None = None, budget=None) -> None:
    """Makes our wrapper the outermost of each of owner's CALLS: the call runs inside its phase unless the
    server's client covers it (gpu_lease.covered), and logs a MARK record {"call", "waited_s", "held_s",
    "covered", "reserved_delta" (_reserved_bytes after less before; None unknown)}, with VLLM_ASSERT_KEY
    where vLLM's sleep check failed, from which the launcher counts the waits and the asserts
    (VllmServer.timings)."""
    from tools.launcher import gpu_lease, memory_budget

    budget = budget or memory_budget.Budget("kinds", {}, 0)

    for name, (kind, what) in CALLS.items():
        original = getattr(owner, name, None)
        if original is None or original in _OURS:
            continue

        def call(self, *args, _original=original, _kind=kind, _what=what, **kwargs):
            if getattr(_inside, "held", False):  # a wrapper of ours outside this one holds the phase
                return _original(self, *args, **kwargs)
            covered = gpu_lease.covered(cover_path, _kind) if cover_path else False
            declared = _declared(self, _what, budget)
            phase = (
                contextlib.nullcontext(0.0)
                if covered
                else gpu_lease.memory_phase_at(
                    lock_path, _kind, timeout_s, what=_what, declared=declared, rule=budget.rule
                )
            )
            tripped = None
            with phase as waited:
                _inside.held = True
                reserved = _reserved_bytes()
                begin = time.monotonic()
                ok = False
                try:
                    result = _original(self, *args, **kwargs)
                    ok = True
                except AssertionError as e:
                    tripped = str(e) if VLLM_SLEEP_ASSERT in str(e) else None
                    raise
                finally:
                    _inside.held = False
                    _track_pools(self, _what, args, kwargs, ok)
                    held = time.monotonic() - begin
                    after = _reserved_bytes()
                    record = {
                        "call": _what,
                        "waited_s": round(waited, 4),
                        "held_s": round(held, 4),
                        "covered": covered,
                        "declared": declared,
                        "pid": os.getpid(),
                        "reserved_delta": None if reserved is None or after is None else after - reserved,
                    }
                    if tripped is not None:
                        record[VLLM_ASSERT_KEY] = tripped
                    if ok or tripped is not None:
                        _mark(record)
            return result

        call.__name__ = name
        _OURS.add(call)
        setattr(owner, name, call)


def _records(log_text: str) -> list[dict]:
    """The MARK records of a server log, in order. vLLM prefixes what its engine-core process writes
    ("(EngineCore_DP0 pid=123) "), so a record may start anywhere in its line."""
    records = []
    for line in log_text.splitlines():
        at = line.find(MARK + "{")
        if at >= 0:
            records.append(json.loads(line[at + len(MARK) :]))
    return records


def read_steps(log_text: str) -> list[dict]:
    """The start steps' records of a server log, in order."""
    return [r for r in _records(log_text) if "step" in r]


def read_calls(log_text: str) -> list[dict]:
    """The bracketed calls' records (sleep, wake, reload) of a server log, in order."""
    return [r for r in _records(log_text) if "call" in r]


def register() -> None:
    """The vllm.general_plugins entry point."""
    lock_path = os.environ.get(ENV_LOCK)
    if not lock_path:
        return
    timeout_s = float(os.environ.get(ENV_TIMEOUT, "600"))
    cover_path = os.environ.get(ENV_COVER) or None
    budget_text = os.environ.get(ENV_BUDGET)

    def patch(module) -> None:
        _launcher_on_path()
        from tools.launcher import memory_budget

        budget = memory_budget.Budget.from_env(budget_text) if budget_text else None
        bracket(module.Worker, lock_path, timeout_s, cover_path=cover_path, budget=budget)

    patch_when_imported(TARGET, patch, key=__name__)
