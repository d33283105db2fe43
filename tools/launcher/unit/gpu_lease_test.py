import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tools.launcher import gpu_lease
from tools.launcher.errors import GPU_CELL_HINT, GpuUnavailableError, LeaseTimeoutError
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.gpu_lease import ALLOCATE, EXCLUSIVE, FREE, KINDS, RELEASE
from tools.launcher.unit import testing


def _acquire(*args, **kwargs) -> gpu_lease.Lease:
    """gpu_lease.acquire with no between_polls, which returns a lease or raises."""
    lease = gpu_lease.acquire(*args, **kwargs)
    assert lease is not None
    return lease


H200_UUIDS = [
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-8932aa01-0000-4106-c12f-20bd9faed9f6",
    "GPU-1f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b",
    "GPU-77777777-8888-9999-aaaa-bbbbbbbbbbbb",
]


@pytest.mark.parametrize(
    "listed,expected",
    [
        (None, ["0", "1", "2", "3"]),  # unset: every GPU NVML lists
        ("2, 3", ["2", "3"]),
        ("3,1", ["3", "1"]),
        # UUIDs, as runners that reserve GPUs often give them, map to NVML indices, so a lock file names
        # the same GPU however the runner spelled it.
        ("GPU-1f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b,GPU-77777777-8888-9999-aaaa-bbbbbbbbbbbb", ["2", "3"]),
        ("GPU-1f2e,0", ["2", "0"]),  # a unique prefix, as CUDA accepts
    ],
)
def test_visible_gpus_are_nvml_indices_of_what_cuda_visible_devices_lists(listed, expected):
    environ = {} if listed is None else {"CUDA_VISIBLE_DEVICES": listed}
    assert gpu_lease.visible_gpus(FakeNvml(device_count=4, uuids=H200_UUIDS), environ) == expected


@pytest.mark.parametrize(
    "listed,message",
    [
        ("", "set but empty"),
        ("4", "'4' is not a GPU of this host: NVML lists 4 \\(indices 0-3\\)"),
        ("-1", "'-1' is not a GPU of this host"),
        ("GPU-8932", "'GPU-8932' matches several"),
        ("GPU-ffff", "'GPU-ffff' matches none"),
        ("MIG-1234", "MIG instance"),
        ("1,GPU-8932aa01", "names a GPU twice"),
    ],
)
def test_visible_gpus_refuse_what_names_no_gpu_here(listed, message):
    with pytest.raises(GpuUnavailableError, match=message):
        gpu_lease.visible_gpus(FakeNvml(device_count=4, uuids=H200_UUIDS), {"CUDA_VISIBLE_DEVICES": listed})
    with pytest.raises(GpuUnavailableError, match=GPU_CELL_HINT):
        gpu_lease.visible_gpus(FakeNvml(device_count=0), {})


def test_a_lease_takes_only_the_gpus_the_runner_was_given(tmp_path):
    gpus = gpu_lease.visible_gpus(FakeNvml(device_count=4, uuids=H200_UUIDS), {"CUDA_VISIBLE_DEVICES": "GPU-7777"})
    lease = _acquire(gpus, str(tmp_path), 1, timeout_s=1)
    try:
        assert (lease.gpu, os.path.basename(lease.path)) == ("3", "gpu3.slot0.lock")
    finally:
        lease.release()


def test_slots_fill_every_gpu_first_and_a_self_deadlock_fails_at_once(tmp_path):
    owner = gpu_lease.owner_description({"TEST_TARGET": "//tests:cell_a"})
    leases = [_acquire(["0", "1"], str(tmp_path), 2, timeout_s=1, owner=owner) for _ in range(4)]
    try:
        assert [os.path.basename(lease.path) for lease in leases] == [
            "gpu0.slot0.lock",
            "gpu1.slot0.lock",
            "gpu0.slot1.lock",
            "gpu1.slot1.lock",
        ]
        assert not any(lease.exclusive for lease in leases)
        with pytest.raises(LeaseTimeoutError, match="this process already holds every GPU slot") as e:
            gpu_lease.acquire(["0", "1"], str(tmp_path), 2, timeout_s=60, poll_s=0.05)
        assert "gpu1.slot1.lock: pid=%d target=//tests:cell_a" % os.getpid() in str(e.value)
    finally:
        for lease in leases:
            lease.release()
    again = _acquire(["0"], str(tmp_path), 1, timeout_s=1)
    assert again.exclusive and again.gpu == "0"
    again.release()


