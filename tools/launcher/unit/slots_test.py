"""tools/launcher/slots.py: the GPUs a matrix run uses and how many cells share each."""

import pytest

from tools.launcher import slots
from tools.launcher.errors import GpuUnavailableError

GIB = 1 << 30
QUERY = (
    "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, 143163\n"
    "1, GPU-bbbbbbbb-0000-0000-0000-000000000000, 20480\n"
    "2, GPU-cccccccc-0000-0000-0000-000000000000, 143163.5\n"
)


def test_parse_query_reads_index_uuid_and_free_mib():
    assert slots.parse_query(QUERY + "\n") == [
        slots.Gpu(0, "GPU-aaaaaaaa-0000-0000-0000-000000000000", 143163 << 20),
        slots.Gpu(1, "GPU-bbbbbbbb-0000-0000-0000-000000000000", 20480 << 20),
        slots.Gpu(2, "GPU-cccccccc-0000-0000-0000-000000000000", 143163 << 20),
    ]


@pytest.mark.parametrize(
    "free_gib,cores,gpus,expected",
    [
        (139, 32, 2, 24),  # nvidia-h200-x2: 16 cores per GPU, 1.5 cells per core
        (139, 16, 1, 24),  # nvidia-h200: 16 cores for one GPU
        (139, 8, 2, 6),  # few cores: a start is CPU-bound
        (139, 128, 8, 24),  # the cap
        (20, 32, 1, 4),  # a GPU mostly taken by another job: 5 GiB per cell
        (4, 32, 1, 1),  # never less than one cell per GPU
        (139, 1, 2, 1),
    ],
)
def test_automatic_slots_take_the_scarcer_of_memory_and_cores(free_gib, cores, gpus, expected):
    assert slots.automatic_slots(free_gib * GIB, cores, gpus)[0] == expected


def test_the_explanation_carries_the_numbers():
    assert slots.automatic_slots(139 * GIB, 32, 2) == (
        24,
        "min(139 GiB free / 5 GiB per cell = 27, 32 cores x 1.5 cells per core / 2 GPU(s) = 24, cap 24)",
    )


def test_plan_sizes_for_the_emptiest_gpu_it_was_given():
    gpus = slots.parse_query(QUERY)
    given, count, why = slots.plan(gpus, {}, cores=48)
    assert [gpu.index for gpu in given] == [0, 1, 2] and count == 4  # GPU 1 has 20 GiB free
    assert why.startswith("automatic: min(20 GiB free") and why.endswith("SLEEPWAKE_SLOTS_PER_GPU=N overrides")
    given, count, _ = slots.plan(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-cccc,0"}, cores=24)
    assert [gpu.index for gpu in given] == [2, 0] and count == 18  # 24 cores x 1.5 / 2 GPUs


def test_the_override_wins_and_must_be_a_positive_whole_number():
    gpus = slots.parse_query(QUERY)
    assert slots.plan(gpus, {"SLEEPWAKE_SLOTS_PER_GPU": "5"}, cores=2)[1:] == (5, "SLEEPWAKE_SLOTS_PER_GPU")
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ValueError, match="SLEEPWAKE_SLOTS_PER_GPU=.* is not a whole number >= 1"):
            slots.plan(gpus, {"SLEEPWAKE_SLOTS_PER_GPU": bad}, cores=2)


def test_no_gpu_or_a_foreign_gpu_is_refused():
    with pytest.raises(GpuUnavailableError, match="sees no NVIDIA GPU"):
        slots.plan([], {}, cores=2)
    with pytest.raises(GpuUnavailableError, match="'GPU-dddd' matches none"):
        slots.plan(slots.parse_query(QUERY), {"CUDA_VISIBLE_DEVICES": "GPU-dddd"}, cores=2)
