"""Patching a vLLM module right after it executes, in whichever of vLLM's processes imports it: the
suite's vLLM plugins load in every process (the API server, the engine core) but act only on the
engine core's worker, which the API server never imports."""

import importlib.abc
import importlib.machinery
import sys


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Calls patch(module) once `module` has executed; `key` names the plugin, so that a plugin that
    registers twice (vLLM loads plugins in several places) installs one finder."""

    def __init__(self, module: str, patch, key: str):
        self.module, self.patch, self.key = module, patch, key

    def find_spec(self, name, path, target=None):
        if name != self.module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            self.patch(module)
        spec.loader.exec_module = exec_module
        return spec


def patch_when_imported(module: str, patch, key: str) -> None:
    """patch(module) now if it is imported already (a zygote preloaded it), else right after its import."""
    if module in sys.modules:
        patch(sys.modules[module])
    elif not any(isinstance(f, PatchOnImport) and f.key == key for f in sys.meta_path):
        sys.meta_path.insert(0, PatchOnImport(module, patch, key))
