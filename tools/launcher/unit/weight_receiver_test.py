"""The worker extension's pushes on the CPU: the tensors a push hands the model's load_weights are the
checkpoint's, every one, by name and value; the IPC payload survives its JSON crossing; the worker's
device bytes are given back (the GPU's own handles are the H200's to prove)."""

import os

import pytest
import torch
from safetensors.torch import save_file

from tools.launcher import weight_receiver


class RecordingModel:
    """What a push sees of vLLM's model: load_weights(weights) -> the names it loaded."""

    def __init__(self):
        self.loaded: dict[str, torch.Tensor] = {}

    def load_weights(self, weights):
        for name, tensor in weights:
            self.loaded[name] = tensor.clone()
        return set(self.loaded)


class Runner:
    def __init__(self):
        self.model = RecordingModel()


class CpuWorker(weight_receiver.WeightReceiver):
    """The extension mixed into a worker with a CPU device, as vLLM mixes it into its Worker."""

    def __init__(self):
        self.model_runner = Runner()
        self.device = torch.device("cpu")


@pytest.fixture
def checkpoint(tmp_path):
    first = {"model.embed_tokens.weight": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)}
    second = {"model.norm.weight": torch.full((4,), 0.5, dtype=torch.bfloat16), "lm_head.weight": torch.ones(2, 4)}
    save_file(first, os.path.join(tmp_path, "model-00001-of-00002.safetensors"))
    save_file(second, os.path.join(tmp_path, "model-00002-of-00002.safetensors"))
    return str(tmp_path), {**first, **second}


def test_a_tensor_push_hands_every_tensor_of_the_checkpoint_to_load_weights(checkpoint, monkeypatch):
    path, tensors = checkpoint
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda: None)
    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)
    worker = CpuWorker()
    assert worker.load_checkpoint_tensors(path) == len(tensors)
    assert sorted(worker.model_runner.model.loaded) == sorted(tensors)
    for name, tensor in tensors.items():
        assert torch.equal(worker.model_runner.model.loaded[name], tensor), name


class StreamCheckingModel:
    """A load_weights that keeps nothing of what it takes and records, at each tensor, how many of the
    tensors handed before it are still alive somewhere (the caller's list, if it made one)."""

    def __init__(self):
        self.alive_before: list[int] = []

    def load_weights(self, weights):
        import weakref

        handed: list[weakref.ref] = []
        for _name, tensor in weights:
            self.alive_before.append(sum(ref() is not None for ref in handed))
            handed.append(weakref.ref(tensor))
            del tensor
        return None


def test_a_push_hands_the_checkpoint_over_one_tensor_at_a_time(checkpoint, monkeypatch):
    # vLLM's own loader streams a checkpoint; a push that stages every tensor first holds the whole
    # checkpoint in host memory at once, which the walk's host band sees on the GPU.
    path, tensors = checkpoint
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda: None)
    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)
    worker = CpuWorker()
    model = StreamCheckingModel()
    worker.model_runner.model = model  # type: ignore[assignment]
    assert worker.load_checkpoint_tensors(path) == len(tensors)  # counted from what load_weights took
    assert model.alive_before == [0] * len(tensors)


def test_a_checkpoint_without_tensors_is_refused_with_its_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        weight_receiver.checkpoint_tensors(str(tmp_path), "cpu")


def test_ipc_handles_cross_json_unchanged():
    handles = [("a.weight", (torch.float32, 1, b"\x00handle", 0, 16, 0, 0)), ("b.bias", (1, 2, 3))]
    payload = weight_receiver.encode_handles(handles)
    assert isinstance(payload, str) and payload.isascii()
    assert weight_receiver.decode_handles(payload) == handles


# A child that reads a checkpoint of 4 MiB tensors as a push stages them (a copy each, the staged one freed),
# after the malloc state of a long-lived process (a freed 16 MiB mmap raises glibc's mmap threshold), and
# prints its RSS growth in MiB with and without give_back_host_memory.
_STAGED_READ = """
import sys, torch
from tools.launcher import weight_receiver
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) >> 10
bump = bytearray(16 << 20); del bump
before = rss()
moved = [t.clone() for _, t in weight_receiver.checkpoint_tensors(sys.argv[1], "cpu")]
del moved
if sys.argv[2] == "give_back":
    weight_receiver.give_back_host_memory()
print(rss() - before)
"""


def _growth_mib(path: str, how: str) -> int:
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", _STAGED_READ, path, how], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_a_push_gives_the_host_memory_it_staged_back(tmp_path):
    save_file(
        {f"w{i}": torch.ones(1024, 2048, dtype=torch.bfloat16) for i in range(32)},
        os.path.join(tmp_path, "model.safetensors"),
    )
    kept = _growth_mib(str(tmp_path), "keep")
    if kept < 24:
        pytest.skip(f"this C library returned the staged pages by itself ({kept} MiB kept): nothing to give back")
    assert _growth_mib(str(tmp_path), "give_back") < 8, f"without give_back_host_memory {kept} MiB stayed"
