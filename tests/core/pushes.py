"""The ways an RL trainer pushes new weights into a running server: the weight-sync contract's push axis.

Each way is one implementation of Push, named after what it moves and where it goes; a test takes a way
and asserts the same contract whatever it is (the pushed checkpoint serves its own golden through sleeps,
staged wakes and level-2 cycles). Where a framework pushes each way:

  disk    collective_rpc("reload_weights", weights_path): the checkpoint read from disk by the workers
          (vLLM's RLHF examples; the path becomes the model path). No RL framework pushes this way.
  tensor  tensors handed to the model's load_weights inside the engine's process: TRL colocate
          (trl/generation/vllm_generation.py:387-392 `_push_param_to_vllm`: llm.llm_engine.model_executor
          .driver_worker.model_runner.model.load_weights) on the door that holds the engine in-process; through
          the worker extension (tools/launcher/weight_receiver.py) on a door whose engine has its own process.
  ipc     CUDA-IPC handles of a separate trainer process's tensors, rebuilt by the worker extension and fed
          to load_weights (verl's update_weights_from_ipc, NeMo-RL's update_weights_via_ipc_zmq, OpenRLHF's
          update_weight_cuda_ipc).
  native  vLLM's own weight-transfer API with its IPC backend (start_weight_update, update_weights,
          finish_weight_update; vllm/distributed/weight_transfer/ipc_engine.py), new in 0.26.0.

A way a cell cannot take says why (Push.unavailable): never a pass.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from tests.core.trainer import Trainer

DISK, TENSOR, IPC, NATIVE = "disk", "tensor", "ipc", "native"
WAYS = (DISK, TENSOR, IPC, NATIVE)
# The door that holds vLLM's engine in its own process, as TRL colocate builds vllm.LLM (tools/matrix.bzl).
IN_PROCESS_DOOR = "llm_colocate"
# The suite's worker extension's methods (tools/launcher/weight_receiver.py).
LOAD_TENSORS = "load_checkpoint_tensors"
LOAD_IPC = "load_ipc_tensors"


class Client(Protocol):
    """What a push needs of the suite's client (lib/client.py SleepWakeClient)."""

    def reload_weights(self, weights_path: str | None = None) -> dict: ...
    def collective_rpc(self, method: str, kwargs: dict | None = None) -> list: ...
    def load_weights_in_process(self, checkpoint: str) -> dict: ...
    def weight_transfer(self, route: str, body: dict | None = None) -> dict: ...


class Push(Protocol):
    @property
    def name(self) -> str:
        """The way's name (WAYS), in test ids and messages."""
        ...

    def push(self, client: Client, checkpoint: str) -> None:
        """Moves the checkpoint's weights into the server's weights pool (which must be awake)."""
        ...


@dataclasses.dataclass(frozen=True)
class DiskReload:
    name: str = DISK

    def push(self, client: Client, checkpoint: str) -> None:
        client.reload_weights(checkpoint)


@dataclasses.dataclass(frozen=True)
class TensorLoad:
    door: str
    name: str = TENSOR

    def push(self, client: Client, checkpoint: str) -> None:
        if self.door == IN_PROCESS_DOOR:
            client.load_weights_in_process(checkpoint)
        else:
            client.collective_rpc(LOAD_TENSORS, {"checkpoint": checkpoint})


@dataclasses.dataclass(frozen=True)
class IpcPush:
    trainer: Trainer
    name: str = IPC

    def push(self, client: Client, checkpoint: str) -> None:
        client.collective_rpc(LOAD_IPC, {"handles": self.trainer.ipc_handles(checkpoint)})


@dataclasses.dataclass(frozen=True)
class NativePush:
    """vLLM's own API over HTTP, as IPCWeightTransferEngine.trainer_send_weights sends it in its "http" mode
    (vllm/distributed/weight_transfer/ipc_engine.py _do_send; the caller starts and finishes the update):
    start, one update with every tensor, finish."""

    trainer: Trainer
    name: str = NATIVE

    def push(self, client: Client, checkpoint: str) -> None:
        client.weight_transfer("start_weight_update")
        client.weight_transfer("update_weights", {"update_info": self.trainer.native_update_info(checkpoint)})
        client.weight_transfer("finish_weight_update")


def way(name: str, door: str, trainer: Trainer) -> Push:
    if name == DISK:
        return DiskReload()
    if name == TENSOR:
        return TensorLoad(door)
    if name == IPC:
        return IpcPush(trainer)
    if name == NATIVE:
        return NativePush(trainer)
    raise ValueError(f"unknown push way {name!r}; the ways are {WAYS}")
