import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tools.launcher import gpu_lease, slot_queue
from tools.launcher.errors import LeaseTimeoutError
from tools.launcher.tests import testing

# A cell waiting for gpu0's one slot: it writes its label to the order file once it holds the slot.
_WAITER = textwrap.dedent("""
    import sys, time
    from tools.launcher import gpu_lease
    lock_dir, label, priority, order = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    lease = gpu_lease.acquire(["0"], lock_dir, 1, timeout_s=60, poll_s=0.02, priority_s=priority)
    with open(order, "a") as f:
        f.write(label + "\\n")
    time.sleep(0.05)
    lease.release()
""")

# A waiter that joined the queue and then only sleeps (a cell killed, or stopped, while it waited).
_PARKED = textwrap.dedent("""
    import sys, time
    from tools.launcher import slot_queue
    place = slot_queue.Place(sys.argv[1], ["0"], float(sys.argv[2]))
    print("joined", flush=True)
    time.sleep(120)
""")


def _waiting(lock_dir, n, timeout_s=30.0):
    queue = slot_queue.queue_dir(lock_dir, ["0"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.isdir(queue) and len([f for f in os.listdir(queue) if f.endswith(slot_queue.SUFFIX)]) >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"{n} waiters never joined {queue}")


def test_free_slots_go_to_the_longest_waiting_cell_first_and_ties_in_arrival_order(tmp_path):
    lock_dir, order = str(tmp_path), tmp_path / "order.txt"
    held = gpu_lease.acquire(["0"], lock_dir, 1, timeout_s=1)
    waiters = []
    try:
        # They arrive shortest first, and the two 50 s cells one after the other.
        for count, (label, priority) in enumerate([("short", 10), ("long-1st", 50), ("middle", 30),
                                                   ("long-2nd", 50)], start=1):
            waiters.append(subprocess.Popen([sys.executable, "-c", _WAITER, lock_dir, label, str(priority),
                                             str(order)], env=testing.python_env()))
            _waiting(lock_dir, count)
    finally:
        held.release()
    assert [w.wait(timeout=60) for w in waiters] == [0] * 4
    assert order.read_text().split() == ["long-1st", "long-2nd", "middle", "short"]
    assert not [f for f in os.listdir(slot_queue.queue_dir(lock_dir, ["0"])) if not f.startswith(".")]


def test_a_live_waiter_ahead_keeps_the_free_slot_and_a_dead_one_does_not(tmp_path):
    lock_dir = str(tmp_path)
    parked = subprocess.Popen([sys.executable, "-c", _PARKED, lock_dir, "100"], env=testing.python_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parked.stdout.readline().strip() == "joined"
        with pytest.raises(LeaseTimeoutError, match="1 waiting ahead of this cell"):
            gpu_lease.acquire(["0"], lock_dir, 1, timeout_s=0.2, poll_s=0.05, priority_s=10)
    finally:
        parked.send_signal(signal.SIGKILL)
        parked.wait()
    # Its file is still there, unlocked: the next waiter removes it and takes the slot at once.
    assert len(os.listdir(slot_queue.queue_dir(lock_dir, ["0"]))) == 1
    lease = gpu_lease.acquire(["0"], lock_dir, 1, timeout_s=0.2, poll_s=0.05, priority_s=10)
    lease.release()
    assert os.listdir(slot_queue.queue_dir(lock_dir, ["0"])) == []


def test_waiters_ahead_take_only_as_many_free_slots_as_they_are(tmp_path):
    """Two slots free and one waiter ahead: the second free slot is this cell's."""
    lock_dir = str(tmp_path)
    parked = subprocess.Popen([sys.executable, "-c", _PARKED, lock_dir, "100"], env=testing.python_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parked.stdout.readline().strip() == "joined"
        lease = gpu_lease.acquire(["0"], lock_dir, 2, timeout_s=0.5, poll_s=0.05)
        assert os.path.basename(lease.path) == "gpu0.slot1.lock"  # slot 0 left for the waiter ahead
        lease.release()
    finally:
        parked.send_signal(signal.SIGKILL)
        parked.wait()


def test_queues_are_per_gpu_set_and_files_of_other_kinds_are_ignored(tmp_path):
    lock_dir = str(tmp_path)
    assert slot_queue.queue_dir(lock_dir, ["1", "0"]) == slot_queue.queue_dir(lock_dir, ["0", "1"])
    assert slot_queue.queue_dir(lock_dir, ["1"]) != slot_queue.queue_dir(lock_dir, ["0"])
    queue = slot_queue.queue_dir(lock_dir, ["0"])
    os.makedirs(queue)
    for stray in ("notes.txt", "x-y-z.wait", ".joining-1-2"):
        open(os.path.join(queue, stray), "w").close()
    place = slot_queue.Place(lock_dir, ["0"], 1.0)
    try:
        assert place.ahead() == 0
    finally:
        place.leave()
