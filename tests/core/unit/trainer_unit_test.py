"""The trainer child starts with its object and imports torch then, outside any memory phase; its CUDA
context and tensors come with the first push, inside the phase. No GPU here: that push is an error of the
set-up (TrainerError), never a hang or a pass."""

import contextlib
import time

import pytest

from tests.core import trainer


class Phases:
    """The memory phases the trainer asked for (SleepWakeClient.allocation's shape)."""

    def __init__(self):
        self.taken: list[str] = []

    @contextlib.contextmanager
    def allocation(self, what: str):
        self.taken.append(what)
        yield


def test_the_child_runs_from_the_start_and_takes_no_phase_until_a_push():
    phases = Phases()
    t = trainer.TrainerProcess(phases.allocation)
    proc = t._proc
    assert proc is not None and proc.poll() is None
    assert phases.taken == []
    t.close()
    assert proc.wait(timeout=trainer.ANSWER_S) == 0


def test_a_push_takes_the_phase_and_without_a_gpu_is_an_error_of_the_set_up():
    phases = Phases()
    t = trainer.TrainerProcess(phases.allocation)
    start = time.monotonic()
    try:
        with pytest.raises(trainer.TrainerError, match="could not hold"):
            t.ipc_handles("/nonexistent/checkpoint")
    finally:
        t.close()
    assert phases.taken == ["trainer"]
    assert time.monotonic() - start < trainer.ANSWER_S


def test_a_push_after_close_says_so():
    t = trainer.TrainerProcess(Phases().allocation)
    t.close()
    with pytest.raises(trainer.TrainerError, match="closed"):
        t.native_update_info("/nonexistent/checkpoint")
