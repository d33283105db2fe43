"""Mutants of the host (CPU) memory a sleeping server holds: the level-1 weight copy in pinned memory
(vllm/device_allocator/cumem.py CuMemAllocator.sleep/wake_up, sleep_mode_backend.py CuMemBackend of
vLLM 0.26.0). Sized against the host-memory bounds of tests/sleep_wake/lib/thresholds.py."""

from .shared import MiB, after, wrap

PINNED_LEAK_PER_SLEEP = 32 * MiB  # host_leak_bytes_per_cycle_max is 16 MiB (a power of two: PyTorch's
PINNED_JUMP = 256 * MiB           # host allocator pins exactly this); host_cycle_flat_max is 128 MiB
PINNED_JUMP_AT_SLEEP = 5


def _pinned(size: int):
    import torch
    return torch.empty(size, dtype=torch.uint8, device="cpu", pin_memory=True)


def level2_keeps_host_copy():
    from vllm.device_allocator import get_mem_allocator_instance
    from vllm.device_allocator.sleep_mode_backend import CuMemBackend

    def suspend(self, level=1):
        self._state = "SUSPENDED"
        # Level 2 backs the weights up to host memory like level 1 (0.26.0: offload_tags=() unless
        # level 1). Output stays right (the reload overwrites them); only host RAM tells.
        get_mem_allocator_instance().sleep(offload_tags=("weights",))
    CuMemBackend.suspend = suspend


def host_copy_leaked():
    from vllm.device_allocator.cumem import CuMemAllocator
    kept = []

    def make(original):
        def wake_up(self, tags=None):
            # The host copy stays referenced after the wake, so the next sleep pins a new one.
            kept.extend(data.cpu_backup_tensor for data in self.pointer_to_data.values()
                        if data.cpu_backup_tensor is not None and (tags is None or data.tag in tags))
            return original(self, tags)
        return wake_up
    wrap(CuMemAllocator, "wake_up", make)


def pinned_leak_per_sleep():
    from vllm.v1.worker.gpu_worker import Worker
    leaked = []
    after(Worker, "sleep", lambda worker: leaked.append(_pinned(PINNED_LEAK_PER_SLEEP)))


def pinned_jump_once():
    from vllm.v1.worker.gpu_worker import Worker
    leaked = []
    after(Worker, "sleep", lambda worker: leaked.append(_pinned(PINNED_JUMP)), nth=PINNED_JUMP_AT_SLEEP)
