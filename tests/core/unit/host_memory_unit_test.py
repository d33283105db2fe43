"""tests/core/host_memory.py on real processes: children that allocate and free known amounts of private and
shared memory (the kind the NVIDIA driver books pinned host memory as, per the module docstring)."""

import os
import subprocess
import sys

import pytest

from tests.core import host_memory, measure, thresholds

MiB = 1 << 20
SLACK = 4 * MiB  # the child's own Python bookkeeping between two readings

CHILD = r"""
import mmap, sys
held = []
for line in sys.stdin:
    words = line.split()
    if words[0] == "free":
        for region in held:
            region.close()
        held.clear()
    else:
        size = int(words[1]) << 20
        flags = mmap.MAP_PRIVATE if words[0] == "anon" else mmap.MAP_SHARED
        region = mmap.mmap(-1, size, flags=flags)
        chunk = b"\x01" * (1 << 20)
        for _ in range(size >> 20):  # touch every page, a MiB at a time
            region.write(chunk)
        held.append(region)
    print("ok", flush=True)
"""


class Child:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.pid = self.proc.pid

    def do(self, command: str) -> None:
        self.stdin.write(command + "\n")
        self.stdin.flush()
        assert self.stdout.readline().strip() == "ok", f"child failed on {command!r}"

    def memory(self) -> host_memory.HostMemory:
        now = host_memory.process_memory(self.pid)
        assert now is not None, f"the child (pid {self.pid}) is gone"
        return now

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def child():
    c = Child()
    c.do("free")  # the interpreter is up and has answered once before the first reading
    yield c
    c.close()


def _near(value: int, want: int) -> bool:
    return abs(value - want) <= SLACK


def test_private_pages_show_in_rss_and_anon_and_leave_when_freed(child):
    before = child.memory()
    child.do("anon 64")
    grown = child.memory() - before
    assert _near(grown.rss, 64 * MiB) and _near(grown.anon, 64 * MiB) and _near(grown.shmem, 0), grown
    child.do("free")
    back = child.memory() - before
    assert _near(back.rss, 0) and _near(back.anon, 0), back


def test_shared_pages_show_in_rss_and_shmem_the_pinned_figure(child):
    before = child.memory()
    child.do("shm 48")
    grown = child.memory() - before
    assert _near(grown.rss, 48 * MiB) and _near(grown.shmem, 48 * MiB) and _near(grown.anon, 0), grown
    assert grown.pinned == grown.shmem
    child.do("free")
    assert _near((child.memory() - before).shmem, 0)


def test_tree_sums_every_process_and_skips_the_gone():
    a, b = Child(), Child()
    try:
        for c in (a, b):
            c.do("free")
        gone = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
        )
        pids = [a.pid, b.pid, int(gone.stdout)]
        before = host_memory.total(host_memory.tree_memory(pids))
        a.do("anon 32")
        b.do("shm 16")
        per_pid = host_memory.tree_memory(pids)
        assert sorted(per_pid) == sorted([a.pid, b.pid])
        grown = host_memory.total(per_pid) - before
        assert _near(grown.rss, 48 * MiB) and _near(grown.anon, 32 * MiB) and _near(grown.shmem, 16 * MiB)
    finally:
        a.close()
        b.close()


def test_server_host_memory_reads_the_servers_pids(child):
    class Server:  # what the suite uses of VllmServer: the PIDs of its process tree
        def pids(self):
            return [child.pid]

    total, per_pid = host_memory.server_host_memory(Server())
    assert list(per_pid) == [child.pid] and total == per_pid[child.pid] and total.rss > 0


def test_no_process_left_is_an_error():
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    assert host_memory.process_memory(int(gone.stdout)) is None
    with pytest.raises(host_memory.HostMemoryError, match="server is gone"):
        host_memory.tree_memory([int(gone.stdout)])


STATUS = """Name:\tpython3
VmPeak:\t  100 kB
VmLck:\t       0 kB
VmPin:\t       8 kB
VmRSS:\t    3000 kB
RssAnon:\t    1000 kB
RssFile:\t    1500 kB
RssShmem:\t     500 kB
Threads:\t1
"""


def test_parse_status_reads_kib():
    m = host_memory.parse_status(STATUS)
    assert m == host_memory.HostMemory(
        rss=3000 << 10, anon=1000 << 10, file=1500 << 10, shmem=500 << 10, locked=0, pinned_vm=8 << 10
    )
    assert m.rss == m.anon + m.file + m.shmem


def test_parse_status_names_what_an_old_kernel_lacks():
    old = "\n".join(line for line in STATUS.splitlines() if not line.startswith("Rss"))
    with pytest.raises(host_memory.HostMemoryError, match=r"RssAnon, RssFile, RssShmem.*Linux >= 4.5"):
        host_memory.parse_status(old)


def test_own_process_reads():
    own = host_memory.process_memory(os.getpid())
    assert own is not None and own.rss > 0


@pytest.mark.parametrize(
    "retained,expected", [(0, "released"), (64 * MiB, "released"), (300 * MiB, "partial"), (600 * MiB, "kept")]
)
def test_retention(retained, expected):
    assert host_memory.retention(retained, copy=700 * MiB, noise=64 * MiB) == expected


# The engine core of a healthy MRV2-eager server on the H200, asleep at cycles 2, 6 and 7 of
# test_host_bytes_flat_over_ten_cycles: between 6 and 7 the page cache took 1.6 MiB of its file-backed
# pages; what the server allocated grew 8 KiB.
H200_CYCLES = [
    host_memory.HostMemory(rss=a + f + s, anon=a, file=f, shmem=s)
    for a, f, s in (
        (1200259072, 192720896, 778313728),
        (1200275456, 192720896, 778313728),
        (1200279552, 191082496, 778313728),
    )
]


def test_allocated_bytes_leave_out_the_file_pages_the_page_cache_moves():
    allocated = [m.allocated for m in H200_CYCLES]
    assert allocated == [m.anon + m.shmem for m in H200_CYCLES]
    assert measure.spread(allocated) == 20480  # 20 KiB: flat
    assert measure.spread([m.rss for m in H200_CYCLES]) > thresholds.get("host_cycle_flat_max")
    assert measure.spread(allocated) < thresholds.get("host_cycle_flat_max")
