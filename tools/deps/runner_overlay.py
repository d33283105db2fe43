"""The suite's own packages, taken from the hashed lock, as an overlay for a GPU runner's Python.

A GPU runner brings vLLM and torch; the suite brings its test runner and tools. Packages that vLLM
itself depends on (numpy, requests, tokenizers, safetensors, psutil, ...) are left to the runner: any
Python that imports vLLM has them, and our pins installed over them could break its vLLM. Everything
else the suite needs (pytest and what it needs, absl-py, ...) comes from the lock, hash-checked,
into a directory that tools/setup.sh puts first on the runner's sys.path. The source checkers (ruff,
mypy) and what only they pull in stay out: they run in the CPU suite only, and a runner without an index
would need their wheels for nothing.

    python3 -m tools.deps.runner_overlay third_party/python/requirements.lock > overlay.lock

The `# via` annotations of the lock (tools/deps/lock_pins.py reads them) say what pulled each pin in.
"""

from __future__ import annotations

import sys

from tools.deps.lock_pins import Pin, parse_lock

RUNNER_ROOT = "vllm"  # the runner's own package: it and everything it needs stay the runner's
CHECKERS = ("ruff", "mypy")  # direct pins the GPU cells never import (tools/test.sh's source checks)


def runner_closure(pins: dict[str, Pin], root: str = RUNNER_ROOT) -> set[str]:
    """`root` and every package it pulls in, following the `via` edges downwards."""
    return _closure(pins, {root})


def _closure(pins: dict[str, Pin], roots: set[str]) -> set[str]:
    children: dict[str, set[str]] = {}
    for pin in pins.values():
        for parent in pin.via:
            children.setdefault(parent, set()).add(pin.name)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(children.get(name, ()))
    return seen


def overlay_pins(pins: dict[str, Pin], root: str = RUNNER_ROOT) -> list[Pin]:
    """The pins the suite's GPU cells need that the runner's vLLM does not bring, in lock order."""
    if root not in pins:
        raise ValueError(
            f"the lock pins no {root!r}: it must pin the runner's package so the overlay "
            "can leave that package's dependencies to the runner"
        )
    direct = {name for name, pin in pins.items() if any(v.startswith("-r") for v in pin.via)}
    needed = _closure(pins, direct - set(CHECKERS))
    runner = runner_closure(pins, root)
    return [pin for name, pin in pins.items() if name in needed and name not in runner]


def overlay_requirements(lock_text: str) -> str:
    """The overlay's hashed requirements (each pin's lines, as the lock has them) from a lock's text:
    what tools/setup.sh installs on the runner and tools/deps/wheelhouse.py downloads for it."""
    return "".join("\n".join(pin.lines) + "\n" for pin in overlay_pins(parse_lock(lock_text)))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: runner_overlay.py LOCK  (prints the overlay's hashed requirements)", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            requirements = overlay_requirements(f.read())
    except (OSError, ValueError) as e:
        print(f"runner_overlay: {e}", file=sys.stderr)
        return 2
    print("# The suite's own packages: generated from %s by tools/deps/runner_overlay.py." % argv[1])
    sys.stdout.write(requirements)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
