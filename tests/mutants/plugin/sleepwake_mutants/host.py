"""Mutants of the host (CPU) memory a sleeping server holds: the level-1 weight copy in pinned memory
(vllm/device_allocator/cumem.py CuMemAllocator.sleep/wake_up, sleep_mode_backend.py CuMemBackend of
vLLM 0.26.0). Sized against the host-memory bounds of tests/core/thresholds.py: 1.5 times
each bound; pinned through cudaHostRegister on pages of their own, so VmRSS grows by exactly the size
(PyTorch's caching host allocator would round a pinned tensor up to a power of two)."""

import mmap

from .shared import KiB, MiB, after, replace, wrap

PINNED_LEAK_PER_SLEEP = 48 * KiB  # host_leak_bytes_per_cycle_max is 32 KiB
PINNED_JUMP = 480 * KiB  # host_cycle_flat_max is 352 KiB (healthy spread up to 88 KiB on top)
PINNED_JUMP_AT_SLEEP = 5
LEVEL2_PINNED = int(16.5 * MiB)  # level2_host_bytes_max is 11 MiB
SECOND_COPY = 580 * MiB  # host_copy_weights_ratio_max: 1.8 x the 476 MiB checkpoint
COPIED_FRACTION = 0.54  # host_copy_weights_ratio_min: 1.2 against a healthy 1.48


class _Pinned:
    """`size` bytes of resident, page-locked host memory until release()."""

    def __init__(self, size: int):
        import torch

        self._cudart = torch.cuda.cudart()
        self._buf = mmap.mmap(-1, size)
        self._buf.write(b"\x01" * size)  # resident: every page touched
        self._address = torch.frombuffer(self._buf, dtype=torch.uint8).data_ptr()
        self._cudart.cudaHostRegister(self._address, size, 0)

    def release(self) -> None:
        self._cudart.cudaHostUnregister(self._address)
        self._buf.close()


def _pinned(size: int) -> _Pinned:
    return _Pinned(size)


def _release(held: list) -> None:
    while held:
        held.pop().release()


def level2_keeps_host_copy():
    from vllm.device_allocator import get_mem_allocator_instance
    from vllm.device_allocator.sleep_mode_backend import CuMemBackend

    def suspend(self, level=1):
        self._state = "SUSPENDED"
        # Level 2 backs the weights up to host memory like level 1 (0.26.0: offload_tags=() unless
        # level 1). Output stays right (the reload overwrites them); only host RAM tells.
        get_mem_allocator_instance().sleep(offload_tags=("weights",))

    replace(CuMemBackend, "suspend", suspend)


def host_copy_leaked():
    from vllm.device_allocator.cumem import CuMemAllocator

    kept: list[object] = []  # the host copies, only referenced

    def make(original):
        def wake_up(self, tags=None):
            # The host copy stays referenced after the wake, so the next sleep pins a new one.
            kept.extend(
                data.cpu_backup_tensor
                for data in self.pointer_to_data.values()
                if data.cpu_backup_tensor is not None and (tags is None or data.tag in tags)
            )
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


def _pinned_while_asleep(size: int, when) -> None:
    """`size` bytes pinned after each Worker.sleep(level) for which when(level, earlier levels) holds,
    released by the next wake."""
    from vllm.v1.worker.gpu_worker import Worker

    held: list = []
    levels: list = []

    def make_sleep(original):
        def sleep(self, level=1):
            result = original(self, level)
            if when(level, levels):
                held.append(_pinned(size))
            levels.append(level)
            return result

        return sleep

    def make_wake(original):
        def wake_up(self, tags=None):
            _release(held)
            return original(self, tags)

        return wake_up

    wrap(Worker, "sleep", make_sleep)
    wrap(Worker, "wake_up", make_wake)


def level2_pins_host():
    _pinned_while_asleep(LEVEL2_PINNED, lambda level, earlier: level == 2)


def host_copy_twice():
    # The first level-1 sleep, a level-2 one before it or not (host_memory sleeps at level 2 first).
    _pinned_while_asleep(SECOND_COPY, lambda level, earlier: level == 1 and 1 not in earlier)


def host_copy_partial():
    from vllm.device_allocator.cumem import CuMemAllocator

    def make(original):
        def sleep(self, offload_tags=None):
            if not offload_tags or "weights" not in offload_tags:
                return original(self, offload_tags)
            weights = sorted((ptr, data) for ptr, data in self.pointer_to_data.items() if data.tag == "weights")
            total = sum(data.handle[1] for _, data in weights)
            dropped, kept = [], 0
            for _ptr, data in weights:  # back up allocations in address order up to COPIED_FRACTION
                if kept + data.handle[1] > COPIED_FRACTION * total:
                    dropped.append(data)
                    data.tag = "sleepwake_discarded"  # not an offload tag: discarded, remapped empty
                else:
                    kept += data.handle[1]
            try:
                return original(self, offload_tags)
            finally:
                for data in dropped:
                    data.tag = "weights"

        return sleep

    wrap(CuMemAllocator, "sleep", make)
