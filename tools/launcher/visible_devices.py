"""The GPUs a runner was given: CUDA_VISIBLE_DEVICES resolved to NVML device indices.

A runner that reserves some GPUs for other jobs says so with CUDA_VISIBLE_DEVICES; cells must lease
only those. Entries may be indices or GPU UUIDs (`GPU-8932f937-...`, or a unique prefix, as CUDA
accepts). Indices are read as NVML's, which count in PCI bus order: the order vLLM itself assumes when
it maps CUDA_VISIBLE_DEVICES to NVML devices, and the one servers get (CUDA_DEVICE_ORDER=PCI_BUS_ID,
config.build_env). On a host with mixed GPU models, where CUDA's default order may differ, give UUIDs.
"""

from __future__ import annotations

from tools.launcher.errors import GPU_CELL_HINT, GpuUnavailableError


def _index_of(entry: str, uuids: list[str]) -> int:
    if entry.lstrip("-").isdigit():
        index = int(entry)
        if not 0 <= index < len(uuids):
            raise GpuUnavailableError(
                "CUDA_VISIBLE_DEVICES entry %r is not a GPU of this host: NVML lists %d (indices 0-%d)."
                " Set it to GPUs this runner has, or unset it to use all of them." % (entry, len(uuids), len(uuids) - 1)
            )
        return index
    if entry.startswith("MIG-"):
        raise GpuUnavailableError(
            "CUDA_VISIBLE_DEVICES entry %r is a MIG instance; the matrix leases whole"
            " GPUs: give GPU indices or GPU UUIDs." % entry
        )
    matches = [index for index, uuid in enumerate(uuids) if uuid.startswith(entry)]
    if len(matches) != 1:
        raise GpuUnavailableError(
            "CUDA_VISIBLE_DEVICES entry %r %s of this host's GPUs (%s). Give an index or a GPU UUID as"
            " `nvidia-smi -L` prints it."
            % (entry, "matches none" if not matches else "matches several", ", ".join(uuids))
        )
    return matches[0]


def resolve(listed: str | None, uuids: list[str]) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES lists, in its order; every device when unset.

    uuids[i] is the UUID of NVML device i. Raises GpuUnavailableError for an empty list, an entry that
    names no GPU here, or a GPU listed twice (CUDA itself would silently drop what follows a bad entry).
    """
    if listed is None:
        if not uuids:
            raise GpuUnavailableError("NVML sees no NVIDIA GPU: %s" % GPU_CELL_HINT)
        return list(range(len(uuids)))
    entries = [entry.strip() for entry in listed.split(",") if entry.strip()]
    if not entries:
        raise GpuUnavailableError("CUDA_VISIBLE_DEVICES is set but empty, so no GPU is visible: %s" % GPU_CELL_HINT)
    indices = [_index_of(entry, uuids) for entry in entries]
    if len(set(indices)) != len(indices):
        raise GpuUnavailableError(
            "CUDA_VISIBLE_DEVICES=%s names a GPU twice (NVML indices %s); list each GPU once." % (listed, indices)
        )
    return indices
