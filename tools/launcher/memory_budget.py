"""What a server's memory phases declare under memory_phase_rule bytes (memory_claims.admits): each
allocation step's, wake's and reload's bytes, what a client moves beside the server's own calls (a push of
tensors, an RL trainer's checkpoints), and the allowance of a sleep from fully awake.

The sizes come from the server's configuration: the checkpoint's tensor bytes (its safetensors
headers), --kv-cache-memory-bytes, step_overhead_bytes, the most a step maps outside those two pools
(the CUDA context, the profile run's activations, CUDA graphs), and load_overhead_bytes, the most a step or
call that only fills a pool maps beside it; a sleep's allowance is memory_phase_margin x sleep_frees_bytes.
The suite sets those from its data (tests/core/memory_budget.py); unset (0), a step is undeclared and a
sleep allows nothing: the old rule.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import struct

from tools.launcher.memory_claims import BYTES

# vLLM 0.26.0's start steps (phase_plugin/sleepwake_memory_phase.py STEPS) and the pools each maps.
_STEP_POOLS = {
    "init_device": (),
    "load_model": ("weights",),
    "determine_available_memory": (),
    "initialize_from_config": ("kv_cache",),
    "compile_or_warm_up_model": (),
}
# The steps that map more than a pool: the CUDA context, the profile run's activations. Every other step
# and call only fills its pool (or captures CUDA graphs into memory the profile run reserved), so it
# declares load_overhead_bytes beside it where that is known.
_CONTEXT_STEPS = ("init_device", "determine_available_memory")
# What a client holds an ALLOCATE phase for beside the server's bracketed calls (tests/core/client.py,
# pushes.py, trainer.py), each loading one checkpoint's tensors onto the GPU (a push; a trainer taking a
# checkpoint to push); a trainer's first phase creates its process's CUDA context (TRAINER_CONTEXT).
CHECKPOINT_LOADS = ("rpc load_checkpoint_tensors", "load_weights", "trainer")
TRAINER_CONTEXT = "trainer:context"


@dataclasses.dataclass(frozen=True)
class Budget:
    rule: str
    declared: dict  # `what` of a phase (start:<step>, wake, reload) -> bytes it may map; absent: undeclared
    sleep_allowance: int  # bytes of allocations a sleep from fully awake lets overlap it

    def of(self, what: str) -> int | None:
        return self.declared.get(what)

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> Budget:
        return cls(**json.loads(text))


def weights_bytes(model_dir: str) -> int:
    """The tensor bytes of the checkpoint's *.safetensors files, from their headers (an 8-byte length, then
    JSON whose entries give each tensor's data_offsets); 0 where there are none (a hub name)."""
    total = 0
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, tensor in header.items():
            if name != "__metadata__":
                start, end = tensor["data_offsets"]
                total += end - start
    return total


def pools_of(config, model_dir: str) -> dict[str, int]:
    """The bytes of the pools a server of config serving model_dir maps (the ones its sleeps unmap)."""
    return {"weights": weights_bytes(model_dir), "kv_cache": config.kv_cache_bytes}


def beyond_pools(steps: list[dict], pools: dict[str, int]) -> dict[str, int]:
    """Each start step's device bytes beyond the pools it fills: the worker's NVML bytes after it (the
    memory-phase plugin's records, in order: phase_plugin.read_steps) less those after the step before (none
    before the first: the CUDA context is init_device's), less its pools. A step without a figure is left out,
    and so is the one after it."""
    beyond = {}
    before: int | None = 0
    for step in steps:
        after = step.get("process_bytes")
        if after is not None and before is not None:
            beyond[step["step"]] = after - before - sum(pools[p] for p in _fills("start:" + step["step"]))
        before = after
    return beyond


def declared_beside_pools(budget: Budget, what: str, pools: dict[str, int]) -> int | None:
    """What a phase declares beside the pools it fills (a start step's, a reload's weights), to hold its
    measured bytes beyond them to (beyond_pools, a reload's reserved growth); None where it declares nothing
    or the rule is not bytes."""
    declared = budget.of(what)
    if declared is None or budget.rule != BYTES:
        return None
    return declared - sum(pools[p] for p in _fills(what))


def _fills(what: str) -> tuple[str, ...]:
    if what.startswith("start:"):
        return _STEP_POOLS.get(what.removeprefix("start:"), ())
    if what == "wake":
        return ("weights", "kv_cache")
    return ("weights",) if what == "reload" or what in CHECKPOINT_LOADS else ()


def of_pools(config, pools: dict[str, int]) -> Budget:
    """The budget of a server of config (tools/launcher/config.py ServerConfig) whose pools are pools_of's:
    what each phase declares is the pools it fills (_fills) and what it maps beside them."""
    declared = {}
    if config.step_overhead_bytes > 0 and pools["weights"] > 0:
        overhead = config.step_overhead_bytes
        load = config.load_overhead_bytes or overhead
        beside = {"start:" + step: overhead if step in _CONTEXT_STEPS else load for step in _STEP_POOLS}
        # A wake maps back the pools a sleep unmapped; a reload loads new weights through torch's allocator;
        # a push or a trainer's hold loads a checkpoint of the served one's architecture (the same bytes).
        beside.update({"wake": 0, "reload": load, TRAINER_CONTEXT: overhead})
        beside.update({what: load for what in CHECKPOINT_LOADS})
        declared = {what: bytes_ + sum(pools[p] for p in _fills(what)) for what, bytes_ in beside.items()}
    allowance = int(config.memory_phase_margin * config.sleep_frees_bytes)
    return Budget(config.memory_phase_rule, declared, allowance)
