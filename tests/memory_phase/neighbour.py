"""A GPU neighbour for sleep_assert_gpu_test: a torch process that allocates `bytes` on its GPU while a
server's sleep holds the GPU's FREE memory phase, either ignoring the phases (--rule none: the rule broken
on purpose) or inside an ALLOCATE phase declaring its size (--rule bytes). It prints one JSON line: whether
its first attempt at its phase, made inside the sleep's window, was refused, and whether the sleep's
phase was held when the allocation began and when it had landed.

It moves once the sleep has begun freeing (device-wide free memory rose while the phase was held), not
when the phase appears: vLLM's Worker.sleep reads its free-memory baseline before it frees anything, so an
allocation landing between the phase and that read is in the baseline and cannot trip vLLM's check.

    python -m tests.memory_phase.neighbour --lock LOCK --bytes N --rule none|bytes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable

from tools.launcher import gpu_lease, memory_claims
from tools.launcher.errors import LeaseTimeoutError

# cudaMemGetInfo counts whole pages: a rise of one 2 MiB page is the sleep releasing memory, not noise,
# on a GPU the test holds alone.
RISE_BYTES = 2 << 20


def _sleep_inside(fd: int) -> bool:
    return gpu_lease._held_by_others(fd, gpu_lease._INSIDE[gpu_lease.FREE])


def released_while_held(inside: Callable[[], bool], free_bytes: Callable[[], int]) -> bool:
    """Polls without pause (a sleep frees for 0.1-0.3 s) until device-wide free memory has risen by
    RISE_BYTES over its value at the call while the sleep's phase is held: True then, False once the phase
    ended first (the sleep freed nothing the neighbour could see)."""
    base = free_bytes()
    while inside():
        if free_bytes() >= base + RISE_BYTES:
            return True
    return False


def _allocate_phase(args, timeout_s: float):
    return gpu_lease.memory_phase_at(
        args.lock, gpu_lease.ALLOCATE, timeout_s, what="neighbour", declared=args.bytes, rule=args.rule
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", required=True, help="the GPU's memory lock file (gpu_lease.memory_lock_path)")
    parser.add_argument("--bytes", type=int, required=True, help="bytes to allocate inside the sleep's window")
    parser.add_argument("--rule", choices=("none",) + memory_claims.RULES, required=True, help="none: take no phase")
    parser.add_argument("--timeout_s", type=float, default=120.0, help="seconds to wait for the sleep's phase")
    args = parser.parse_args(argv)

    import torch

    torch.ones(1, device="cuda")  # the CUDA context first, outside any sleep's window
    torch.cuda.synchronize()
    print("ready", flush=True)
    fd = os.open(args.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    deadline = time.monotonic() + args.timeout_s
    while not _sleep_inside(fd):  # a condition, polled without pause: the window lasts 0.1-0.3 s
        if time.monotonic() > deadline:
            print(json.dumps({"error": "no sleep held the FREE phase within %.0f s" % args.timeout_s}), flush=True)
            return 1
    if not released_while_held(lambda: _sleep_inside(fd), lambda: torch.cuda.mem_get_info()[0]):
        print(json.dumps({"error": "the sleep's phase ended before device free memory rose"}), flush=True)
        return 1
    with contextlib.ExitStack() as stack:
        refused = False
        if args.rule != "none":
            # One attempt inside the sleep's window, then a wait: whether the rule let it overlap the sleep.
            try:
                stack.enter_context(_allocate_phase(args, timeout_s=0))
            except LeaseTimeoutError:
                refused = True
                stack.enter_context(_allocate_phase(args, timeout_s=args.timeout_s))
        began_inside = _sleep_inside(fd)
        block = torch.empty(args.bytes, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        landed_inside = _sleep_inside(fd)
    report = {"refused": refused, "began_inside": began_inside, "landed_inside": landed_inside}
    print(json.dumps(report), flush=True)
    sys.stdin.read()  # hold the block until the test is done with the server
    del block
    return 0


if __name__ == "__main__":
    sys.exit(main())
