"""The worker half of an RL trainer's weight push: a vLLM worker extension (`--worker-extension-cls`).

RL frameworks do not push new weights with `reload_weights` from disk: they install a class into vLLM's
workers (vLLM's `worker_extension_cls` mixes it into the Worker, so `collective_rpc(method)` reaches its
methods with the worker as `self`) and hand the worker tensors, which it feeds to the model's own
`load_weights`. Two ways, each as the frameworks write it:

  * load_checkpoint_tensors: tensors made inside the engine's process and handed to `model.load_weights`
    (TRL colocate's step, huggingface/trl f2cd577 trl/generation/vllm_generation.py:387-392
    `_push_param_to_vllm`, where the trainer and the engine share a process; here the worker reads the
    checkpoint's safetensors onto its device first).
  * load_ipc_tensors: CUDA-IPC handles of tensors a separate trainer process holds on the GPU, rebuilt
    with torch's `rebuild_cuda_tensor` and fed to `model.load_weights` (verl's
    `vLLMColocateWorkerExtension.update_weights_from_ipc`, NeMo-RL's `update_weights_via_ipc_zmq`,
    OpenRLHF's `update_weight_cuda_ipc`; the handles come through collective_rpc's kwargs here, as
    vLLM's own IPC weight-transfer engine sends them over HTTP: base64 of a pickle).

Neither goes through `reload_weights`, so neither moves the model config's path: a later
`reload_weights()` without a path loads what the server started on (the TRL bug class). The tensors a
push allocates outside vLLM's CuMem pools are given back to the device before the call answers, and the
host memory a checkpoint read staged its tensors in is given back to the system (give_back_host_memory),
so the server's device and host bytes after a push are what they were before it: the walk bounds both by
state, and a stand-in trainer's leftovers are not vLLM's.
"""

from __future__ import annotations

import base64
import glob
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def checkpoint_tensors(checkpoint: str, device: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor on `device`) of every tensor in the checkpoint directory's safetensors files, in file
    and key order: what a trainer that holds the checkpoint's weights hands over. Read one tensor at a time
    from the mmapped file, as vLLM's own loader reads a checkpoint (weight_utils.safetensors_weights_iterator:
    safe_open on the CPU, get_tensor per name), so that a push stages no more host memory than the server's
    own disk reload does (a whole-file read, safetensors' load_file, put every walk step after a tensor push
    over the walk's host band on the GPU). The files are looked up at once, so a wrong path fails the call."""
    files = sorted(glob.glob(os.path.join(checkpoint, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {checkpoint}: push a checkpoint directory the server can read")
    return _streamed(files, device)


def _streamed(files: list[str], device: Any) -> Iterator[tuple[str, Any]]:
    from safetensors import safe_open

    for path in files:
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name).to(device)


def load_counted(model: Any, weights: Iterable[tuple[str, Any]], synchronize: Callable[[], None]) -> int:
    """Feeds `weights` (a list or a stream) to model.load_weights and returns how many parameters the model
    reports loaded, or how many tensors it took when it reports none."""
    taken = 0

    def counted() -> Iterator[tuple[str, Any]]:
        nonlocal taken
        for item in weights:
            taken += 1
            yield item

    loaded = model.load_weights(weights=counted())
    synchronize()
    return len(loaded) if loaded is not None else taken


def give_back_host_memory() -> None:
    """Returns the freed heap pages of this process to the system. A checkpoint read stages each tensor in
    host memory; once glibc's malloc has raised its mmap threshold (any long-lived process has), tensors
    below it come from the heap, and their pages stay in the process's RSS after they are freed, until
    malloc_trim (on the GPU they put every walk step after a tensor push over the walk's host band)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    libc = ctypes.util.find_library("c")
    if libc:
        trim = getattr(ctypes.CDLL(libc), "malloc_trim", None)  # glibc's; other C libraries have none
        if trim is not None:
            trim(0)


def encode_handles(handles: list[tuple[str, tuple]]) -> str:
    """What crosses collective_rpc's JSON: (name, rebuild_cuda_tensor args) pairs, pickled, base64."""
    return base64.b64encode(pickle.dumps(handles)).decode("ascii")


def decode_handles(payload: str) -> list[tuple[str, tuple]]:
    return pickle.loads(base64.b64decode(payload))


class WeightReceiver:
    """Mixed into vLLM's Worker (self.model_runner, self.device are the worker's)."""

    def _sleepwake_load(self, weights: Iterable[tuple[str, Any]]) -> int:
        import torch

        # The model the runner serves (a CUDA-graph wrapper forwards load_weights to it), as every framework
        # reaches it: worker.model_runner.model.load_weights(weights=...).
        model = self.model_runner.model  # type: ignore[attr-defined]
        return load_counted(model, weights, torch.accelerator.synchronize)

    def load_checkpoint_tensors(self, checkpoint: str) -> int:
        """Loads the checkpoint's tensors, made on this worker's device, through the model's load_weights;
        returns how many parameters the model reports loaded."""
        import torch

        weights = checkpoint_tensors(checkpoint, self.device)  # type: ignore[attr-defined]
        try:
            return self._sleepwake_load(weights)
        finally:
            del weights
            torch.accelerator.empty_cache()
            give_back_host_memory()

    def load_ipc_tensors(self, handles: str) -> int:
        """Rebuilds a trainer's tensors from their CUDA-IPC handles (encode_handles) on this worker's device
        and loads them through the model's load_weights; returns how many parameters it reports loaded."""
        import torch
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        device_index = self.device.index  # type: ignore[attr-defined]
        weights = []
        for name, sent in decode_handles(handles):
            args = list(sent)
            args[6] = device_index  # reduce_tensor's device index is the trainer's; the tensor lives here
            weights.append((name, rebuild_cuda_tensor(*args)))
        try:
            return self._sleepwake_load(weights)
        finally:
            del weights
            torch.cuda.ipc_collect()
            torch.accelerator.empty_cache()
