"""The harness's own packages, taken from the hashed lock, as an overlay for a GPU runner's Python.

A GPU runner brings vLLM and torch; the harness brings its test runner and tools. Packages that vLLM
itself depends on (numpy, requests, tokenizers, safetensors, psutil, ...) are left to the runner: any
Python that imports vLLM has them, and our pins installed over them could break its vLLM. Everything
else the harness needs (pytest and what it needs, absl-py, ...) comes from the lock, hash-checked,
into a directory that tools/setup.sh puts first on the runner's sys.path.

    python3 tools/harness_overlay.py third_party/python/requirements.lock > overlay.lock

The lock is pip-compile output: `name==version \\`, `--hash=` lines, then `# via` annotations naming
the packages that pulled it in (or `-r requirements.in` for a direct requirement).
"""

from __future__ import annotations

import dataclasses
import re
import sys

RUNNER_ROOT = "vllm"  # the runner's own package: it and everything it needs stay the runner's
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")  # name[extras]==version


@dataclasses.dataclass
class Pin:
    name: str  # normalised (PEP 503)
    lines: list[str]  # the pin with its --hash lines, as in the lock
    via: list[str]  # normalised names of the packages that require it; "-r ..." for direct ones


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, Pin]:
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    in_via = False
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            current = Pin(normalise(match.group(1)), [line], [])
            pins[current.name] = current
            in_via = False
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("--hash="):
            current.lines.append(line)
        elif stripped.startswith("# via"):
            rest = stripped[len("# via"):].strip()
            in_via = not rest
            if rest:
                current.via.append(rest if rest.startswith("-r") else normalise(rest))
        elif in_via and stripped.startswith("#"):
            entry = stripped.lstrip("#").strip()
            if entry:
                current.via.append(entry if entry.startswith("-r") else normalise(entry.split()[0]))
        elif not stripped:
            in_via = False
    return pins


def runner_closure(pins: dict[str, Pin], root: str = RUNNER_ROOT) -> set[str]:
    """`root` and every package it pulls in, following the `via` edges downwards."""
    children: dict[str, set[str]] = {}
    for pin in pins.values():
        for parent in pin.via:
            children.setdefault(parent, set()).add(pin.name)
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(children.get(name, ()))
    return seen


def overlay_pins(pins: dict[str, Pin], root: str = RUNNER_ROOT) -> list[Pin]:
    """The pins the harness needs that the runner's vLLM does not bring, in lock order."""
    if root not in pins:
        raise ValueError(f"the lock pins no {root!r}: it must pin the runner's package so the overlay "
                         "can leave that package's dependencies to the runner")
    closure = runner_closure(pins, root)
    return [pin for name, pin in pins.items() if name not in closure]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: harness_overlay.py LOCK  (prints the overlay's hashed requirements)", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            pins = parse_lock(f.read())
        overlay = overlay_pins(pins)
    except (OSError, ValueError) as e:
        print(f"harness_overlay: {e}", file=sys.stderr)
        return 2
    print("# The harness's own packages: generated from %s by tools/harness_overlay.py." % argv[1])
    for pin in overlay:
        print("\n".join(pin.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
