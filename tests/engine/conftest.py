"""Fixtures of the engine tier: vLLM's real engine core around a fake worker, on the CPU.

SLEEPWAKE_ENGINE_MUTANT (mutants/catalogue.py) applies one re-introduced bug before the tests run.
vLLM is imported by the fixtures, not here: the unit tests below this directory (unit/) share this
conftest and need no vLLM. A failing oracle becomes JUnit properties as in the GPU tier (the hook
below), which mutants/judge.py reads.
"""

import os
import sys

import pytest

import sleepwake_mutants
from sleepwake_mutants import shared
from tests.engine.mutants import catalogue
from tests.core.oracle import pytest_runtest_makereport  # noqa: F401  oracle ids -> JUnit properties


def pytest_configure(config):
    if os.environ.get("SLEEPWAKE_EXPECT_VLLM"):  # a per-release target: the vLLM it imports is that release
        from tests.engine.lib import cpu_vllm

        cpu_vllm.expect_release()
    name = os.environ.get(catalogue.ENV, "none") or "none"
    # The patches' REACHED line goes to the stderr of now: pytest captures a test's own, and drops it
    # when the test passes.
    shared.announce_on(os.dup(sys.stderr.fileno()))
    catalogue.apply(name)
    line = (
        sleepwake_mutants.NO_MUTANT.format(pid=os.getpid())
        if name == "none"
        else sleepwake_mutants.ACTIVATION.format(name=name, pid=os.getpid())
    )
    print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def engines():
    from tests.engine.lib import engines

    return engines


@pytest.fixture(scope="session")
def model_dir(engines, tmp_path_factory):
    return engines.write_model_dir(str(tmp_path_factory.mktemp("tiny_qwen3")))


@pytest.fixture
def core(engines, model_dir):
    """The in-process EngineCore (pause modes abort and keep), stepped by the test."""
    built = engines.build_engine_core(model_dir)
    yield built
    built.shutdown()


@pytest.fixture
def llm_door(engines, model_dir):
    """vllm.LLM with its engine core in this process (engines.build_llm): (llm, Built of its core)."""
    llm, built = engines.build_llm(model_dir)
    yield llm, built
    built.shutdown()


@pytest.fixture
def async_llm_door(model_dir):
    """vLLM's AsyncLLM with a forked EngineCoreProc (engines.build_async_llm) on a loop of its own
    (lib/async_llm_loop.py); the engine process is ended whatever the test did."""
    from tests.engine.lib.async_llm_loop import AsyncLlmLoop

    door = AsyncLlmLoop(model_dir)
    try:
        yield door
    finally:
        door.shutdown()


@pytest.fixture
def proc(engines, model_dir):
    """EngineCoreProc, its busy loop iterated by the test (lib/loop.py) without blocking."""
    built = engines.build_engine_core_proc(model_dir)
    built.engine.process_input_queue_block = False
    yield built
    built.shutdown()
