"""buildifier, as tools/setup.sh installs it from npm (third_party/npm: @bazel/buildifier, whose package
carries the binaries, so installing downloads nothing else), run over the checkout with .buildifier.json."""

from __future__ import annotations

import json
import os
import platform

from tools.lint import checkout

PACKAGE = "/opt/sleepwake/npm/node_modules/@bazel/buildifier"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
CONFIG = ".buildifier.json"  # at the checkout's root: buildifier finds it there by itself too


def binary(package: str = PACKAGE) -> str:
    path = os.path.join(package, f"buildifier-{platform.system().lower()}_{_ARCH.get(platform.machine(), '?')}")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(
            f"no buildifier at {path}: tools/setup.sh --install-only installs it (npm ci of"
            " third_party/npm into /opt/sleepwake/npm)"
        )
    return path


def report(root: str, *targets: str) -> list[dict]:
    """buildifier's verdict on each file of targets (default: every BUILD, .bzl and WORKSPACE file under
    root): {filename, formatted, valid, warnings: [{category, start: {line}, message}, ...]}."""
    result = checkout.run(
        [
            binary(),
            f"--config={os.path.join(root, CONFIG)}",
            "--mode=check",
            "--lint=warn",
            "--format=json",
            "-r",
            *(targets or (".",)),
        ],
        cwd=root,
    )
    if result.returncode not in (0, 4):  # 4: some file needs a change
        raise RuntimeError(f"buildifier failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    return json.loads(result.stdout)["files"]
