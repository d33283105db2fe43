"""Which vLLM release a server runs, and the releases the suite supports.

The server says (GET /version, {"version": "..."} in every supported release); the GPU toolchain's
identity file (SLEEPWAKE_VLLM_IDENTITY, a cache-key input) names the installed one. The two must agree.
"""

import re

from tools.matrix import RELEASES

# The releases thresholds.KNOWN_DIVERGENCES was checked against (their source, and on the H200:
# docs/oracles.md, "Known divergences").
SUPPORTED = RELEASES


class ReleaseMismatchError(RuntimeError):
    """The server runs another vLLM than the toolchain's identity names."""


def public(version: str) -> str:
    """The public release of a version string: "0.26.0+cu129" -> "0.26.0"."""
    return version.strip().split("+", 1)[0]


def from_identity(identity: str | None) -> str | None:
    """The vLLM version in an identity file's "vllm: <version> record-sha256=..." line, if any."""
    m = re.search(r"^vllm: (\d\S*) ", identity or "", re.MULTILINE)
    return m.group(1) if m else None


def check_served(served: str, identity: str | None) -> None:
    """Raises ReleaseMismatchError unless the served release is the one the identity names (when it
    names one): cached results and divergence lookups would be keyed by a vLLM that did not run."""
    installed = from_identity(identity)
    if installed and public(installed) != public(served):
        raise ReleaseMismatchError(
            f"the server reports vLLM {served} but SLEEPWAKE_VLLM_IDENTITY names vLLM {installed}: the "
            "server does not run the toolchain's vLLM; check SLEEPWAKE_GPU_PYTHON and its PYTHONPATH"
        )
