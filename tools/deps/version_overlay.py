"""The pins another vLLM release needs on top of the CPU venv, for the engine tier on that release.

    python3 -m tools.deps.version_overlay third_party/python/requirements.lock /tmp/full-0.25.0.lock \
        > /tmp/overlay.txt
    python3 -m tools.deps.add_hashes /tmp/overlay.txt >> third_party/python/vllm-0.25.0.overlay.lock  # after its header

/tmp/full-<v>.lock is pip-compile's lock of requirements.in with the vllm pin changed to <v>. The
overlay is every pin that differs from requirements.lock, less the GPU kernel packages: the engine
tier runs vLLM's scheduling and bookkeeping on a CPU and never loads them, and they are most of the
download (flashinfer-cubin alone is 458 MB for 0.25.0).
"""

import re
import sys

from tools.deps.lock_pins import parse_lock

GPU_ONLY = re.compile(r"^(flashinfer-|nvidia-|cuda-tile|quack-kernels|tokenspeed-mla|humming-kernels)")


def overlay(base_text: str, release_text: str) -> list[str]:
    base = parse_lock(base_text)
    return [
        f"{pin.project}=={pin.version}"
        for name, pin in parse_lock(release_text).items()
        if (name not in base or base[name].version != pin.version) and not GPU_ONLY.match(name)
    ]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python3 -m tools.deps.version_overlay BASE_LOCK RELEASE_LOCK")
    with open(sys.argv[1]) as base, open(sys.argv[2]) as release:
        print("\n".join(overlay(base.read(), release.read())))
