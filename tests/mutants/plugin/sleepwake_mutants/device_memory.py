"""Mutants of GPU memory across sleep and wake (vllm/v1/worker/gpu_worker.py Worker,
vllm/device_allocator/cumem.py CuMemAllocator of vLLM 0.26.0). Each is sized against the bound that
should catch it (the catalogue's `size`): about twice the bound, so a kill says the bound is sensitive.

Extra device memory comes from cudaMalloc (shared.device_alloc): exact bytes in NVML, outside the CuMem
pools (no sleep releases it) and outside PyTorch's caching allocator (no cached block absorbs it).
"""

from .shared import MiB, Deferred, after, device_alloc, device_free, wrap

LEAK_PER_WAKE = 8 * MiB            # leak_bytes_per_cycle_max is 4 MiB
LEAK_ONCE = 128 * MiB              # cycle_bytes_flat_max is 64 MiB
LEAK_ONCE_AT_WAKE = 5
KV_KEPT_FRACTION = 0.7             # of the KV cache's bytes, in whole allocations
RESIDUE = 1152 * MiB               # level1_residue_bytes_max is 1 GiB (eager); ~0.86 GB resident
LATE_RELEASE = 1536 * MiB          # held for LATE_S after /sleep answers
LATE_REMAP = 448 * MiB             # missing when /wake_up answers; eager comes back ~354 MiB short
LATE_S = 1.0


def leak_per_wake():
    from vllm.v1.worker.gpu_worker import Worker
    leaked = []
    after(Worker, "wake_up", lambda worker: leaked.append(device_alloc(LEAK_PER_WAKE)))


def leak_once():
    from vllm.v1.worker.gpu_worker import Worker
    leaked = []
    after(Worker, "wake_up", lambda worker: leaked.append(device_alloc(LEAK_ONCE)), nth=LEAK_ONCE_AT_WAKE)


def _keep_kv_mapped(select):
    """Level-1 sleep leaves the KV-cache allocations select(kv) chose mapped and resident: they are
    hidden from CuMemAllocator.sleep, and from the wake that follows (mapping them again would fail)."""
    from vllm.device_allocator.cumem import CuMemAllocator

    def make_sleep(original):
        def sleep(self, offload_tags=None):
            kv = {ptr: data for ptr, data in self.pointer_to_data.items() if data.tag == "kv_cache"}
            kept = {ptr: kv[ptr] for ptr in select(kv)}
            for ptr in kept:
                del self.pointer_to_data[ptr]
            try:
                return original(self, offload_tags)
            finally:
                self.pointer_to_data.update(kept)
                self._sleepwake_kept = kept
        return sleep

    def make_wake(original):
        def wake_up(self, tags=None):
            kept = getattr(self, "_sleepwake_kept", {})
            for ptr in kept:
                self.pointer_to_data.pop(ptr, None)
            try:
                return original(self, tags)
            finally:
                self.pointer_to_data.update(kept)
                self._sleepwake_kept = {}
        return wake_up
    wrap(CuMemAllocator, "sleep", make_sleep)
    wrap(CuMemAllocator, "wake_up", make_wake)


def kv_cache_kept_on_sleep():
    _keep_kv_mapped(lambda kv: list(kv))


def kv_cache_partly_kept():
    def select(kv):
        # The fewest allocations, in address order, holding KV_KEPT_FRACTION of the KV bytes (with
        # vLLM's one tensor per layer, 5 of 6 layers; with one packed tensor, all of it).
        total = sum(data.handle[1] for data in kv.values())
        chosen, held = [], 0
        for ptr in sorted(kv):
            if held >= KV_KEPT_FRACTION * total:
                break
            chosen.append(ptr)
            held += kv[ptr].handle[1]
        return chosen
    _keep_kv_mapped(select)


def residue_grows():
    from vllm.v1.worker.gpu_worker import Worker
    held = []
    # Device memory outside the pools from start-up on (after the KV cache is allocated): resident at
    # level 1, like the CUDA-graph pool level 1 does not release (#45648), only larger.
    after(Worker, "initialize_from_config", lambda worker: held.append(device_alloc(RESIDUE)))


def late_release():
    from vllm.v1.worker.gpu_worker import Worker
    pending = Deferred(LATE_S)

    def make(original):
        def sleep(self, level=1):
            pending.flush()
            original(self, level)
            # /sleep answers with this much still held; it is released LATE_S later. (Allocated after
            # vLLM's own before/after reading, so its "freed >= 0" assertion still holds.)
            pointer = device_alloc(LATE_RELEASE)
            pending.schedule(lambda: device_free(pointer))
        return sleep
    wrap(Worker, "sleep", make)


def late_remap():
    from vllm.v1.worker.gpu_worker import Worker
    state = {"pointer": None}

    def map_back():
        if state["pointer"] is None:
            state["pointer"] = device_alloc(LATE_REMAP)

    def make_wake(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if state["pointer"] is not None:
                # /wake_up answers with these bytes still missing; they come back with the first
                # forward pass (or sleep) after the wake, never on a timer: a cudaMalloc from a timer
                # could land inside a GPU neighbour's sleep and fail its free-memory assertion.
                device_free(state["pointer"])
                state["pointer"] = None
        return wake_up

    def make_step(original):
        def execute_model(self, *args, **kwargs):
            map_back()
            return original(self, *args, **kwargs)
        return execute_model

    def make_sleep(original):
        def sleep(self, level=1):
            map_back()
            return original(self, level)
        return sleep
    after(Worker, "initialize_from_config", lambda worker: map_back())  # awake bytes from start-up on
    wrap(Worker, "wake_up", make_wake)
    wrap(Worker, "execute_model", make_step)
    wrap(Worker, "sleep", make_sleep)
