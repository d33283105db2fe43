"""Steps the in-process EngineCore and collects what each step finished."""

from __future__ import annotations

from tests.engine.lib import cpu_vllm  # noqa: F401  (before vLLM: pins the platform)
from tests.engine.fakes.timeline import Timeline
from tests.core import oracle
from vllm.v1.engine import EngineCoreOutput
from vllm.v1.engine.core import EngineCore

MAX_STEPS = 50  # the tests' requests need a handful


def step(engine: EngineCore) -> dict[str, EngineCoreOutput]:
    """One EngineCore.step; the outputs of the requests it finished, by request id."""
    outputs, _ = engine.step()
    return {o.request_id: o for eco in outputs.values() for o in eco.outputs if o.finish_reason is not None}


def steps(engine: EngineCore, count: int) -> dict[str, EngineCoreOutput]:
    """`count` steps: enough for the scheduler to schedule anything it is allowed to schedule."""
    finished = {}
    for _ in range(count):
        finished.update(step(engine))
    return finished


def run_until_finished(engine: EngineCore, request_ids: list[str], timeline: Timeline) -> dict[str, EngineCoreOutput]:
    """Steps until every request finished; the oracle requests.completes fails when one has not after
    MAX_STEPS (the in-process engine steps only when told: no hang of the host shows here)."""
    finished = {}
    for _ in range(MAX_STEPS):
        finished.update(step(engine))
        if set(request_ids) <= set(finished):
            return finished
    oracle.fail(
        "requests.completes",
        f"requests {sorted(request_ids)}; timeline: {timeline}",
        f"{sorted(set(request_ids) - set(finished))} unfinished",
        f"{MAX_STEPS} steps",
        "all finished within",
    )
    return finished  # inside oracle.together(), which collects the failure instead of raising it
