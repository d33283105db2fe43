"""An RL trainer beside the server: a process of its own that holds checkpoints' weights on the GPU and
hands out CUDA-IPC handles to them, as verl's and NeMo-RL's training workers do before a push.

The test process itself never touches CUDA: the trainer is a process of its own that answers one JSON
line per request on a socket. It holds each checkpoint's tensors for its whole life, so the handles it
gave stay valid while a server opens them; it holds nothing else. Its GPU memory is taken inside the
client's ALLOCATE memory phase (a GPU neighbour's sleep must not see it).

Each trainer is forked from one image per test process (`python -m` this module), which imported torch
once and never starts CUDA, so each trainer makes a CUDA context of its own: importing torch is most of a
trainer's CPU, and a walk shard starts a trainer per walk (docs/design.md, "Where the time goes", has
the figures).

Two payloads per checkpoint: `ipc` for the suite's worker extension (tools/launcher/weight_receiver.py
load_ipc_tensors) and `native` for vLLM's own IPC weight-transfer engine (its update_info, with the
handles pickled as its HTTP transport sends them: vllm/distributed/weight_transfer/ipc_engine.py
_do_send).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import traceback
from typing import Protocol

import psutil

from tools.launcher.memory_budget import TRAINER_CONTEXT
from tools.launcher.zygote_client import ForeignProcess

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


class TrainerImage:
    """The process this test process's trainers are forked from: it imports torch and the receiver's
    module once, then forks a trainer for each socket it is sent. It exits when the test process closes
    its end (at exit, too). It reaps its trainers, so their CPU counts in its children's (cpu_s); the test
    waits for each on a pidfd."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._control = ours
        self._proc: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()],
            env=env,
        )
        theirs.close()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def fork(self) -> socket.socket:
        """A socket to a trainer forked from the image, which says its PID in its first line."""
        if self._proc is None:
            raise TrainerError("the trainer image was closed: no trainer can be forked from it")
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self._control, [b"fork"], [theirs.fileno()])
        except OSError as e:
            ours.close()
            raise TrainerError(f"the trainer image ({self._proc.poll()}) took no fork request: {e}") from None
        finally:
            theirs.close()
        return ours

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        self._control.close()  # the image's end reads nothing more, and it exits
        try:
            proc.wait(timeout=ANSWER_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def cpu_s(self) -> float:
        """CPU seconds of the image and of the trainers it reaped, while it runs (else 0)."""
        if self._proc is None:
            return 0.0
        try:
            t = psutil.Process(self._proc.pid).cpu_times()
        except psutil.NoSuchProcess:
            return 0.0
        return t.user + t.system + t.children_user + t.children_system


_image: TrainerImage | None = None


def image_cpu_s() -> float:
    """CPU seconds of this test process's trainer image and its trainers (0 where none started): the test
    process's own children's CPU leaves them out until the image exits."""
    return 0.0 if _image is None else _image.cpu_s()


def image() -> TrainerImage:
    """This test process's trainer image, started with its first trainer."""
    global _image
    if _image is None:
        _image = TrainerImage()
        atexit.register(_image.close)
    return _image


class TrainerProcess:
    """A trainer forked from the test process's image at once: the image's imports (torch's takes seconds)
    run beside the test the first time, and only the trainer's CUDA context and the checkpoints' tensors
    wait for the first push, inside an ALLOCATE phase; its exit, which frees them, holds a RELEASE phase
    (phases: the client's)."""

    def __init__(self, phases: MemoryPhases) -> None:
        self._phases = phases
        self._held: dict[str, dict] = {}
        self._channel: socket.socket | None = image().fork()
        self._proc: ForeignProcess | None = None

    def child(self) -> ForeignProcess:
        """The trainer's process, once it said its PID (it does so first, after the image's imports)."""
        if self._proc is None:
            if self._channel is None:
                raise TrainerError("the trainer was closed: a push after close() has no trainer to come from")
            channel, self._channel = self._channel, None
            stdin, stdout = channel.makefile("w"), channel.makefile("r")
            channel.close()  # the files keep the socket open
            line = stdout.readline()
            if not line:
                raise TrainerError("the trainer image forked no trainer (it exited): see its stderr above")
            self._proc = ForeignProcess(json.loads(line)["pid"], None, stdin, stdout)
        return self._proc

    def _hold(self, checkpoint: str) -> dict:
        if checkpoint not in self._held:
            proc = self.child()
            if not self._held:
                # Apart from the checkpoint: each declares its own size (memory_budget TRAINER_CONTEXT), so a
                # neighbour's sleep may overlap one of them where it could not overlap both.
                with self._phases.allocation(TRAINER_CONTEXT):
                    self._ask(proc, {"context": True}, "creating its CUDA context")
            with self._phases.allocation("trainer"):
                self._held[checkpoint] = self._ask(proc, {"hold": checkpoint}, f"loading {checkpoint}")
        return self._held[checkpoint]

    @staticmethod
    def _ask(proc: ForeignProcess, request: dict, doing: str) -> dict:
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
        if self._channel is None and self._proc is None:
            return
        try:
            proc = self.child()
        except TrainerError:  # nothing was forked, so nothing holds memory
            return
        self._proc = None
        # Until it has exited: its tensors and CUDA context go with it, which a neighbour's exclusive
        # window reading device-wide bytes must not see.
        with self._phases.release("trainer"):
            stdin, stdout = _pipes(proc)
            stdin.close()  # end of input: the child exits, releasing its tensors
            stdout.close()
            try:
                proc.wait(timeout=ANSWER_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


def _pipes(proc: ForeignProcess):
    """The trainer's socket, as the file it reads and the file it answers on."""
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


def _serve(requests, answers) -> None:
    """The trainer: answers each request line until the test closes its end."""
    import torch

    device = None
    held: list = []
    for line in requests:
        request = json.loads(line)
        try:
            if device is None:  # the CUDA context: an allocation, so inside the phase the request came in
                device = torch.device("cuda", torch.cuda.current_device())
                held.append(torch.empty(1, device=device))  # created now, not at the first checkpoint
            answer = {} if request.get("context") else _payloads(request["hold"], device, held)
        except Exception as e:  # noqa: BLE001  reported to the test, which raises TrainerError
            answer = {"error": f"{type(e).__name__}: {e}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def _trainer(channel: socket.socket) -> int:
    """In a child forked from the image: says its PID, then serves the test on channel."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    requests, answers = channel.makefile("r"), channel.makefile("w")
    channel.close()
    try:
        answers.write(json.dumps({"pid": os.getpid()}) + "\n")
        answers.flush()
        _serve(requests, answers)
        return 0
    except BrokenPipeError:  # the test went away: nothing is left to answer
        return 0
    except BaseException:
        traceback.print_exc()
        return 1


def _reap(signum, frame) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def main(control_fd: int) -> None:
    import torch  # once, for every trainer forked below, each of which makes its own CUDA context

    import tools.launcher.weight_receiver  # noqa: F401  the same: _payloads' import then costs nothing

    if torch.cuda.is_initialized():  # a fork would share it, which CUDA does not allow
        raise SystemExit("the trainer image initialised CUDA while importing: its trainers could not fork")
    signal.signal(signal.SIGCHLD, _reap)  # the test waits on pidfds; reaping adds their CPU to this one's
    control = socket.socket(fileno=control_fd)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 16, 1)
        if not message:  # the test process closed its end: no more trainers
            return
        pid = os.fork()
        if pid == 0:
            control.close()
            code = 1
            try:
                code = _trainer(socket.socket(fileno=fds[0]))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(fds[0])


if __name__ == "__main__":
    main(int(sys.argv[1]))
