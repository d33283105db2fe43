"""Mutants of GPU memory across sleep and wake (vllm/v1/worker/gpu_worker.py Worker,
vllm/device_allocator/cumem.py CuMemAllocator of vLLM 0.26.0). Each is sized against the bound that
should catch it (the catalogue's `size`): 1.5 times the bound, so a kill says the bound is sensitive.

Extra device memory comes from cudaMalloc (shared.device_alloc): exact bytes in NVML, outside the CuMem
pools (no sleep releases it) and outside PyTorch's caching allocator (no cached block absorbs it).
"""

from .shared import Deferred, MiB, after, device_alloc, device_free, wrap

LEAK_PER_WAKE = 3 * MiB  # leak_bytes_per_cycle_max is one 2 MiB granule, strict
LEAK_ONCE = 3 * MiB  # cycle_bytes_flat_max likewise
LEAK_ONCE_AT_WAKE = 5
KV_KEPT_FRACTION = 0.5  # of the KV cache's bytes, in whole allocations
KV_MOSTLY_KEPT_FRACTION = 2 / 3
RESIDUE = 716 * MiB  # level1_residue_bytes_max is 1 GiB (eager); ~0.86 GB resident
LATE_RELEASE = 1434 * MiB  # held for LATE_S after /sleep answers
LATE_REMAP = 192 * MiB  # missing when /wake_up answers
UNMAPPED_AFTER_WAKE = 246 * MiB  # as LATE_REMAP, sized against the settled per-process shortfall
WEIGHTS_WAKE_EXTRA = 1260 * MiB  # weights_wake_bytes_fraction_max: weights-only wake at 0.38 of awake
WEIGHTS_WAKE_MORE = 83 * MiB  # weights_wake_bytes_rel_error_max: 0.15 of the 476 MiB checkpoint
WAKE_EXTRA = 384 * MiB  # wake_restore_bytes_max is 256 MiB
LATE_S = 1.0


def leak_per_wake():
    from vllm.v1.worker.gpu_worker import Worker

    leaked = []
    after(Worker, "wake_up", lambda worker: leaked.append(device_alloc(LEAK_PER_WAKE)))


def leak_once():
    from vllm.v1.worker.gpu_worker import Worker

    leaked = []
    after(Worker, "wake_up", lambda worker: leaked.append(device_alloc(LEAK_ONCE)), nth=LEAK_ONCE_AT_WAKE)


def _keep_kv_mapped(select, levels=(1, 2)):
    """A sleep of one of `levels` leaves the KV-cache allocations select(kv) chose mapped and resident:
    they are hidden from CuMemAllocator.sleep, and from the wake that follows (mapping them again would
    fail). CuMemAllocator.sleep is called with offload_tags ("weights",) at level 1 and () at level 2."""
    from vllm.device_allocator.cumem import CuMemAllocator

    def make_sleep(original):
        def sleep(self, offload_tags=None):
            level = 1 if offload_tags and "weights" in offload_tags else 2
            if level not in levels:
                self._sleepwake_kept = {}
                return original(self, offload_tags)
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


def _fraction_of(fraction):
    def select(kv):
        # The fewest allocations, in address order, holding `fraction` of the KV bytes (with vLLM's one
        # tensor per layer, that many of the 6 layers; with one packed tensor, all of it).
        total = sum(data.handle[1] for data in kv.values())
        chosen, held = [], 0
        for ptr in sorted(kv):
            if held >= fraction * total - 1:
                break
            chosen.append(ptr)
            held += kv[ptr].handle[1]
        return chosen

    return select


def kv_cache_partly_kept():
    _keep_kv_mapped(_fraction_of(KV_KEPT_FRACTION))


def kv_cache_mostly_kept():
    _keep_kv_mapped(_fraction_of(KV_MOSTLY_KEPT_FRACTION), levels=(1,))


def kv_cache_partly_kept_level2():
    _keep_kv_mapped(_fraction_of(KV_KEPT_FRACTION), levels=(2,))


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


def late_remap(size=LATE_REMAP):
    from vllm.v1.worker.gpu_worker import Worker

    state = {"pointer": None}

    def map_back():
        if state["pointer"] is None:
            state["pointer"] = device_alloc(size)

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


def wake_leaves_unmapped():
    late_remap(UNMAPPED_AFTER_WAKE)


def _extra_until(size: int, when, until) -> None:
    """`size` bytes mapped after each Worker.wake_up(tags) for which when(tags) holds, given back at the
    next wake for which until(tags) holds or at the next sleep (before vLLM's own reading, so its
    "freed >= 0" check still holds)."""
    from vllm.v1.worker.gpu_worker import Worker

    held: list = []

    def release():
        while held:
            device_free(held.pop())

    def make_wake(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if until(tags):
                release()
            if when(tags):
                held.append(device_alloc(size))

        return wake_up

    def make_sleep(original):
        def sleep(self, level=1):
            release()
            return original(self, level)

        return sleep

    wrap(Worker, "wake_up", make_wake)
    wrap(Worker, "sleep", make_sleep)


def _weights_only(tags) -> bool:
    return tags is not None and list(tags) == ["weights"]


def _kv_cache_wake(tags) -> bool:
    return tags is not None and "kv_cache" in tags


def weights_wake_maps_extra():
    _extra_until(WEIGHTS_WAKE_EXTRA, _weights_only, _kv_cache_wake)


def weights_wake_maps_more():
    _extra_until(WEIGHTS_WAKE_MORE, _weights_only, _kv_cache_wake)


def wake_maps_extra():
    _extra_until(WAKE_EXTRA, lambda tags: tags is None, lambda tags: False)
