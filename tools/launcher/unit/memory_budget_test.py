"""What a server's phases declare under the rule bytes: the sizes from its configuration
(memory_budget.of_pools over pools_of), and the plugin's claims inside the worker (phase_plugin), where a sleep
declares its allowance only from fully awake and a sleep that vLLM's own check fails is marked."""

import dataclasses
import json
import os
import struct

import pytest

from tools.launcher import gpu_lease, memory_budget, memory_claims
from tools.launcher.config import ServerConfig
from tools.launcher.phase_plugin import sleepwake_memory_phase as plugin

GIB = 1 << 30


def _write_safetensors(path, shapes):
    """A bf16 safetensors file of these tensor shapes; returns its tensor bytes (2 a value)."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))
    return offset


def test_the_declared_sizes_come_from_the_configuration(tmp_path):
    weights = _write_safetensors(tmp_path / "model-1.safetensors", {"a": (64, 32), "b": (7,)})
    weights += _write_safetensors(tmp_path / "model-2.safetensors", {"c": (3, 5)})
    assert weights == 2 * (64 * 32 + 7 + 15)
    config = ServerConfig(
        kv_cache_bytes=2 * GIB,
        memory_phase_rule=memory_claims.BYTES,
        memory_phase_margin=0.5,
        sleep_frees_bytes=3 * GIB,
        step_overhead_bytes=GIB,
    )

    def budget_of(c):
        return memory_budget.of_pools(c, memory_budget.pools_of(c, str(tmp_path)))

    budget = budget_of(config)
    assert budget.rule == memory_claims.BYTES and budget.sleep_allowance == 3 * GIB // 2

    def declared(weights, kv, context, load):
        """What each phase declares: its pools, beside them the context's overhead or the load's."""
        return {
            "start:init_device": context,
            "start:load_model": load + weights,
            "start:determine_available_memory": context,
            "start:initialize_from_config": load + kv,
            "start:compile_or_warm_up_model": load,
            "wake": weights + kv,
            "reload": weights + load,
            "rpc load_checkpoint_tensors": weights + load,
            "load_weights": weights + load,
            "trainer": weights + load,
            "trainer:context": context,
        }

    # Load overhead unknown: every step and load declares the step overhead beside its pool.
    assert budget.declared == declared(weights, 2 * GIB, GIB, GIB)
    assert memory_budget.Budget.from_env(budget.to_env()) == budget
    # Known: only the CUDA context's steps and the trainer's context declare the step overhead.
    narrow = budget_of(dataclasses.replace(config, load_overhead_bytes=64 << 20))
    assert narrow.declared == declared(weights, 2 * GIB, GIB, 64 << 20)
    # Unknown overhead: nothing declared, so every step keeps the kinds rule.
    assert budget_of(dataclasses.replace(config, step_overhead_bytes=0)).declared == {}


def _worker_class(lock_path, seen):
    """A stand-in for vLLM's Worker whose calls write down the claims live on the GPU's ledger."""

    def look(self, what):
        fd = os.open(lock_path, os.O_RDWR)
        try:
            with memory_claims.mutex(fd):
                seen.append((what, [(c.kind, c.declared) for c in memory_claims.live(fd)]))
        finally:
            os.close(fd)

    class Worker:
        trip = False

        def sleep(self, level=1):
            look(self, "sleep")
            if self.trip:
                raise AssertionError(plugin.VLLM_SLEEP_ASSERT)

        def wake_up(self, tags=None):
            look(self, "wake")

        def reload_weights(self):
            look(self, "reload")

    return Worker


@pytest.fixture
def bracketed(tmp_path):
    lock = str(tmp_path / "gpu0.memory.lock")
    seen: list = []
    budget = memory_budget.Budget(memory_claims.BYTES, {"wake": 5 * GIB, "reload": GIB}, 2 * GIB)
    worker_class = _worker_class(lock, seen)
    plugin.bracket(worker_class, lock, timeout_s=5, budget=budget)
    return worker_class(), seen


def test_each_start_step_maps_what_it_grew_by_less_the_pools_it_fills():
    """From the plugin's records (NVML bytes after each step): the CUDA context is the first step's, a
    pool is its step's, and a step without a figure leaves itself and the next one unmeasured."""
    mib = 1 << 20
    pools = {"weights": 500 * mib, "kv_cache": 2048 * mib}
    after = [600, 1120, 1220, 3273, 3573]  # MiB after each step, in plugin.STEPS order
    steps = [{"step": name, "process_bytes": b * mib} for name, b in zip(plugin.STEPS, after)]
    assert memory_budget.beyond_pools(steps, pools) == {
        "init_device": 600 * mib,
        "load_model": 20 * mib,
        "determine_available_memory": 100 * mib,
        "initialize_from_config": 5 * mib,
        "compile_or_warm_up_model": 300 * mib,
    }
    steps[1]["process_bytes"] = None
    assert sorted(memory_budget.beyond_pools(steps, pools)) == [
        "compile_or_warm_up_model",
        "init_device",
        "initialize_from_config",
    ]