def test_the_wait_is_bounded_and_reported(tmp_path, caplog):
    caplog.set_level(logging.INFO, "sleepwake.launcher")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path), "hold"],
        env=testing.python_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "0"  # it holds gpu0 for 0.15 s from now
    lease = _acquire(["0"], str(tmp_path), timeout_s=10, poll_s=0.02)
    assert holder.wait(timeout=10) == 0
    assert lease.waited_s > 0.05
    assert "after waiting" in caplog.text
    lease.release()


_HOLDER = textwrap.dedent("""
    import os, sys, time
    from tools.launcher import gpu_lease
    lease = gpu_lease.acquire(["0", "1"], sys.argv[1], 1, timeout_s=60, poll_s=0.02)
    marker = lease.path + ".in_use"
    # O_EXCL: creating the marker fails if another holder of the same slot exists right now.
    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    print(lease.gpu, flush=True)
    if sys.argv[2] == "hold":
        time.sleep(0.15)  # simulated work while holding the slot
        os.unlink(marker)
        lease.release()
    elif sys.argv[2] == "until_stdin_closes":
        sys.stdin.read()
        os.unlink(marker)
        lease.release()
    else:
        os.unlink(marker)
        time.sleep(60)  # killed while holding the slot
""")


def test_leases_are_exclusive_across_processes(tmp_path):
    # Six processes contend for two slots. Which GPU each gets depends on timing (a late starter
    # finds gpu0 free again), so the check is exclusivity: a holder exits non-zero if its slot's
    # marker already exists, i.e. if two processes held one slot at once.
    holders = [
        subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(tmp_path), "hold"],
            env=testing.python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [holder.communicate(timeout=60) for holder in holders]
    assert [holder.returncode for holder in holders] == [0] * 6, [err for _, err in results]
    assert {out.strip() for out, _ in results} <= {"0", "1"}


