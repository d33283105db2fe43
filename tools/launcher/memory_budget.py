"""What a server's memory phases declare under memory_phase_rule bytes (memory_claims.admits): each
allocation step's, wake's and reload's bytes, and the allowance of a sleep from fully awake.

The sizes come from the server's configuration: the checkpoint's tensor bytes (its safetensors
headers), --kv-cache-memory-bytes, and step_overhead_bytes, the most any step maps outside those two
pools (the CUDA context, the profile run's activations, CUDA graphs); a sleep's allowance is
memory_phase_margin x sleep_frees_bytes. The suite sets those three from its data
(tests/core/memory_budget.py); unset (0), a step is undeclared and a sleep allows nothing: the old rule.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import struct

# vLLM 0.26.0's start steps (phase_plugin/sleepwake_memory_phase.py STEPS) and the pools each maps
# besides what any step may map outside them (step_overhead_bytes).
_STEP_POOLS = {
    "init_device": (),
    "load_model": ("weights",),
    "determine_available_memory": (),
    "initialize_from_config": ("kv_cache",),
    "compile_or_warm_up_model": (),
}


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


def of_config(config, model_dir: str) -> Budget:
    """The budget of a server of config (tools/launcher/config.py ServerConfig) serving model_dir."""
    pools = {"weights": weights_bytes(model_dir), "kv_cache": config.kv_cache_bytes}
    declared = {}
    if config.step_overhead_bytes > 0 and pools["weights"] > 0:
        overhead = config.step_overhead_bytes
        for step, used in _STEP_POOLS.items():
            declared["start:" + step] = overhead + sum(pools[p] for p in used)
        # A wake maps back the pools a sleep unmapped; a reload loads new weights through torch's allocator.
        declared["wake"] = pools["weights"] + pools["kv_cache"]
        declared["reload"] = pools["weights"] + overhead
    allowance = int(config.memory_phase_margin * config.sleep_frees_bytes)
    return Budget(config.memory_phase_rule, declared, allowance)
