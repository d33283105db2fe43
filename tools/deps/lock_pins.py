"""Reading pip-compile locks: each pin with its hash lines and the packages that pulled it in.

A lock is pip-compile output: `name[extras]==version` (with ` \\` when `--hash=` lines follow), then
`# via` annotations naming the packages that require it (or `-r requirements.in` for a direct one).
Read by tools/deps/runner_overlay.py (the GPU runner's overlay), tools/deps/version_overlay.py (the engine
tier's other vLLM releases) and tools/deps/add_hashes.py (writing the hash lines).
"""

from __future__ import annotations

import dataclasses
import re

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")  # name[extras]==version


@dataclasses.dataclass
class Pin:
    name: str  # normalised (PEP 503)
    project: str  # as the lock writes it, without extras
    version: str
    lines: list[str]  # the pin with its --hash lines, as in the lock
    via: list[str]  # normalised names of the packages that require it; "-r ..." for direct ones


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, Pin]:
    """normalised name -> Pin, in lock order."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    in_via = False
    for line in text.splitlines():
        match = PIN.match(line)
        if match:
            current = Pin(normalise(match.group(1)), match.group(1), match.group(2), [line], [])
            pins[current.name] = current
            in_via = False
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("--hash="):
            current.lines.append(line)
        elif stripped.startswith("# via"):
            rest = stripped[len("# via") :].strip()
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
