"""The fake's pinned host memory: the caching allocator's model, its child process as /proc shows it,
and the engine's level-1 copy (what the host-memory class measures on the fake tier)."""

import pytest

from tests.core import host_memory
from tests.sleep_wake.fakes import fake_checkpoint
from tests.sleep_wake.fakes.fake_engine import FakeEngine, GpuMemory
from tests.sleep_wake.fakes.fake_host_memory import HostProcess, PinnedHostMemory

MiB = 1 << 20
CHECKPOINT = fake_checkpoint.Checkpoint("", "a", (3 * MiB, 5 * MiB, 64))  # blocks 4 MiB, 8 MiB, 64 B
COPY = 4 * MiB + 8 * MiB + 64


@pytest.fixture
def process():
    p = HostProcess()
    yield p
    p.stop()


def test_blocks_are_powers_of_two_and_cached_once_freed():
    host = PinnedHostMemory()
    block = host.allocate(3 * MiB)
    assert block == 4 * MiB and host.resident == 4 * MiB
    host.free(block)
    assert host.allocate(4 * MiB - 1) == block and host.resident == 4 * MiB  # reused
    host.allocate(4 * MiB)
    assert host.resident == 8 * MiB


def test_the_child_holds_the_bytes_as_shared_memory(process):
    before = host_memory.process_memory(process.pid)
    process.alloc(32 * MiB)
    after = host_memory.process_memory(process.pid)
    assert before is not None and after is not None, "the child exited"
    assert 32 * MiB <= after.shmem - before.shmem < 33 * MiB
    assert 32 * MiB <= after.rss - before.rss < 34 * MiB
    process.stop()
    with pytest.raises(RuntimeError, match="did not allocate"):
        process.alloc(MiB)


def _engine(defects=()):
    host = PinnedHostMemory()
    engine = FakeEngine(
        GpuMemory(weights=CHECKPOINT.total_bytes, kv_cache=MiB), defects=defects, checkpoint=CHECKPOINT, host=host
    )
    return engine, host


def test_level1_pins_a_copy_that_stays_cached_after_the_wake():
    e, host = _engine()
    e.sleep(2, "abort")
    assert host.resident == 0  # level 2 copies nothing
    e.wake_up(None)
    e.reload_weights()
    e.sleep(1, "abort")
    assert host.resident == COPY
    e.wake_up(None)
    assert host.resident == COPY and sum(host.cached.values()) == 3  # known divergence host_copy_cached_after_wake
    for _ in range(3):
        e.sleep(1, "abort")
        e.wake_up(None)
    assert host.resident == COPY


@pytest.mark.parametrize(
    "defect,level,after_two_cycles",
    [
        ("level2_keeps_host_copy", 2, COPY),
        ("host_copy_leaked", 1, 2 * COPY),
        # The leak is the largest tensor's copy (fake_defects.Sizes), in a block rounded up to a power of two.
        ("pinned_leak_per_sleep", 1, COPY + 2 * (1 << (max(CHECKPOINT.tensor_bytes) - 1).bit_length())),
    ],
)
def test_host_defects(defect, level, after_two_cycles):
    e, host = _engine([defect])
    for _ in range(2):
        e.sleep(level, "abort")
        e.wake_up(None)
    assert host.resident == after_two_cycles
    assert e.weights == "a"  # the copy came back (level 2 included, under level2_keeps_host_copy)
