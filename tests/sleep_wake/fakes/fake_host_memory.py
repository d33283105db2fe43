"""Pinned host memory of the fake server: PyTorch's caching host allocator as vLLM's level-1 sleep uses
it (vllm/device_allocator/cumem.py CuMemAllocator.sleep: one torch.empty(size, pin_memory=True) per
allocation of the weights pool, dropped again by wake_up), held by a real child process.

The allocator rounds every block up to a power of two and keeps a freed block cached for the next
allocation of its size, never giving it back (vLLM 0.24.0-0.26.0 never empty that cache: the known
divergence host_copy_cached_after_wake). The blocks live in host_memory_child.py's process, so
VllmServer.pids() names a process whose /proc counters move as vLLM's engine process's do.
"""

import collections
import os
import subprocess
import sys
import threading

_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_memory_child.py")
_STOP_S = 10.0


class HostProcess:
    """The child process holding the blocks; alloc() returns once the bytes are resident."""

    def __init__(self):
        # -I -S: no site-packages and no PYTHON* variables, so the process holds little besides the blocks.
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None  # both asked for: PIPE
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        self._lock = threading.Lock()
        if self._stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError(
                f"the fake's host-memory process ({_CHILD}) did not start: exit code {self._proc.poll()}"
            )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alloc(self, size: int) -> None:
        with self._lock:
            try:
                self._stdin.write(f"alloc {size}\n")
                self._stdin.flush()
                answer = self._stdout.readline().strip()
            except (BrokenPipeError, ValueError):
                answer = ""
        if answer != "ok":
            raise RuntimeError(
                f"the fake's host-memory process (pid {self.pid}) did not allocate {size} "
                f"bytes: {answer or 'it exited, exit code ' + str(self._proc.poll())}"
            )

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._stdin.close()  # end of input ends the child
            try:
                self._proc.wait(_STOP_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stdout.close()


class PinnedHostMemory:
    """The caching host allocator; `process` holds the bytes (None: they are only counted, for the
    engine's unit tests)."""

    def __init__(self, process: HostProcess | None = None):
        self.process = process
        self.cached: collections.Counter[int] = collections.Counter()  # free blocks by size, still resident
        self.resident = 0  # every block ever allocated: none is given back

    def allocate(self, size: int) -> int:
        """A pinned block of at least `size` bytes (its size, the handle free() takes)."""
        block = 1 << max(size - 1, 0).bit_length()
        if self.cached[block]:
            self.cached[block] -= 1
            return block
        if self.process is not None:
            self.process.alloc(block)
        self.resident += block
        return block

    def free(self, block: int) -> None:
        self.cached[block] += 1

    def pids(self) -> list[int]:
        return [self.process.pid] if self.process is not None else []
