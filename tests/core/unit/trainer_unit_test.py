"""The trainer starts with its object, forked from the test process's image, which imported torch once,
outside any memory phase; its CUDA context comes with the first push, and each checkpoint's tensors with
the first push of it, each inside an ALLOCATE phase of its own, and they go with its exit, inside a
RELEASE phase. No GPU here: that push is an error of the set-up (TrainerError), never a hang or a pass."""

import contextlib
import time

import psutil
import pytest

from tests.core import trainer
from tools.launcher import process_tree


class Phases:
    """The memory phases the trainer asked for (trainer.MemoryPhases, as SleepWakeClient has them), with
    whether the child was still running inside each."""

    def __init__(self):
        self.taken: list[str] = []
        self.child = None  # the trainer's child process, once the test knows it

    @contextlib.contextmanager
    def allocation(self, what: str):
        self.taken.append("allocate " + what)
        yield
        self.taken.append("allocated")

    @contextlib.contextmanager
    def release(self, what: str):
        self.taken.append("release " + what)
        yield
        running = self.child is not None and self.child.poll() is None
        self.taken.append("released, child running" if running else "released")


def test_the_child_runs_from_the_start_and_takes_no_phase_until_a_push():
    phases = Phases()
    t = trainer.TrainerProcess(phases)
    proc = t.child()
    assert proc.poll() is None
    assert phases.taken == []
    t.close()
    assert proc.poll() is not None


def test_the_trainers_of_a_test_process_are_forked_from_one_image():
    """torch is imported once per test process, not once per trainer (docs/design.md: most of a trainer's
    CPU), and each trainer is a process of its own, whose exit frees what it held."""
    first, second = trainer.TrainerProcess(Phases()), trainer.TrainerProcess(Phases())
    try:
        pids = [first.child().pid, second.child().pid]
        parents = {psutil.Process(pid).ppid() for pid in pids}
    finally:
        first.close()
        second.close()
    assert len(set(pids)) == 2
    assert parents == {trainer.image().pid}
    assert not any(process_tree.alive(pid) for pid in pids)
    assert trainer.image_cpu_s() > 0  # the test's cpu record adds it (tests/sleep_wake/conftest.py)


def test_its_exit_frees_inside_a_release_phase_which_ends_once_the_child_is_gone():
    """What the child held leaves with it: a neighbour's exclusive window, reading device-wide bytes, must
    not see it go (on a GPU, an immediacy window read a trainer's exit as memory its sleep freed)."""
    phases = Phases()
    t = trainer.TrainerProcess(phases)
    phases.child = t.child()
    t.close()
    t.close()  # once only
    assert phases.taken == ["release trainer", "released"]


def test_a_push_takes_the_phase_and_without_a_gpu_is_an_error_of_the_set_up():
    phases = Phases()
    t = trainer.TrainerProcess(phases)
    start = time.monotonic()
    try:
        with pytest.raises(trainer.TrainerError, match="failed creating its CUDA context"):
            t.ipc_handles("/nonexistent/checkpoint")
    finally:
        t.close()
    assert phases.taken == ["allocate trainer:context", "release trainer", "released"]
    assert time.monotonic() - start < trainer.ANSWER_S


def test_a_push_after_close_says_so():
    t = trainer.TrainerProcess(Phases())
    t.close()
    with pytest.raises(trainer.TrainerError, match="closed"):
        t.native_update_info("/nonexistent/checkpoint")


def test_the_context_and_each_checkpoint_load_inside_a_phase_of_their_own(monkeypatch):
    """Each declares its own size under the rule bytes (memory_budget), so a neighbour's sleep may overlap
    one where it could not overlap the context and a checkpoint together; a checkpoint held is not loaded
    again."""
    phases = Phases()
    t = trainer.TrainerProcess(phases)

    def ask(proc, request, doing):
        phases.taken.append("ask " + ("context" if request.get("context") else request["hold"]))
        return {"ipc": "handles of " + request.get("hold", ""), "native": {}}

    monkeypatch.setattr(t, "_ask", ask)
    try:
        assert t.ipc_handles("A") == "handles of A"
        assert t.ipc_handles("B") == "handles of B"
        assert t.ipc_handles("A") == "handles of A"
    finally:
        t.close()
    assert phases.taken == [
        "allocate trainer:context",
        "ask context",
        "allocated",
        "allocate trainer",
        "ask A",
        "allocated",
        "allocate trainer",
        "ask B",
        "allocated",
        "release trainer",
        "released",
    ]
