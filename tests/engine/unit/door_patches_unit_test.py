"""The door mutants' patches (the plugin's doors.py) against the installed vLLM, on the CPU: each one applies
(its owner has every attribute it patches, and they change), and its defect shows on the path the door host
drives (tools/launcher/door_host.py LlmDoor -> vllm.LLM -> LLMEngine) around a recording engine-core client,
or, for the llm_colocate door's mutants, around the in-process engine TRL builds (InprocClient -> EngineCore,
whose scheduler and executor record); on the path vLLM's server drives (AsyncLLM's sleep, wake_up,
is_sleeping, collective_rpc, as its routes await them) none of them is reached, as their HTTP twins expect on
the GPU. Nothing here builds an engine: the objects are made without their constructors, so the real methods
of vLLM's classes run and nothing else."""

import asyncio
import importlib

import pytest
import sleepwake_mutants
from sleepwake_mutants import shared

from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: its platform stays the CPU's)
from tools.launcher import door_host

DOOR_MUTANTS = sorted(n for n, m in sleepwake_mutants.MUTANTS.items() if m.door != sleepwake_mutants.HTTP)
PATCHED = (
    "vllm.v1.engine.llm_engine:LLMEngine",
    "vllm.entrypoints.llm:LLM",
    "vllm.v1.engine.async_llm:AsyncLLM",
    "vllm.v1.engine.core_client:InprocClient",
    "vllm.v1.engine.core:EngineCore",
)


def _classes():
    out = []
    for spec in PATCHED:
        module, name = spec.split(":")
        out.append(getattr(importlib.import_module(module), name))
    return out


@pytest.fixture
def restored(monkeypatch):
    """The classes a door patch may touch, each attribute put back after the test (a patch sets them on the
    class itself); yields {class: its attributes before}."""
    monkeypatch.setitem(shared._state, "fd", None)
    before = {cls: dict(vars(cls)) for cls in _classes()}
    yield before
    for cls, attrs in before.items():
        for name in set(vars(cls)) - set(attrs):
            delattr(cls, name)
        for name, value in attrs.items():
            if vars(cls).get(name) is not value:
                setattr(cls, name, value)


class Core:
    """What LLMEngine calls of its engine-core client (SyncMPClient in the door host), recorded: the engine
    core is asleep from a sleep until a wake without tags or of both tags."""

    def __init__(self):
        self.calls = []
        self.asleep = set()

    def sleep(self, level=1, mode="abort"):
        self.calls.append(("sleep", level, mode))
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))
        self.asleep -= set(tags or ("weights", "kv_cache"))

    def is_sleeping(self):
        self.calls.append(("is_sleeping",))
        return bool(self.asleep)

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.calls.append(("collective_rpc", method, kwargs))
        return [None]


class AsyncCore(Core):
    """The same, as AsyncLLM awaits it (AsyncMPClient's *_async methods)."""

    async def sleep_async(self, level=1, mode="abort"):
        self.sleep(level, mode)

    async def wake_up_async(self, tags=None):
        self.wake_up(tags)

    async def is_sleeping_async(self):
        return self.is_sleeping()

    async def collective_rpc_async(self, method, timeout=None, args=(), kwargs=None):
        return self.collective_rpc(method, timeout, args, kwargs)


class Loggers:
    """LLMEngine's stat logger manager: the sleep states it was told (vllm:engine_sleep_state)."""

    def __init__(self):
        self.states = []

    def record_sleep_state(self, sleep, level):
        self.states.append((sleep, level))


class Renderer:
    def clear_mm_cache(self):
        pass

    async def clear_mm_cache_async(self):
        pass


def _door():
    """The door host's LlmDoor around a vllm.LLM whose LLMEngine talks to a recording Core."""
    from vllm import LLM
    from vllm.v1.engine.llm_engine import LLMEngine

    engine = object.__new__(LLMEngine)
    engine.engine_core, engine.logger_manager, engine.renderer = Core(), Loggers(), Renderer()
    llm = object.__new__(LLM)
    llm.llm_engine = engine
    return door_host.LlmDoor(llm), engine


