"""The suite's own packages, taken from the hashed lock, as an overlay for a GPU runner's Python.

A GPU runner brings vLLM and torch; the suite brings its test runner and tools. Packages that vLLM
itself depends on (numpy, requests, tokenizers, safetensors, psutil, ...) are left to the runner: any
Python that imports vLLM has them, and our pins installed over them could break its vLLM. Everything
else the suite needs (pytest and what it needs, absl-py, ...) comes from the lock, hash-checked,
into a directory that tools/setup.sh puts first on the runner's sys.path. The source checkers (ruff,
mypy) and what only they pull in stay out: they run in the CPU suite only, and a runner without an index
would need their wheels for nothing.

"Any Python that imports vLLM has them" holds for vLLM's hard needs only: a runner whose vLLM was
installed without some of its optional ones (mcp and mistral-common bring jsonschema) still imports
vLLM, yet an overlay package needing them does not import (ray, for vLLM's weight-transfer push,
failed so on a GPU runner). So the overlay packages' own needs that the lock files under vLLM are
fallbacks: installed into the overlay where the runner's Python lacks them, and always in a wheelhouse.

    python3 -m tools.deps.runner_overlay third_party/python/requirements.lock > overlay.lock
    RUNNER_PYTHON -m tools.deps.runner_overlay LOCK --with_missing   # + the fallbacks that Python lacks
    python3 -m tools.deps.runner_overlay LOCK --with_fallbacks       # + every fallback (a wheelhouse)

The `# via` annotations of the lock (tools/deps/lock_pins.py reads them) say what pulled each pin in.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable

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


def fallback_pins(pins: dict[str, Pin], root: str = RUNNER_ROOT) -> list[Pin]:
    """What the overlay's packages need that the lock files under the runner's vLLM, in lock order."""
    overlay = {pin.name for pin in overlay_pins(pins, root)}
    runner = runner_closure(pins, root)
    return [pin for name, pin in pins.items() if name in _closure(pins, overlay) - overlay and name in runner]


def installed_here(name: str) -> bool:
    """Whether the Python running this has a distribution of that name (pip's normalised or not)."""
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def overlay_requirements(
    lock_text: str, fallbacks: bool = False, installed: Callable[[str], bool] | None = None
) -> str:
    """The overlay's hashed requirements (each pin's lines, as the lock has them) from a lock's text:
    what tools/setup.sh installs on the runner and tools/deps/wheelhouse.py downloads for it. With
    `fallbacks`, the fallback pins too, those `installed` says are present left out when it is given."""
    pins = parse_lock(lock_text)
    chosen = overlay_pins(pins)
    if fallbacks:
        chosen += [pin for pin in fallback_pins(pins) if installed is None or not installed(pin.name)]
    return "".join("\n".join(pin.lines) + "\n" for pin in chosen)


USAGE = (
    "usage: runner_overlay.py LOCK [--with_missing | --with_fallbacks]  (prints the overlay's hashed "
    "requirements; --with_missing adds the fallbacks this Python lacks, --with_fallbacks all of them)"
)


def main(argv: list[str]) -> int:
    options = {"--with_missing": (True, installed_here), "--with_fallbacks": (True, None)}
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] not in options):
        print(USAGE, file=sys.stderr)
        return 2
    fallbacks, installed = options[argv[2]] if len(argv) == 3 else (False, None)
    try:
        with open(argv[1], encoding="utf-8") as f:
            requirements = overlay_requirements(f.read(), fallbacks, installed)
    except (OSError, ValueError) as e:
        print(f"runner_overlay: {e}", file=sys.stderr)
        return 2
    print("# The suite's own packages: generated from %s by tools/deps/runner_overlay.py." % argv[1])
    sys.stdout.write(requirements)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
