"""Helpers the patches share: wrapping a method, raw device memory, the lm_head and a deferred action.

Every patch goes through wrap or replace, whose functions print REACHED (stderr: the server log) at the
first call in a process: a mutant whose patched code no test ever reached is not applied, neither
killed nor survived (tests/core/verdict.py).
"""

import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from . import REACHED

KiB = 1 << 10
MiB = 1 << 20
_state: dict[str, Any] = {"mutant": None, "reached": False, "fd": None}


def applying(name: str) -> None:
    """The mutant whose patches are about to be applied: their first call prints its REACHED line."""
    _state["mutant"], _state["reached"] = name, False


def announce_on(fd: int | None) -> None:
    """Print REACHED to this file descriptor instead of sys.stderr: for a process whose stderr a test
    captures at the time (the engine tier's pytest, which drops a passing test's output)."""
    _state["fd"] = fd


def _reached() -> None:
    if not _state["reached"]:
        _state["reached"] = True
        line = REACHED.format(name=_state["mutant"], pid=os.getpid())
        if _state["fd"] is not None:
            os.write(_state["fd"], (line + "\n").encode())
        else:
            print(line, file=sys.stderr, flush=True)


def announcing(function: Callable) -> Callable:
    """function, printing the mutant's REACHED line at its first call (a coroutine function stays one:
    vLLM awaits AsyncLLM's methods)."""
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def announced(*args, **kwargs):
            _reached()
            return await function(*args, **kwargs)
    else:

        @functools.wraps(function)
        def announced(*args, **kwargs):
            _reached()
            return function(*args, **kwargs)

    return announced


def replace(owner, attr: str, function: Callable) -> None:
    """owner.attr = function."""
    setattr(owner, attr, announcing(function))


def wrap(owner, attr: str, make: Callable) -> None:
    """owner.attr = make(original)."""
    replace(owner, attr, make(getattr(owner, attr)))


def after(owner, attr: str, action: Callable, nth: int | None = None) -> None:
    """owner.attr calls action(self) after the original: on every call, or on the nth call only. For
    the worker's methods, which vLLM calls by keyword through collective_rpc."""
    calls = []

    def make(original):
        def method(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            calls.append(1)
            if nth is None or len(calls) == nth:
                action(self)
            return result

        return method

    wrap(owner, attr, make)


def device_alloc(size: int):
    """size bytes of device memory from cudaMalloc, outside PyTorch's caching allocator and the CuMem
    pools: NVML shows exactly these bytes, and no sleep or empty_cache releases them."""
    from vllm.device_allocator.cumem import libcudart

    return libcudart.cudaMalloc(size)


def device_free(pointer) -> None:
    from vllm.device_allocator.cumem import libcudart

    libcudart.cudaFree(pointer)


def lm_head(worker):
    """The output projection's weight tensor of the model a GPU worker serves (Qwen3ForCausalLM)."""
    return worker.model_runner.model.lm_head.weight.data


class Deferred:
    """An action run `delay_s` after schedule(), or at once by flush(): never twice, never concurrently."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self._action: Callable[[], None] | None = None
        self._timer: threading.Timer | None = None

    def schedule(self, action: Callable[[], None]) -> None:
        self.flush()
        with self._lock:
            self._action = action
            timer = self._timer = threading.Timer(self.delay_s, self.flush)
            timer.daemon = True
            timer.start()

    def flush(self) -> None:
        with self._lock:
            action, self._action = self._action, None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if action is not None:
                action()