def test_a_second_holder_gets_the_other_gpu(tmp_path):
    # Deterministic spreading across processes: started while the first holds gpu0, the second
    # finds gpu1 free first.
    holders = []
    try:
        for expected in ("0", "1"):
            holder = subprocess.Popen(
                [sys.executable, "-c", _HOLDER, str(tmp_path), "until_stdin_closes"],
                env=testing.python_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            holders.append(holder)
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == expected
    finally:
        for holder in holders:
            holder.communicate(timeout=60)  # closing stdin releases the slot
    assert [holder.returncode for holder in holders] == [0, 0]


def test_the_timeout_names_the_holder_and_a_killed_holder_frees_its_slot(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path), "die"],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(testing.python_env(), TEST_TARGET="//tests:cell_b"),
    )
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "0"
        with pytest.raises(LeaseTimeoutError) as e:
            gpu_lease.acquire(["0"], str(tmp_path), 1, timeout_s=0.3, poll_s=0.05)
        assert "no GPU slot became free within 0 s" in str(e.value)
        assert "gpu0.slot0.lock: pid=%d target=//tests:cell_b" % holder.pid in str(e.value)
        assert "--local_test_jobs" in str(e.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lease = _acquire(["0"], str(tmp_path), 1, timeout_s=5)
    lease.release()


def _shared_leases(tmp_path, n=2):
    return [_acquire(["0"], str(tmp_path), slots_per_gpu=n, timeout_s=1) for _ in range(n)]


def _blocked(lease, kind, timeout_s=0.3, what=""):
    try:
        with gpu_lease.memory_phase(lease, kind, timeout_s=timeout_s, what=what):
            return False
    except LeaseTimeoutError as e:
        assert "no %s phase within" % kind in str(e)
        return True


def test_memory_phases_of_a_kind_overlap_and_kinds_exclude_each_other(tmp_path):
    a, b = _shared_leases(tmp_path)
    try:
        for kind, other in ((ALLOCATE, FREE), (FREE, ALLOCATE)):
            with gpu_lease.memory_phase(a, kind, timeout_s=1):
                # Two starts or wakes overlap, and so do two sleeps or teardowns ...
                assert not _blocked(b, kind)
                # ... but an allocation never lands inside a sleep, nor a sleep inside an allocation,
                # and nothing inside an exclusive window.
                assert _blocked(b, other) and _blocked(b, EXCLUSIVE)
        # A teardown only frees and nobody judges it: it overlaps starts and sleeps, not an exclusive window.
        with gpu_lease.memory_phase(a, RELEASE, timeout_s=1):
            assert not _blocked(b, ALLOCATE) and not _blocked(b, FREE) and not _blocked(b, RELEASE)
            assert _blocked(b, EXCLUSIVE)
        for kind in (ALLOCATE, FREE):
            with gpu_lease.memory_phase(a, kind, timeout_s=1):
                assert not _blocked(b, RELEASE)
        with gpu_lease.memory_phase(a, EXCLUSIVE, timeout_s=1):
            assert all(_blocked(b, kind) for kind in KINDS)
        with gpu_lease.memory_phase(a, EXCLUSIVE, timeout_s=1) as waited:
            assert waited < 1
        with pytest.raises(ValueError, match="expected one of allocate, free, release, exclusive"):
            with gpu_lease.memory_phase(a, "shared", timeout_s=1):
                pass
    finally:
        a.release()
        b.release()


def test_the_published_exclusion_table_is_what_the_lock_does(tmp_path):
    """gpu_lease.EXCLUDED_BY, which tools/bench/phase_trace reads a run's waits by, for every pair of a
    phase held and one asked for: the table cannot drift from the bytes _try_enter locks."""
    a, b = _shared_leases(tmp_path)
    try:
        for holder in KINDS:
            with gpu_lease.memory_phase(a, holder, timeout_s=1):
                blocked = {kind for kind in KINDS if _blocked(b, kind, timeout_s=0.1)}
            assert blocked == {kind for kind in KINDS if holder in gpu_lease.EXCLUDED_BY[kind]}, holder
    finally:
        a.release()
        b.release()


@pytest.mark.parametrize(
    "holder,waiter,flag,kept_out",
    [
        # A sleep waits for the allocations under way, not for a stream of overlapping starts.
        (ALLOCATE, FREE, gpu_lease._FREE_WAITING, (ALLOCATE,)),
        # An exclusive window waits for whatever is inside, and nothing new gets in meanwhile.
        (FREE, EXCLUSIVE, gpu_lease._EXCLUSIVE_WAITING, (FREE, ALLOCATE)),
    ],
)
def test_a_waiting_phase_keeps_newcomers_out_until_it_got_in(tmp_path, holder, waiter, flag, kept_out):
    a, b, c = _shared_leases(tmp_path, 3)
    inside: list[str] = []
    probe = os.open(gpu_lease.memory_lock_path(a), os.O_RDWR | os.O_CREAT)
    try:
        with gpu_lease.memory_phase(a, holder, timeout_s=1):
            thread = threading.Thread(target=lambda: _enter_and_record(b, waiter, inside))
            thread.start()
            deadline = time.monotonic() + 5
            while not gpu_lease._held_by_others(probe, flag):  # until the waiter says it waits
                assert time.monotonic() < deadline, "the %s phase never announced its wait" % waiter
                time.sleep(0.01)
            assert not inside and all(_blocked(c, kind, 0.2) for kind in kept_out)
        thread.join(5)
        assert inside == [waiter]
        assert not _blocked(c, kept_out[0])  # and once it is done the next one goes in
    finally:
        os.close(probe)
        for lease in (a, b, c):
            lease.release()


@pytest.mark.parametrize("holder,wake_passes", [("start:load_model", True), ("wake", False), ("reload", False)])
def test_a_wake_passes_a_waiting_free_only_while_a_start_step_is_inside(tmp_path, holder, wake_passes):
    """The FREE waits for the start step anyway, so a wake or reload may go in beside it; a new start
    step may not (the sleep's wait stays bounded), and behind a wake or reload the keep-out holds."""
    a, b, c = _shared_leases(tmp_path, 3)
    probe = os.open(gpu_lease.memory_lock_path(a), os.O_RDWR | os.O_CREAT)
    inside: list[str] = []
    try:
        with gpu_lease.memory_phase(a, ALLOCATE, timeout_s=1, what=holder):
            thread = threading.Thread(target=lambda: _enter_and_record(b, FREE, inside))
            thread.start()
            deadline = time.monotonic() + 5
            while not gpu_lease._held_by_others(probe, gpu_lease._FREE_WAITING):
                assert time.monotonic() < deadline, "the sleep never announced its wait"
                time.sleep(0.01)
            for what in ("wake", "reload"):
                assert _blocked(c, ALLOCATE, 0.2, what=what) is not wake_passes, what
            assert _blocked(c, ALLOCATE, 0.2, what="start:init_device")
            assert not inside
        thread.join(5)
        assert inside == [FREE]
    finally:
        os.close(probe)
        for lease in (a, b, c):
            lease.release()


@pytest.mark.parametrize(
    "what,inside", [("start:load_model", True), ("start:init_device", True), ("wake", False), ("reload", False)]
)
def test_a_neighbour_in_a_start_step_is_seen_and_nothing_else_is(tmp_path, what, inside):
    """The latency oracles split their samples by it (oracle.bounded_median)."""
    a, b = _shared_leases(tmp_path, 2)
    try:
        assert not gpu_lease.start_step_inside(b)
        with gpu_lease.memory_phase(a, ALLOCATE, timeout_s=1, what=what):
            assert gpu_lease.start_step_inside(b) is inside
        assert not gpu_lease.start_step_inside(b)  # gone with the phase
    finally:
        for lease in (a, b):
            lease.release()


def test_a_lease_without_neighbours_never_sees_a_start_step():
    assert gpu_lease.start_step_inside(None) is False


def _enter_and_record(lease, kind, inside):
    with gpu_lease.memory_phase(lease, kind, timeout_s=5):
        inside.append(kind)


_HOLD_PHASE = (
    "import os, sys, time; from tools.launcher import gpu_lease; "
    "lease = gpu_lease.Lease(gpu='0', slot=1, path=sys.argv[1], fd=-1, waited_s=0, exclusive=False); "
    "ctx = gpu_lease.memory_phase(lease, sys.argv[2], timeout_s=5); ctx.__enter__(); "
    "print('inside', flush=True); time.sleep(60)"
)


def test_a_holder_that_dies_releases_its_phase(tmp_path):
    (a,) = _shared_leases(tmp_path, 1)[:1]
    a.exclusive = False  # as one of several slots
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_PHASE, a.path, ALLOCATE],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "inside"
        assert _blocked(a, FREE)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not _blocked(a, FREE)
    a.release()