class Recording:
    """The scheduler or executor of an in-process EngineCore: every method call recorded as (name, *args)."""

    def __init__(self, calls: list):
        self._calls = calls

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self._calls.append((name, *args, *kwargs.values()))
            return name != "has_unfinished_requests"

        return call


def _colocated_door():
    """The door host's LlmDoor around a vllm.LLM as TRL colocates it: LLMEngine -> InprocClient -> EngineCore,
    whose scheduler and executor record into the engine's `calls`."""
    from vllm import LLM
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.engine.core_client import InprocClient
    from vllm.v1.engine.llm_engine import LLMEngine

    core = object.__new__(EngineCore)
    core.calls = []
    core.scheduler, core.model_executor, core.mm_receiver_cache = Recording(core.calls), Recording(core.calls), None
    client = object.__new__(InprocClient)
    client.engine_core = core
    engine = object.__new__(LLMEngine)
    engine.engine_core, engine.logger_manager, engine.renderer = client, Loggers(), Renderer()
    llm = object.__new__(LLM)
    llm.llm_engine = engine
    return door_host.LlmDoor(llm, door_host.COLOCATE), core


def _drive(door, *calls):
    """The door's calls in order (as its HTTP endpoints make them), on one event loop; their results."""

    async def run():
        return [await getattr(door, name)(*args) for name, *args in calls]

    try:
        return asyncio.run(run())
    finally:
        door.shutdown()


# Per door mutant: (the door host's calls, what the engine core and gauge saw or the door answered, healthy,
# mutated). A door mutant without an entry fails test_every_door_mutant_is_checked_here.
def _wake_up_tags(door, engine):
    _drive(door, ("sleep", 1, "abort"), ("wake_up", ["weights"]))
    return engine.engine_core.calls[-1]


def _sleep_level(door, engine):
    _drive(door, ("sleep", 2, "abort"))
    return engine.engine_core.calls[-1], engine.logger_manager.states[-1]


def _is_sleeping_after_partial_wake(door, engine):
    *_, answer = _drive(door, ("sleep", 1, "abort"), ("wake_up", ["weights"]), ("is_sleeping",))
    return answer, ("is_sleeping",) in engine.engine_core.calls


def _rpc_kwargs(door, engine):
    _drive(door, ("collective_rpc", "reload_weights", None, (), {"weights_path": "/ckpt/b"}))
    return engine.engine_core.calls[-1]


def _gauge_at_sleep(door, engine):
    _drive(door, ("sleep", 1, "abort"))
    return engine.engine_core.calls[-1], engine.logger_manager.states, engine.logger_manager is not None


def _wait_sleep(door, core):
    try:
        _drive(door, ("sleep", 1, "wait"))
    except ValueError:
        return "refused", core.calls
    return "accepted", [c for c in core.calls if c[0] == "sleep"]


def _cache_reset_at_sleep(door, core):
    _drive(door, ("sleep", 1, "abort"))
    return [c for c in core.calls if c[0] in ("reset_prefix_cache", "sleep")]


BEHAVIOUR = {
    "llm_wake_up_drops_tags": (_wake_up_tags, ("wake_up", ["weights"]), ("wake_up", None)),
    "llm_sleep_ignores_level": (_sleep_level, (("sleep", 2, "abort"), (1, 2)), (("sleep", 1, "abort"), (1, 1))),
    "llm_is_sleeping_stale": (_is_sleeping_after_partial_wake, (True, True), (False, False)),
    "llm_collective_rpc_drops_kwargs": (
        _rpc_kwargs,
        ("collective_rpc", "reload_weights", {"weights_path": "/ckpt/b"}),
        ("collective_rpc", "reload_weights", None),
    ),
    "llm_sleep_skips_gauge": (
        _gauge_at_sleep,
        (("sleep", 1, "abort"), [(1, 1)], True),
        (("sleep", 1, "abort"), [], True),
    ),
    "inproc_sleep_accepts_wait": (_wait_sleep, ("refused", []), ("accepted", [("sleep", 1)])),
    "inproc_sleep_keeps_prefix_cache": (
        _cache_reset_at_sleep,
        [("reset_prefix_cache", True, True), ("sleep", 1)],
        [("sleep", 1)],
    ),
}
DOORS = {m: _colocated_door if sleepwake_mutants.MUTANTS[m].door == door_host.COLOCATE else _door for m in BEHAVIOUR}