def test_a_sleep_declares_its_allowance_only_from_fully_awake(bracketed):
    worker, seen = bracketed
    worker.sleep()
    worker.sleep()  # asleep: frees nothing more
    worker.wake_up(tags=["weights"])
    worker.sleep()  # half awake: frees less than its figure
    worker.wake_up(["weights"])
    worker.wake_up(tags=["kv_cache"])
    worker.sleep()  # every pool mapped back
    worker.wake_up()
    worker.reload_weights()
    worker.sleep()
    free, allocate = gpu_lease.FREE, gpu_lease.ALLOCATE
    assert seen == [
        ("sleep", [(free, 2 * GIB)]),
        ("sleep", [(free, 0)]),
        ("wake", [(allocate, 5 * GIB)]),
        ("sleep", [(free, 0)]),
        ("wake", [(allocate, 5 * GIB)]),
        ("wake", [(allocate, 5 * GIB)]),
        ("sleep", [(free, 2 * GIB)]),
        ("wake", [(allocate, 5 * GIB)]),
        ("reload", [(allocate, GIB)]),
        ("sleep", [(free, 2 * GIB)]),
    ]


def test_a_sleep_that_fails_vllms_check_is_marked_and_counted(bracketed, capsys):
    worker, _ = bracketed
    worker.sleep()
    worker.wake_up()
    worker.trip = True
    with pytest.raises(AssertionError, match=plugin.VLLM_SLEEP_ASSERT):
        worker.sleep()
    calls = plugin.read_calls(capsys.readouterr().err)
    assert [c["call"] for c in calls] == ["sleep", "wake", "sleep"]
    assert [c.get(plugin.VLLM_ASSERT_KEY) for c in calls] == [None, None, plugin.VLLM_SLEEP_ASSERT]
    assert calls[0]["declared"] == 2 * GIB


def test_what_a_phase_declares_beside_its_pools_is_held_to_its_bytes_beyond_them():
    """A step's or reload's measured bytes beyond its pools are compared with what it declared beside them
    (timings' "over"); a phase that declares nothing, or any phase under kinds, has no such bound."""
    pools = {"weights": 500, "kv_cache": 2000}
    budget = memory_budget.Budget(
        memory_claims.BYTES,
        {"start:load_model": 564, "start:init_device": 1024, "reload": 564, "wake": 2500, "trainer": 564},
        1500,
    )
    beside = {
        what: memory_budget.declared_beside_pools(budget, what, pools)
        for what in ("start:load_model", "start:init_device", "reload", "wake", "trainer", "sleep")
    }
    assert beside == {
        "start:load_model": 64,
        "start:init_device": 1024,
        "reload": 64,
        "wake": 0,
        "trainer": 64,
        "sleep": None,
    }
    kinds = dataclasses.replace(budget, rule=memory_claims.KINDS)
    assert memory_budget.declared_beside_pools(kinds, "reload", pools) is None
