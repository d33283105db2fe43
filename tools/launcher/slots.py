"""How many matrix cells run at once: the GPUs this runner was given x cells per GPU (slots).

    python3 -m tools.launcher.slots      (tools/run_matrix.sh runs it from the workspace root)

prints `GPUS SLOTS` on stdout and how it chose them on stderr; exits 2 with one line when there is no
usable GPU or the override is malformed. GPUs are those CUDA_VISIBLE_DEVICES lists (indices or
UUIDs), else all that nvidia-smi lists (visible_devices.py). SLEEPWAKE_SLOTS_PER_GPU=N overrides
the slots; by default they come from the GPUs' free memory and the runner's cores:

    slots = max(1, min(free GiB of the emptiest given GPU // GIB_PER_CELL,
                       cores * CELLS_PER_CORE // GPUs,
                       MAX_SLOTS))

Reads nvidia-smi rather than NVML so that it needs no Python package: run_matrix.sh runs it before
Bazel, with whatever python3 the runner has.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

from tools.launcher import visible_devices
from tools.launcher.errors import GpuUnavailableError

GIB = 1 << 30
# A cell's server holds under 4 GB awake, more for a moment while it starts (profiling run, CUDA-graph
# capture), and vLLM's start-up check wants its gpu_memory_utilization (0.05, 7 GiB of an H200) free
# once, for the server starting: with N cells, (N - 1) x 4 GB + 7 GiB must fit. 5 GiB per cell keeps
# that with room (the servers' bytes and the GPU's peaks: docs/design.md).
GIB_PER_CELL = 5
# A server start is CPU-bound, yet with one cell per core the cores were far from busy, the cells
# waiting on memory phases more than on cores; 1.5 cells per core kept them busier and the main job
# shorter (docs/design.md).
CELLS_PER_CORE = 1.5
# The most cells per H200 run green in the main job (docs/design.md); more would be untested.
MAX_SLOTS = 24
QUERY = ["nvidia-smi", "--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits"]


@dataclasses.dataclass
class Gpu:
    index: int  # nvidia-smi's index is NVML's
    uuid: str
    free_bytes: int


def parse_query(text: str) -> list[Gpu]:
    """The GPUs of `nvidia-smi --query-gpu=index,uuid,memory.free --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        if line.strip():
            index, uuid, free_mib = (field.strip() for field in line.split(","))
            gpus.append(Gpu(int(index), uuid, int(float(free_mib)) << 20))
    return sorted(gpus, key=lambda gpu: gpu.index)


def automatic_slots(free_bytes: int, cores: int, gpus: int) -> tuple[int, str]:
    """(cells per GPU, the formula with its numbers) for the given GPU's free memory and the cores."""
    by_memory = free_bytes // (GIB_PER_CELL * GIB)
    by_cores = int(cores * CELLS_PER_CORE) // gpus
    slots = max(1, min(by_memory, by_cores, MAX_SLOTS))
    return slots, (
        f"min({free_bytes / GIB:.0f} GiB free / {GIB_PER_CELL} GiB per cell = {by_memory},"
        f" {cores} cores x {CELLS_PER_CORE} cells per core / {gpus} GPU(s) = {by_cores},"
        f" cap {MAX_SLOTS})"
    )


def plan(gpus: list[Gpu], environ, cores: int) -> tuple[list[Gpu], int, str]:
    """(the GPUs given to this runner, slots per GPU, why) ; raises GpuUnavailableError or ValueError."""
    given = [gpus[i] for i in visible_devices.resolve(environ.get("CUDA_VISIBLE_DEVICES"), [gpu.uuid for gpu in gpus])]
    override = environ.get("SLEEPWAKE_SLOTS_PER_GPU")
    if override is not None:
        if not override.strip().isdigit() or int(override) < 1:
            raise ValueError(
                f"SLEEPWAKE_SLOTS_PER_GPU={override!r} is not a whole number >= 1; set it to"
                " the cells per GPU you want, or unset it to size them automatically"
            )
        return given, int(override), "SLEEPWAKE_SLOTS_PER_GPU"
    # Every GPU gets the same number of slots (gpu_lease): size them for the emptiest.
    slots, why = automatic_slots(min(gpu.free_bytes for gpu in given), cores, len(given))
    return given, slots, "automatic: " + why + "; SLEEPWAKE_SLOTS_PER_GPU=N overrides"


def query_gpus() -> list[Gpu]:
    try:
        result = subprocess.run(QUERY, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise GpuUnavailableError("nvidia-smi is not installed, so this host has no usable NVIDIA GPU") from None
    if result.returncode != 0:
        raise GpuUnavailableError(
            "nvidia-smi failed (exit %d: %s)"
            % (result.returncode, (result.stderr or result.stdout).strip().splitlines()[-1:])
        )
    return parse_query(result.stdout)


def main() -> int:
    try:
        gpus, slots, why = plan(query_gpus(), os.environ, len(os.sched_getaffinity(0)))
    except (GpuUnavailableError, ValueError) as e:
        print(f"slots: {e}", file=sys.stderr)
        return 2
    print(
        f"slots: GPUs {','.join(str(gpu.index) for gpu in gpus)} (NVML indices) x {slots} slot(s) per GPU ({why})",
        file=sys.stderr,
    )
    print(len(gpus), slots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
