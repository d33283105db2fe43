"""The rule bytes (memory_claims.py through gpu_lease.memory_phase): a sleep overlaps allocations while
their declared bytes stay below its allowance, an allocation joins while every running sleep's
allowance holds what was charged to it, undeclared bytes keep the old rule, and a dead holder's claim
goes with it. Each case asks a second lease (another open file, as a neighbour's) for a phase with a
short timeout: refused is a LeaseTimeoutError."""

import os
import signal
import subprocess
import sys

import pytest

from tools.launcher import gpu_lease, memory_claims
from tools.launcher.errors import LeaseTimeoutError
from tools.launcher.gpu_lease import ALLOCATE, FREE
from tools.launcher.memory_claims import BYTES, KINDS

GIB = 1 << 30


@pytest.fixture
def leases(tmp_path):
    held = [gpu_lease.acquire(["0"], str(tmp_path), slots_per_gpu=3, timeout_s=1) for _ in range(3)]
    assert all(held)
    yield held
    for lease in held:
        assert lease is not None
        lease.release()


def _phase(lease, kind, declared, rule=BYTES, timeout_s=5.0):
    return gpu_lease.memory_phase(lease, kind, timeout_s=timeout_s, declared=declared, rule=rule)


def _admitted(lease, kind, declared, rule=BYTES) -> bool:
    try:
        with _phase(lease, kind, declared, rule, timeout_s=0.2):
            return True
    except LeaseTimeoutError:
        return False


def test_a_sleep_overlaps_allocations_below_its_allowance_and_no_more(leases):
    a, b, c = leases
    with _phase(a, ALLOCATE, 1 * GIB):
        assert _admitted(b, FREE, 2 * GIB)  # 1 GiB inside < 2 GiB allowed
        assert not _admitted(b, FREE, 1 * GIB)  # not below: the sum must stay under the allowance
        with _phase(c, ALLOCATE, 1 * GIB):
            assert not _admitted(b, FREE, 2 * GIB)  # 2 GiB inside now


def test_an_allocation_joins_while_every_running_sleep_still_has_room(leases):
    a, b, c = leases
    with _phase(a, FREE, 3 * GIB):
        with _phase(b, FREE, 1 * GIB):
            assert not _admitted(c, ALLOCATE, 1 * GIB)  # b's allowance is 1 GiB: not below it
        assert _admitted(c, ALLOCATE, 1 * GIB)
        # Its bytes stay charged to a's window after it left (the memory stays mapped): 1 GiB charged,
        # so 2 GiB more is not below 3, 1 GiB is, and then nothing of 1 GiB more is.
        assert not _admitted(c, ALLOCATE, 2 * GIB)
        assert _admitted(c, ALLOCATE, 1 * GIB)
        assert not _admitted(c, ALLOCATE, 1 * GIB)
        assert _admitted(c, ALLOCATE, GIB // 2)
    assert _admitted(c, ALLOCATE, 100 * GIB)  # the sleep is over: nothing to charge


def test_undeclared_bytes_keep_the_kinds_rule(leases):
    a, b, _ = leases
    with _phase(a, ALLOCATE, None):
        assert not _admitted(b, FREE, 100 * GIB)
    with _phase(a, FREE, 0):  # a sleep of a worker not fully awake allows nothing
        assert not _admitted(b, ALLOCATE, 1)
    with _phase(a, FREE, 2 * GIB):
        assert not _admitted(b, ALLOCATE, None)
    with _phase(a, FREE, None):
        assert _admitted(b, FREE, None)  # sleeps overlap sleeps, as ever


@pytest.mark.parametrize("holder_rule,asker_rule", [(KINDS, BYTES), (BYTES, KINDS), (KINDS, KINDS)])
def test_the_kinds_rule_overlaps_nothing_whichever_rule_the_neighbour_keeps(leases, holder_rule, asker_rule):
    a, b, _ = leases
    for held, asked in ((ALLOCATE, FREE), (FREE, ALLOCATE)):
        with _phase(a, held, GIB, holder_rule):
            assert not _admitted(b, asked, 100 * GIB if asked == FREE else 1, asker_rule), (held, asked)


_HOLD_CLAIM = (
    "import sys, time; from tools.launcher import gpu_lease; "
    "lease = gpu_lease.Lease(gpu='0', slot=2, path=sys.argv[1], fd=-1, waited_s=0, exclusive=False); "
    "ctx = gpu_lease.memory_phase(lease, 'allocate', timeout_s=5, declared=int(sys.argv[2]), rule='bytes'); "
    "ctx.__enter__(); print('inside', flush=True); time.sleep(60)"
)


def test_a_dead_holders_claim_goes_with_it(leases):
    a, b, _ = leases
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_CLAIM, a.path, str(4 * GIB)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "inside"
        assert not _admitted(b, FREE, 2 * GIB)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert _admitted(b, FREE, 2 * GIB)
    # Its slot is taken again rather than a new one appended.
    lock = os.open(gpu_lease.memory_lock_path(a), os.O_RDWR)
    try:
        with _phase(a, ALLOCATE, GIB), memory_claims.mutex(lock):
            assert [(c.kind, c.declared) for c in memory_claims.live(lock)] == [(ALLOCATE, GIB)]
            assert memory_claims._slots_used(lock) == 1
    finally:
        os.close(lock)


def test_an_unknown_rule_is_refused(leases):
    with pytest.raises(ValueError, match="expected one of bytes, kinds"):
        with _phase(leases[0], FREE, 0, rule="sizes"):
            pass
