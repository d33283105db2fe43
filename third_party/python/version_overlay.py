"""The pins another vLLM release needs on top of the CPU venv, for the engine tier on that release.

    python3 version_overlay.py requirements.lock /tmp/full-0.25.0.lock > /tmp/overlay.txt
    python3 add_hashes.py /tmp/overlay.txt >> vllm-0.25.0.overlay.lock   (after its header)

/tmp/full-<v>.lock is pip-compile's lock of requirements.in with the vllm pin changed to <v>. The
overlay is every pin that differs from requirements.lock, less the GPU kernel packages: the engine
tier runs vLLM's scheduling and bookkeeping on a CPU and never loads them, and they are most of the
download (flashinfer-cubin alone is 458 MB for 0.25.0).
"""

import re
import sys

GPU_ONLY = re.compile(r"^(flashinfer-|nvidia-|cuda-tile|quack-kernels|tokenspeed-mla|humming-kernels)")
_PIN = re.compile(r"^(([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?)==(\S+)")


def pins(text: str) -> dict[str, tuple[str, str]]:
    """normalised name -> (name as written, version), from a pip-compile lock."""
    out = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            out[re.sub(r"[-_.]+", "-", match.group(2)).lower()] = (match.group(2), match.group(3))
    return out


def overlay(base_text: str, release_text: str) -> list[str]:
    base = pins(base_text)
    return [f"{written}=={version}" for name, (written, version) in pins(release_text).items()
            if base.get(name, ("", ""))[1] != version and not GPU_ONLY.match(name)]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: version_overlay.py BASE_LOCK RELEASE_LOCK")
    with open(sys.argv[1]) as base, open(sys.argv[2]) as release:
        print("\n".join(overlay(base.read(), release.read())))
