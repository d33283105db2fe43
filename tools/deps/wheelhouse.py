"""A folder of the runner overlay's wheels, for a GPU runner without a package index.

Run it where pip reaches an index, copy the folder to the runner, and set SLEEPWAKE_WHEELHOUSE to it
for tools/setup.sh there. The wheels are those of the overlay's hashed requirements (runner_overlay:
the lock's packages the runner's vLLM does not bring) and of all its fallbacks (what those packages need
that a runner's vLLM may have come without: which ones a runner lacks is known only there), built for
the runner's Python, not this one's;
pip checks their hashes on download here and again when setup.sh installs them there.

    python3 -m tools.deps.wheelhouse DEST [--python_version 3.12] [--lock third_party/python/requirements.lock]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from tools.deps.runner_overlay import overlay_requirements

DEFAULT_LOCK = "third_party/python/requirements.lock"
RUNNER_PYTHON = "3.12"  # the GPU image's Python
# Linux x86-64 runners: pip matches a wheel's manylinux tag exactly, so every tag a runner's glibc
# accepts is listed, newest first; pure-Python wheels match "any".
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "any",
)


def download_command(requirements: str, dest: str, python_version: str) -> list[str]:
    """pip's download of exactly the hashed requirements' wheels for that Python, nothing they pull in
    (the overlay lists its whole closure, and the rest is the runner's)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "-d",
        dest,
        "-r",
        requirements,
    ]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Downloads the runner overlay's wheels into DEST, for "
        "SLEEPWAKE_WHEELHOUSE on a GPU runner without a package index."
    )
    parser.add_argument("dest", help="the folder the wheels go to (created if missing)")
    parser.add_argument(
        "--python_version",
        default=RUNNER_PYTHON,
        help=f"the runner's Python (major.minor) whose wheels to fetch; default {RUNNER_PYTHON}",
    )
    parser.add_argument("--lock", default=DEFAULT_LOCK, help=f"the hashed lock; default {DEFAULT_LOCK}")
    args = parser.parse_args(argv)
    try:
        with open(args.lock, encoding="utf-8") as f:
            requirements = overlay_requirements(f.read(), fallbacks=True)
    except (OSError, ValueError) as e:
        print(f"wheelhouse: cannot derive the overlay from {args.lock}: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.dest, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listed:
        listed.write(requirements)
    try:
        done = subprocess.run(download_command(listed.name, args.dest, args.python_version), check=False)
    finally:
        os.unlink(listed.name)
    if done.returncode:
        print(
            f"wheelhouse: pip download failed (exit {done.returncode}, above): this host must reach the "
            "package index; the runner's Python version is --python_version",
            file=sys.stderr,
        )
        return 1
    wheels = sorted(n for n in os.listdir(args.dest) if n.endswith(".whl"))
    print(
        f"wheelhouse: {len(wheels)} wheels in {args.dest}; on the runner: "
        f"SLEEPWAKE_WHEELHOUSE={os.path.abspath(args.dest)} tools/setup.sh"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
