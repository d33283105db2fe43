"""The fake server's host-memory process (run as a script, standard library only).

It holds the pinned host blocks the fake engine allocates (fake_host_memory.py) as shared anonymous
pages, which /proc/<pid>/status books under RssShmem and VmRSS, where the driver books vLLM's pinned
pages (tests/core/host_memory.py), so the host-memory class measures this process as it
measures vLLM's. It answers "ready" once started, then takes one command a line on stdin:
"alloc <bytes>" maps and touches that many bytes and answers "ok" (the bytes are resident when the
answer comes); end of input ends the process. Blocks are never freed: PyTorch's caching host
allocator keeps a freed pinned block until the process ends.
"""

import mmap
import sys


def main() -> int:
    blocks = []
    print("ready", flush=True)  # started: the parent's first reading of this process is its baseline
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command != "alloc" or not argument.isdigit():
            print(f"error: expected 'alloc <bytes>', got {line.strip()!r}", flush=True)
            continue
        block = mmap.mmap(-1, int(argument))  # anonymous and MAP_SHARED: shmem pages
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1  # a mapped page counts once it is touched
        blocks.append(block)
        print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
