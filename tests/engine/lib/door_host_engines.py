"""The door host's engine factory on the engine tier (--engine_factory tests.engine.lib.door_host_engines:build).

tools/launcher/door_host.py builds vllm.LLM or AsyncLLM from the server's flags; on the CPU the engine
tier's builders make the same objects around the fake worker instead (engines.build_llm, build_async_llm).
Both doors get the ChildWorker, whose sleepwake_report a test reads through POST /collective_rpc, the only
way into the door host's process; stats logging follows --disable-log-stats, as the server's does, so the
sleep gauge exists unless it is off.
"""

from __future__ import annotations

import argparse

from tests.engine.lib import cpu_vllm  # before vLLM: pins the platform
from tests.engine.fakes.child_worker import ChildWorker
from tests.engine.lib import engines


def build(door: str, server_argv: list[str]):
    """The door's engine from the two server flags the engine tier's builders take (the rest are the GPU's)."""
    cpu_vllm.expect_release()  # this door host's own vLLM, which a zygote may have imported for it
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model", required=True)
    parser.add_argument("--disable-log-stats", action="store_true")
    args, _ = parser.parse_known_args(server_argv)
    log_stats = not args.disable_log_stats
    # The engine tier's vllm.LLM keeps its engine core in its caller's process (engines.build_llm), as the
    # colocated door does; on the GPU the llm door keeps vLLM's default, a process of its own.
    if door in ("llm", "llm_colocate"):
        llm, _ = engines.build_llm(
            args.model, log_stats=log_stats, worker_cls=f"{ChildWorker.__module__}.{ChildWorker.__qualname__}"
        )
        return llm
    return engines.build_async_llm(args.model, log_stats=log_stats)
