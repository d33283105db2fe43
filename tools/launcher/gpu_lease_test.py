import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tools.launcher import gpu_lease, testing
from tools.launcher.errors import GPU_CELL_HINT, GpuUnavailableError, LeaseTimeoutError
from tools.launcher.nvml import FakeNvml


def test_visible_gpus_come_from_cuda_visible_devices_else_nvml():
    assert gpu_lease.visible_gpus(FakeNvml(device_count=3), {}) == ["0", "1", "2"]
    assert gpu_lease.visible_gpus(FakeNvml(device_count=8), {"CUDA_VISIBLE_DEVICES": "4, 6"}) == ["4", "6"]
    with pytest.raises(GpuUnavailableError, match=GPU_CELL_HINT):
        gpu_lease.visible_gpus(FakeNvml(), {"CUDA_VISIBLE_DEVICES": ""})


def test_slots_fill_every_gpu_first_and_a_self_deadlock_fails_at_once(tmp_path):
    owner = gpu_lease.owner_description({"TEST_TARGET": "//tests:cell_a"})
    leases = [gpu_lease.acquire(["0", "1"], str(tmp_path), 2, timeout_s=1, owner=owner) for _ in range(4)]
    try:
        assert [os.path.basename(lease.path) for lease in leases] == [
            "gpu0.slot0.lock", "gpu1.slot0.lock", "gpu0.slot1.lock", "gpu1.slot1.lock"]
        assert not any(lease.exclusive for lease in leases)
        with pytest.raises(LeaseTimeoutError, match="this process already holds every GPU slot") as e:
            gpu_lease.acquire(["0", "1"], str(tmp_path), 2, timeout_s=60, poll_s=0.05)
        assert "gpu1.slot1.lock: pid=%d target=//tests:cell_a" % os.getpid() in str(e.value)
    finally:
        for lease in leases:
            lease.release()
    again = gpu_lease.acquire(["0"], str(tmp_path), 1, timeout_s=1)
    assert again.exclusive and again.gpu == "0"
    again.release()


def test_the_wait_is_bounded_and_reported(tmp_path, caplog):
    caplog.set_level(logging.INFO, "sleepwake.launcher")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), "hold"], env=testing.python_env(),
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "0"  # it holds gpu0 for 0.15 s from now
    lease = gpu_lease.acquire(["0"], str(tmp_path), timeout_s=10, poll_s=0.02)
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
    else:
        os.unlink(marker)
        time.sleep(60)  # killed while holding the slot
""")


def test_leases_are_exclusive_across_processes(tmp_path):
    holders = [subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), "hold"], env=testing.python_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    results = [holder.communicate(timeout=60) for holder in holders]
    assert [holder.returncode for holder in holders] == [0] * 6, [err for _, err in results]
    assert sorted(out.strip() for out, _ in results) == ["0", "0", "0", "1", "1", "1"]


def test_the_timeout_names_the_holder_and_a_killed_holder_frees_its_slot(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), "die"], stdout=subprocess.PIPE,
                              text=True, env=dict(testing.python_env(), TEST_TARGET="//tests:cell_b"))
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
    lease = gpu_lease.acquire(["0"], str(tmp_path), 1, timeout_s=5)
    lease.release()


def test_memory_phase_lets_wakes_overlap_but_keeps_a_sleep_alone(tmp_path):
    a = gpu_lease.acquire(["0"], str(tmp_path), slots_per_gpu=2, timeout_s=1)
    b = gpu_lease.acquire(["0"], str(tmp_path), slots_per_gpu=2, timeout_s=1)
    try:
        with gpu_lease.memory_phase(a, exclusive=False, timeout_s=1):
            # Two shared phases (a start and a wake) overlap ...
            with gpu_lease.memory_phase(b, exclusive=False, timeout_s=1):
                pass
            # ... but a neighbour's sleep waits for them, boundedly.
            with pytest.raises(LeaseTimeoutError, match="memory phase lock"):
                with gpu_lease.memory_phase(b, exclusive=True, timeout_s=0.3):
                    pass
        with gpu_lease.memory_phase(b, exclusive=True, timeout_s=1):
            with pytest.raises(LeaseTimeoutError):
                with gpu_lease.memory_phase(a, exclusive=False, timeout_s=0.3):
                    pass
        with gpu_lease.memory_phase(a, exclusive=True, timeout_s=1) as waited:
            assert waited < 1
    finally:
        a.release()
        b.release()


def test_memory_phase_is_free_for_a_gpu_of_its_own(tmp_path):
    lease = gpu_lease.acquire(["0"], str(tmp_path), slots_per_gpu=1, timeout_s=1)
    try:
        with gpu_lease.memory_phase(lease, exclusive=True, timeout_s=0):
            assert not os.path.exists(gpu_lease.memory_lock_path(lease))
    finally:
        lease.release()
