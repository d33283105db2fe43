"""Patching a vLLM module right after it executes, in whichever of vLLM's processes imports it: the
suite's vLLM plugins load in every process (the API server, the engine core) but act only on the
engine core's worker, which the API server never imports."""

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Calls each of its patches(module), in the order they came, once `module` has executed. One finder
    per module serves every plugin: the first finder that answers for a module is the only one Python
    asks, so a second finder of its own would never see the import."""

    def __init__(self, module: str):
        self.module = module
        self.patches: dict[str, Callable] = {}  # the plugin's key -> its patch

    def find_spec(self, name, path, target=None):
        if name != self.module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        # The patched exec_module is an attribute of this loader alone, set over its class's method: Any,
        # since the Loader type holds exec_module to its method's signature and refuses the assignment.
        loader: Any = spec.loader
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            for patch in self.patches.values():
                patch(module)

        loader.exec_module = exec_module
        return spec


def patch_when_imported(module: str, patch, key: str) -> None:
    """patch(module) now if it is imported already (a zygote preloaded it), else right after its import.
    key names the plugin: one that registers twice (vLLM loads plugins in several places) is queued once;
    a module already imported is patched at each call, so the patches guard themselves against that."""
    if module in sys.modules:
        patch(sys.modules[module])
        return
    finder = next((f for f in sys.meta_path if isinstance(f, PatchOnImport) and f.module == module), None)
    if finder is None:
        finder = PatchOnImport(module)
        sys.meta_path.insert(0, finder)
    finder.patches.setdefault(key, patch)
