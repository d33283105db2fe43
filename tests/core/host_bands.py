"""The host bytes a healthy server's process tree may hold awake, against what it held in INITIAL before its
first level-1 sleep: the walk's bands (walk/model.py host_band) and the check of a server lent between
classes (reuse.py) read them here, so that the two never disagree on what healthy is.

A weight-sized pinned block is held while a level-1 copy is, and after its wake where PyTorch's caching
host allocator keeps it (host_copy_cached_after_wake, per release): host_awake plus
host_copy_weights_ratio_min..max of the checkpoint's tensor bytes. Every upper bound also allows
host_cycle_flat_max of drift over the server's life (API-server heap, the allocator's rounding), and the
model buffers a level-2 sleep saves to CPU (level2_host_bytes_max), which stay in the allocator once
given back: bands at the scale of a weight copy, not of heap noise (the walk's own drift, measured on the
H200, stayed under a third of this sum).
"""

from tests.core import host_memory, thresholds


def drift(cell_id: str | None = None) -> float:
    return thresholds.get("host_cycle_flat_max", cell_id) + thresholds.get("level2_host_bytes_max", cell_id)


def copy_held(host_awake: int, weights_bytes: int, cell_id: str | None = None) -> tuple[float, float]:
    """(lowest, highest) host bytes while a level-1 copy's pinned block is held."""
    return (
        host_awake + weights_bytes * thresholds.get("host_copy_weights_ratio_min", cell_id),
        host_awake + weights_bytes * thresholds.get("host_copy_weights_ratio_max", cell_id) + drift(cell_id),
    )


def copy_cached_after_wake(version: str) -> bool:
    """Whether the release's caching host allocator keeps a level-1 copy's pinned block after the wake."""
    return thresholds.divergence("host_copy_cached_after_wake", version).expected == host_memory.KEPT
