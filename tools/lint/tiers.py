"""The layers of the tree and which may import which: the tiers import the core, never each other.

A layer is a set of folders (LAYER_OF_FOLDER, the longest matching folder wins). The core (tests/core)
holds what every tier shares: client, oracles, verdicts, bounds and noise, the walk's model, planner and
driver. The tiers are the ways the suite meets vLLM: the GPU tier's classes and walk over HTTP
(tests/sleep_wake), the fake server they also run against (tests/sleep_wake/fakes), vLLM's real engine
on the CPU (tests/engine), and the mutants patched into vLLM (tests/mutants). The catalogue (the mutant
plugin, loaded into vLLM's servers) and tools/ are read by all; tools/ reads no test code. Something a
tier needs from another tier moves into the core instead (tests/core/not_re_created.py, say).

//tools/lint:tier_imports_test holds the tree to MAY_IMPORT; tools/lint/architecture.py draws it.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator

# Folder (relative to the checkout, "/"-separated) -> its layer; the longest folder holding a file wins.
LAYER_OF_FOLDER = {
    "tools": "tools",
    "docs": "docs",
    "tests": "core",  # the `tests` package marker alone
    "tests/core": "core",
    "tests/mutants/plugin": "catalogue",
    "tests/sleep_wake": "gpu",
    "tests/sleep_wake/fakes": "fake",
    "tests/engine": "engine",
    "tests/mutants": "mutant",
}

# Top-level packages that live in a folder of the tree but are imported by their own name (put on
# sys.path by their BUILD target's `imports` or by the code that loads them).
LAYER_OF_PACKAGE = {
    "sleepwake_mutants": "catalogue",  # tests/mutants/plugin: the vllm.general_plugins entry point
    "sleepwake_engine_platform": "engine",  # tests/engine/platform_plugin: the engine tier's CPU platform
}

TIERS = ("gpu", "fake", "engine", "mutant")

# Layer -> the other layers its files may import (its own always). Bottom to top, the order the
# architecture page draws them in.
MAY_IMPORT = {
    "tools": set(),
    "catalogue": set(),
    "core": {"tools", "catalogue"},
    **{tier: {"core", "tools", "catalogue"} for tier in TIERS},
    "docs": {"tools"},
}

# What the walk of the tree skips: VCS and tool caches, Bazel's output links, test data (inputs that
# other tests read as files; they are never imported).
SKIP_DIRS = {".git", ".ruff_cache", ".mypy_cache", ".pytest_cache", "__pycache__", "node_modules", "testdata"}


def layer_of_file(path: str) -> str | None:
    """The layer of a file, by the longest folder of LAYER_OF_FOLDER holding it; None outside every one."""
    parts = path.split("/")[:-1]
    for n in range(len(parts), 0, -1):
        layer = LAYER_OF_FOLDER.get("/".join(parts[:n]))
        if layer:
            return layer
    return None


def python_files(root: str) -> list[str]:
    """Every .py file of the checkout at `root` (relative, "/"-separated), test data and caches left out."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("bazel-"))
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        found += [name if rel == "." else f"{rel}/{name}" for name in sorted(filenames) if name.endswith(".py")]
    return found


def _module_path(root: str, module: str) -> str | None:
    """The file or package folder of a dotted module of the checkout, relative to root; None if none."""
    base = module.replace(".", "/")
    for candidate in (base + ".py", base):
        if os.path.exists(os.path.join(root, candidate)):
            return candidate
    return None


def _absolute(path: str, node: ast.ImportFrom) -> str:
    """The dotted module a relative `from .x import y` names, from the importing file's path."""
    package = path.split("/")[:-1]
    if node.level > 1:
        package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def imported_modules(root: str, path: str) -> Iterator[tuple[int, str]]:
    """(line, dotted module) for each import of the file, relative ones made absolute; for `from m import
    n`, m.n where that is a module of the checkout, else m."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(path, node) if node.level else (node.module or "")
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                yield node.lineno, sub if _module_path(root, sub) else module


def layer_of_module(root: str, module: str) -> str | None:
    """The layer of an imported module; None for the standard library and third-party packages."""
    top = module.split(".")[0]
    if top in LAYER_OF_PACKAGE:
        return LAYER_OF_PACKAGE[top]
    if top not in ("tests", "tools", "docs"):
        return None
    path = _module_path(root, module) or _module_path(root, module.rsplit(".", 1)[0]) or module.replace(".", "/")
    return layer_of_file(path + "/__init__.py" if not path.endswith(".py") else path)


def edges(root: str) -> Iterator[tuple[str, int, str, str, str]]:
    """(file, line, module, the file's layer, the module's layer) for every import of one layer by
    another, across the checkout's Python files."""
    for path in python_files(root):
        source = layer_of_file(path)
        if source is None:
            continue
        for line, module in imported_modules(root, path):
            target = layer_of_module(root, module)
            if target is not None and target != source:
                yield path, line, module, source, target


def forbidden(root: str) -> list[str]:
    """'file:line: layer imports module (layer)' for each import MAY_IMPORT does not allow."""
    return [
        f"{path}:{line}: {source} imports {module} ({target})"
        for path, line, module, source, target in edges(root)
        if target not in MAY_IMPORT[source]
    ]
