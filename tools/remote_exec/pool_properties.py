"""Prints the platform properties a GPU worker pool advertises, measured on one of its workers.

Run it with the Python that runs the GPU cells on that worker (the one with vLLM and torch):

    /opt/sleepwake/gpu-python tools/remote_exec/pool_properties.py
    OSFamily=Linux,gpu=nvidia,gpu_model=NVIDIA H200,cuda_driver=570.133.20,vllm_build=0.26.0+1f2e3d4c5b6a7980

The same line configures both sides: the workers advertise these properties (buildbox-worker
--platform, bb_worker's platform, the vendor's pool settings) and the CI client sends them
(SLEEPWAKE_GPU_POOL_PROPERTIES, see docs/remote.md). Because they are part of every GPU
action's key, a pool with another vLLM install, driver or GPU model never shares results with this one.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
from collections.abc import Callable

# What the build digest covers: vLLM and the torch it runs on (their installed RECORDs list every file
# with its hash, so a reinstall of another build changes it even under the same version).
BUILD_PACKAGES = ("vllm", "torch")
_DIGEST_CHARS = 16


def vllm_build(distribution: Callable[[str], importlib.metadata.Distribution] = importlib.metadata.distribution) -> str:
    """`<vLLM version>+<digest of the vllm and torch RECORDs>`."""
    digest = hashlib.sha256()
    for name in BUILD_PACKAGES:
        dist = distribution(name)
        digest.update(f"{name}=={dist.version}\n".encode())
        digest.update((dist.read_text("RECORD") or "").encode())
    return f"{distribution('vllm').version}+{digest.hexdigest()[:_DIGEST_CHARS]}"


def parse_gpus(nvidia_smi_csv: str) -> tuple[str, str]:
    """(GPU model, driver version) from `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader`.

    A pool is one kind of GPU: workers whose GPUs differ are different pools.
    """
    rows = {tuple(field.strip() for field in line.split(",")) for line in nvidia_smi_csv.splitlines() if line.strip()}
    if len(rows) != 1:
        raise ValueError(f"expected one GPU model and driver on this worker, nvidia-smi lists {sorted(rows)}")
    ((model, driver),) = rows
    return model, driver


def format_properties(properties: dict[str, str]) -> str:
    for key, value in properties.items():
        if "," in value or "=" in key:
            raise ValueError(f"property {key}={value!r} cannot be written as KEY=VALUE,...")
    return ",".join(f"{k}={v}" for k, v in properties.items())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nvidia_smi",
        default=shutil.which("nvidia-smi") or "nvidia-smi",
        help="nvidia-smi to ask for the GPU model and driver",
    )
    args = parser.parse_args(argv)
    try:
        smi = subprocess.run(
            [args.nvidia_smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        model, driver = parse_gpus(smi)
        build = vllm_build()
        print(
            format_properties(
                {"OSFamily": "Linux", "gpu": "nvidia", "gpu_model": model, "cuda_driver": driver, "vllm_build": build}
            )
        )
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"pool_properties: cannot run {args.nvidia_smi} ({e}): run this on a GPU worker", file=sys.stderr)
        return 1
    except importlib.metadata.PackageNotFoundError as e:
        print(
            f"pool_properties: {sys.executable} has no {e.name}: run it with the Python that runs the GPU cells",
            file=sys.stderr,
        )
        return 1
    except ValueError as e:
        print(f"pool_properties: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
