"""Adds pip's --hash lines to a pip-compile lock, from the index's JSON simple API.

`pip-compile --generate-hashes` asks PyPI's legacy JSON API for digests; where that API is not
served (this project's package mirror) it downloads every file of every pin to hash it, which for
torch and the CUDA wheels is tens of GB. The simple API (PEP 691) lists each file's sha256, so:

    pip-compile --allow-unsafe --no-emit-index-url --no-emit-find-links -o nohash.lock requirements.in
    python3 -m tools.deps.add_hashes nohash.lock > requirements.lock      (from the workspace root)

Every file of the pinned version is listed (all platforms), as pip-compile does, so the same lock
installs on any machine the pins support.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request

from tools.deps.lock_pins import PIN, normalise

INDEX = "https://pypi.org/simple"


def file_version(filename: str, name: str) -> str | None:
    """The version in a wheel or sdist filename of project `name`, or None for another project."""
    stem = re.sub(r"(\.tar\.gz|\.zip|\.whl|\.tar\.bz2)$", "", filename)
    prefix = re.escape(normalise(name)).replace(r"\-", "[-_.]")
    match = re.match(rf"(?i)^{prefix}-([^-]+)", stem)
    return match.group(1) if match else None


def digests(name: str, version: str, index: str = INDEX) -> list[str]:
    request = urllib.request.Request(
        f"{index}/{normalise(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    found = sorted(
        {
            f["hashes"]["sha256"]
            for f in files
            if file_version(f["filename"], name) == version and "sha256" in f.get("hashes", {})
        }
    )
    if not found:
        raise SystemExit(f"add_hashes: no file of {name}=={version} on {index}: is the pin right?")
    return found


def add_hashes(lines: list[str], lookup=digests) -> list[str]:
    out = []
    for line in lines:
        match = PIN.match(line)
        if not match or line[match.end() :].strip():  # not a pin, or one that has its hashes already
            out.append(line)
            continue
        hashes = lookup(match.group(1), match.group(2))
        out.append(line + " \\")
        out += [f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(hashes)]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m tools.deps.add_hashes NOHASH_LOCK > requirements.lock", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        print("\n".join(add_hashes(f.read().splitlines())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
