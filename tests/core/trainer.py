"""An RL trainer beside the server: a process of its own that holds checkpoints' weights on the GPU and
hands out CUDA-IPC handles to them, as verl's and NeMo-RL's training workers do before a push.

The test process itself never touches CUDA: the trainer is a child (`python -m` this module) that
answers one JSON line per request on stdin/stdout. It holds each checkpoint's tensors for its whole
life, so the handles it gave stay valid while a server opens them; it holds nothing else. Its GPU
memory is taken inside the client's ALLOCATE memory phase (a GPU neighbour's sleep must not see it).

Two payloads per checkpoint: `ipc` for the suite's worker extension (tools/launcher/weight_receiver.py
load_ipc_tensors) and `native` for vLLM's own IPC weight-transfer engine (its update_info, with the
handles pickled as its HTTP transport sends them: vllm/distributed/weight_transfer/ipc_engine.py
_do_send).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pickle
import subprocess
import sys
from typing import Protocol

from tools.launcher.memory_budget import TRAINER_CONTEXT

# Seconds a trainer may take for a request: a cold torch import and CUDA start, then a checkpoint read.
ANSWER_S = 180.0


class Trainer(Protocol):
    """What a push that crosses processes asks of the trainer (the fake tier's stand-in implements it too)."""

    def ipc_handles(self, checkpoint: str) -> str:
        """The checkpoint's tensors as the worker extension's load_ipc_tensors takes them."""
        ...

    def native_update_info(self, checkpoint: str) -> dict:
        """The checkpoint's tensors as vLLM's IPC weight-transfer engine's update_info."""
        ...

    def close(self) -> None: ...


class MemoryPhases(Protocol):
    """The memory phases a process beside the server takes on its GPU (SleepWakeClient's)."""

    def allocation(self, what: str) -> contextlib.AbstractContextManager: ...

    def release(self, what: str) -> contextlib.AbstractContextManager: ...


class TrainerError(RuntimeError):
    """The trainer process failed or answered nonsense: an error of the test's set-up, never an oracle."""


class TrainerProcess:
    """The trainer child, started at once: its imports (torch's takes seconds) run beside the test, and
    only its CUDA context and the checkpoints' tensors wait for the first push, inside an ALLOCATE phase;
    its exit, which frees them, holds a RELEASE phase (phases: the client's)."""

    def __init__(self, phases: MemoryPhases) -> None:
        self._phases = phases
        self._held: dict[str, dict] = {}
        self._proc: subprocess.Popen | None = self._start()

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        return subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def _hold(self, checkpoint: str) -> dict:
        if checkpoint not in self._held:
            if self._proc is None:
                raise TrainerError("the trainer was closed: a push after close() has no trainer to come from")
            if not self._held:
                # Apart from the checkpoint: each declares its own size (memory_budget TRAINER_CONTEXT), so a
                # neighbour's sleep may overlap one of them where it could not overlap both.
                with self._phases.allocation(TRAINER_CONTEXT):
                    self._ask(self._proc, {"context": True}, "creating its CUDA context")
            with self._phases.allocation("trainer"):
                self._held[checkpoint] = self._ask(self._proc, {"hold": checkpoint}, f"loading {checkpoint}")
        return self._held[checkpoint]

    @staticmethod
    def _ask(proc: subprocess.Popen, request: dict, doing: str) -> dict:
        stdin, stdout = _pipes(proc)
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise TrainerError(f"the trainer process exited ({proc.poll()}) while {doing}: see its stderr above")
        answer = json.loads(line)
        if "error" in answer:
            raise TrainerError(f"the trainer failed {doing}: {answer['error']}")
        return answer

    def ipc_handles(self, checkpoint: str) -> str:
        return self._hold(checkpoint)["ipc"]

    def native_update_info(self, checkpoint: str) -> dict:
        return dict(self._hold(checkpoint)["native"])

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        # Until it has exited: its tensors and CUDA context go with it, which a neighbour's exclusive
        # window reading device-wide bytes must not see.
        with self._phases.release("trainer"):
            try:
                _pipes(proc)[0].close()  # end of input: the child exits, releasing its tensors
                proc.wait(timeout=ANSWER_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _pipes(proc: subprocess.Popen):
    """The child's stdin and stdout, which _start always opens."""
    if proc.stdin is None or proc.stdout is None:
        raise TrainerError("the trainer process was started without its pipes")
    return proc.stdin, proc.stdout


# --- the child ------------------------------------------------------------------------------------------
def _payloads(checkpoint: str, device, held: list) -> dict:
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    from tools.launcher.weight_receiver import checkpoint_tensors, encode_handles

    tensors = [(name, t.contiguous()) for name, t in checkpoint_tensors(checkpoint, device)]
    held.append(tensors)  # reduce_tensor's handles do not keep the storage alive: the trainer does
    torch.cuda.synchronize()
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    handles = [(name, reduce_tensor(t)[1]) for name, t in tensors]
    native = {
        "names": [name for name, _ in tensors],
        "dtype_names": [str(t.dtype).split(".")[-1] for _, t in tensors],
        "shapes": [list(t.shape) for _, t in tensors],
        "ipc_handles_pickled": base64.b64encode(pickle.dumps([{uuid: args} for _, args in handles])).decode("ascii"),
    }
    return {"ipc": encode_handles(handles), "native": native}


def main() -> None:
    import torch  # before the first request, which comes inside the test's memory phase

    import tools.launcher.weight_receiver  # noqa: F401  the same: _payloads' import then costs nothing

    device = None
    held: list = []
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if device is None:  # the CUDA context: an allocation, so inside the phase the request came in
                device = torch.device("cuda", torch.cuda.current_device())
                held.append(torch.empty(1, device=device))  # created now, not at the first checkpoint
            answer = {} if request.get("context") else _payloads(request["hold"], device, held)
        except Exception as e:  # noqa: BLE001  reported to the test, which raises TrainerError
            answer = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