def _hammer(path, kind, counts, violations, stop):
    lease = gpu_lease.Lease(gpu="0", slot=0, path=path, fd=-1, waited_s=0, exclusive=False)
    while not stop.is_set():
        with gpu_lease.memory_phase(lease, kind, timeout_s=30, poll_s=0.001):
            with counts.get_lock():
                counts[KINDS.index(kind)] += 1
                allocating, freeing, releasing, exclusive = counts[:]
                if (allocating and freeing) or exclusive > 1 or (exclusive and allocating + freeing + releasing):
                    violations.value += 1
            time.sleep(0.0005)
            with counts.get_lock():
                counts[KINDS.index(kind)] -= 1


def test_no_two_kinds_ever_overlap_under_contention(tmp_path):
    """Twelve processes entering phases of every kind as fast as they can for 1.5 s: never an
    allocation inside a sleep (the overlap vLLM's sleep check cannot survive), never anything inside
    an exclusive window, and every process gets in."""
    path = gpu_lease._slot_path(str(tmp_path), "0", 0)
    counts, violations = multiprocessing.Array("i", len(KINDS)), multiprocessing.Value("i", 0)
    stop = multiprocessing.Event()
    kinds = [ALLOCATE] * 4 + [FREE] * 4 + [RELEASE] * 2 + [EXCLUSIVE] * 2
    procs = [multiprocessing.Process(target=_hammer, args=(path, k, counts, violations, stop)) for k in kinds]
    for p in procs:
        p.start()
    time.sleep(1.5)
    stop.set()
    for p in procs:
        p.join(35)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert violations.value == 0


def test_memory_phase_is_free_for_a_gpu_of_its_own(tmp_path):
    lease = _acquire(["0"], str(tmp_path), slots_per_gpu=1, timeout_s=1)
    try:
        with gpu_lease.memory_phase(lease, EXCLUSIVE, timeout_s=0):
            assert not os.path.exists(gpu_lease.memory_lock_path(lease))
    finally:
        lease.release()


def test_a_cover_is_seen_by_other_processes_for_its_kind_and_exclusive_covers_every_call(tmp_path):
    cover = str(tmp_path / "cover.lock")
    probe = (
        "import sys; from tools.launcher import gpu_lease as g; "
        "print(' '.join(str(g.covered(sys.argv[1], k)) for k in (g.ALLOCATE, g.FREE)))"
    )

    def seen():
        run = subprocess.run(
            [sys.executable, "-c", probe, cover], capture_output=True, text=True, timeout=60, cwd=testing.ROOT
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    assert seen() == ["False", "False"]
    with gpu_lease.covering(cover, gpu_lease.FREE):
        assert seen() == ["False", "True"]
    with gpu_lease.covering(cover, gpu_lease.ALLOCATE):
        assert seen() == ["True", "False"]
    with gpu_lease.covering(cover, gpu_lease.EXCLUSIVE):
        assert seen() == ["True", "True"]
    with gpu_lease.covering(cover, gpu_lease.RELEASE):  # a teardown covers no call
        assert seen() == ["False", "False"]
    assert seen() == ["False", "False"]