def test_there_are_door_mutants():
    assert len(DOOR_MUTANTS) >= 5, DOOR_MUTANTS


def test_every_door_mutant_is_checked_here():
    assert sorted(BEHAVIOUR) == DOOR_MUTANTS, "give each door mutant its check in BEHAVIOUR"


@pytest.mark.parametrize("name", DOOR_MUTANTS)
def test_the_patch_applies_to_attributes_vllm_has(name, restored):
    sleepwake_mutants.MUTANTS[name].apply()
    changed = {
        f"{cls.__name__}.{attr}"
        for cls, before in restored.items()
        for attr in set(vars(cls)) | set(before)
        if vars(cls).get(attr) is not before.get(attr)
    }
    added = {f"{cls.__name__}.{attr}" for cls, before in restored.items() for attr in set(vars(cls)) - set(before)}
    assert changed, f"{name}: applying it changed no attribute of {[c.__name__ for c in restored]}"
    assert not added, f"{name}: the patch set {sorted(added)}, which vLLM's classes do not have: a name it never calls"


@pytest.mark.parametrize("name", DOOR_MUTANTS)
def test_the_defect_shows_through_the_door_hosts_llm_door(name, restored, capsys):
    check, healthy, mutated = BEHAVIOUR[name]
    assert check(*DOORS[name]()) == healthy, f"{name}: the unpatched door does not behave as the check expects"
    sleepwake_mutants.MUTANTS[name].apply()
    capsys.readouterr()
    assert check(*DOORS[name]()) == mutated, f"{name}: applied, the door does not show the catalogued defect"
    reached = sleepwake_mutants.REACHED.format(name=name, pid="")
    assert reached.split(" (pid")[0] in capsys.readouterr().err, f"{name}: reached, but printed no REACHED line"


@pytest.mark.parametrize("name", DOOR_MUTANTS)
def test_vllms_server_front_end_never_reaches_it(name, restored, capsys):
    """vLLM's routes await AsyncLLM's methods, which never call LLMEngine: an HTTP cell applies these
    mutants and never reaches them (their twins' verdict, verdict.decide_off_door)."""
    from vllm.v1.engine.async_llm import AsyncLLM

    sleepwake_mutants.MUTANTS[name].apply()
    capsys.readouterr()
    engine = object.__new__(AsyncLLM)
    engine.engine_core, engine.logger_manager, engine.renderer = AsyncCore(), Loggers(), Renderer()
    engine.shutdown = lambda timeout=None: None  # its __del__ would stop an engine process there is none of

    async def routes():
        await engine.sleep(2, "abort")
        await engine.wake_up(["weights"])
        assert await engine.is_sleeping()
        await engine.wake_up(None)
        await engine.collective_rpc("reload_weights", None, (), {"weights_path": "/ckpt/b"})

    asyncio.run(routes())
    assert engine.engine_core.calls == [
        ("sleep", 2, "abort"),
        ("wake_up", ["weights"]),
        ("is_sleeping",),
        ("wake_up", None),
        ("collective_rpc", "reload_weights", {"weights_path": "/ckpt/b"}),
    ]
    assert engine.logger_manager.states == [(1, 2), (0, 0), (0, 0)]
    assert "sleepwake-mutant reached" not in capsys.readouterr().err


def test_only_the_in_process_engine_runs_engine_cores_own_pause():
    """inproc_sleep_keeps_prefix_cache patches EngineCore.pause_scheduler: the engine-core process every other
    door and vLLM's server run (EngineCoreProc, and DPEngineCoreProc under it) has a pause of its own."""
    from vllm.v1.engine.core import EngineCoreProc

    assert "pause_scheduler" in vars(EngineCoreProc)
