"""A push through the suite's worker extension (tools/launcher/weight_receiver.py) on a host without an
accelerator: the extension's own code runs, mixed into the fake worker by vLLM (fakes/worker.py
ExtensionWorker), and only the device calls it makes around the load stand still.

- stand_ins(): torch.accelerator.synchronize / empty_cache and torch.cuda.ipc_collect do nothing (torch
  would look for CUDA), and torch's rebuild_cuda_tensor, the CUDA driver's opening of an IPC handle,
  returns the tensor a handle of ipc_handles() names from its checkpoint's file instead: the extension's
  decoding, device swap and load_weights are its own.
- ipc_handles(checkpoint): the handles a trainer holding the checkpoint would send (encode_handles), each
  naming the checkpoint and a tensor in place of the CUDA memory handle.
- file_tensors(checkpoint): what a push of the checkpoint must load, read from the safetensors file's
  own header and offsets: the expectation from the file, not from any loader the push runs through.
"""

from __future__ import annotations

import contextlib
import functools
import os
from unittest import mock

import torch

from tools.checkpoints import bf16_safetensors
from tools.launcher import weight_receiver

FILE = "model.safetensors"  # the synthetic checkpoints' one file (tools/checkpoints/make_synthetic_model.py)
DEVICE_ARG = 6  # rebuild_cuda_tensor's device index, which the extension sets to its worker's


def file_tensors(checkpoint: str) -> dict[str, str]:
    """Tensor name -> sha256 of its bytes in the checkpoint's file."""
    return bf16_safetensors.tensor_digests(os.path.join(checkpoint, FILE))


@functools.cache
def _tensors(checkpoint: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(checkpoint, FILE))


def ipc_handles(checkpoint: str) -> str:
    """Every tensor of the checkpoint as (name, rebuild arguments), the checkpoint and the name in place of
    the CUDA handle, in load_ipc_tensors' encoding."""
    placeholder = [None] * (DEVICE_ARG + 1)
    return weight_receiver.encode_handles(
        [(name, tuple([checkpoint, name] + placeholder[2:])) for name in sorted(_tensors(checkpoint))]
    )


def _rebuild(checkpoint: str, name: str, *rest):
    return _tensors(checkpoint)[name]


@contextlib.contextmanager
def stand_ins():
    """The device calls of a push stood in for on the CPU (the module docstring)."""
    idle = lambda *a, **k: None  # noqa: E731
    with (
        mock.patch.object(torch.accelerator, "synchronize", idle),
        mock.patch.object(torch.accelerator, "empty_cache", idle),
        mock.patch.object(torch.cuda, "ipc_collect", idle),
        mock.patch("torch.multiprocessing.reductions.rebuild_cuda_tensor", _rebuild),
    ):
        yield
