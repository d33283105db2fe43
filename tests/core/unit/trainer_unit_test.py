"""The trainer child starts with its object and imports torch then, outside any memory phase; its CUDA
context and tensors come with the first push, inside an ALLOCATE phase, and go with its exit, inside a
RELEASE phase. No GPU here: that push is an error of the set-up (TrainerError), never a hang or a pass."""

import contextlib
import time

import pytest

from tests.core import trainer


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

    @contextlib.contextmanager
    def release(self, what: str):
        self.taken.append("release " + what)
        yield
        running = self.child is not None and self.child.poll() is None
        self.taken.append("released, child running" if running else "released")


def test_the_child_runs_from_the_start_and_takes_no_phase_until_a_push():
    phases = Phases()
    t = trainer.TrainerProcess(phases)
    proc = t._proc
    assert proc is not None and proc.poll() is None
    assert phases.taken == []
    t.close()
    assert proc.wait(timeout=trainer.ANSWER_S) == 0


def test_its_exit_frees_inside_a_release_phase_which_ends_once_the_child_is_gone():
    """What the child held leaves with it: a neighbour's exclusive window, reading device-wide bytes, must
    not see it go (on a GPU, an immediacy window read a trainer's exit as memory its sleep freed)."""
    phases = Phases()
    t = trainer.TrainerProcess(phases)
    phases.child = t._proc
    t.close()
    t.close()  # once only
    assert phases.taken == ["release trainer", "released"]


def test_a_push_takes_the_phase_and_without_a_gpu_is_an_error_of_the_set_up():
    phases = Phases()
    t = trainer.TrainerProcess(phases)
    start = time.monotonic()
    try:
        with pytest.raises(trainer.TrainerError, match="could not hold"):
            t.ipc_handles("/nonexistent/checkpoint")
    finally:
        t.close()
    assert phases.taken == ["allocate trainer", "release trainer", "released"]
    assert time.monotonic() - start < trainer.ANSWER_S


def test_a_push_after_close_says_so():
    t = trainer.TrainerProcess(Phases())
    t.close()
    with pytest.raises(trainer.TrainerError, match="closed"):
        t.native_update_info("/nonexistent/checkpoint")
