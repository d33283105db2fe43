"""What a zygote is keyed on, and what each server it forks applies for itself.

A server's environment splits in two (split_env):
  * per-server variables (is_per_server): set in the forked server before its module runs, so the
    servers of one zygote may differ in them: the runner (VLLM_USE_V2_MODEL_RUNNER), the GPU
    (CUDA_VISIBLE_DEVICES), the mutant (SLEEPWAKE_MUTANT), and what Bazel gives each test (TEST_*,
    HOME, runfiles). A per-server variable read while the module is imported would keep the zygote's
    value; the zygote records those reads and refuses to fork unless IMPORT_SAFE says why the read is
    harmless.
  * everything else: the zygote imports the module under exactly these values (vLLM fixes its logging
    configuration, huggingface_hub its offline switch and cache dirs, at import), so they are part of
    the key: a server whose values differ gets another zygote.

PYTHONPATH splits the same way (split_pythonpath): entries inside a per-test directory (a test's
runfiles, its TEST_TMPDIR, where a mutant target builds its plugin site) or inside any runfiles tree (a
build action's binary, which Bazel gives none of those variables) are the server's own, put on
sys.path in the fork; the rest is the key's. An entry that provides one of the zygote's modules stays in
the key, since the zygote imports the module from it; unless the module is of the zygote's own package
(OWN_PACKAGE: the door host), which every fork drops and imports again from its own sys.path.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence

PROTOCOL = 2  # 2: a zygote imports and runs several modules
PER_SERVER_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "VLLM_USE_V2_MODEL_RUNNER",
        "PYTHONPATH",
        # What Bazel and pytest set per test, and the shell's bookkeeping.
        "HOME",
        "TMPDIR",
        "TMP",
        "TEMP",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "XML_OUTPUT_FILE",
        "TESTBRIDGE_TEST_ONLY",
        "JAVA_RUNFILES",
        "PYTHON_RUNFILES",
        # Bazel's test runner's own; a build action (a golden's server) has neither.
        "EXPERIMENTAL_SPLIT_XML_GENERATION",
        "RUN_UNDER_RUNFILES",
    }
)
PER_SERVER_PREFIXES = ("SLEEPWAKE_", "TEST_", "RUNFILES_", "PYTEST_", "GTEST_", "BUILD_")
# The package the zygote's own code is in: a fork drops its modules (zygote.py), so a server of one of them
# runs the test's copy, and the zygote's code digest keys what the zygote itself imported.
OWN_PACKAGE = __spec__.name.split(".")[0] if __spec__ else "tools"
# Directories private to one test: PYTHONPATH entries inside them are per-server additions.
PER_TEST_DIR_VARS = ("TEST_SRCDIR", "RUNFILES_DIR", "PYTHON_RUNFILES", "JAVA_RUNFILES", "TEST_TMPDIR")

# Per-server variables that importing vLLM 0.26.0 reads (recorded by the zygote, zygote.EnvReads, in
# the CPU venv with vLLM 0.26.0 and torch 2.11.0), and why each read leaves nothing behind that a
# server needs to differ. A read not listed here makes the zygote refuse every fork.
_TEMP = (
    "tempfile.gettempdir() runs at import (dill/session.py keeps it as TEMPDIR, for"
    " dill.dump_session, which vLLM does not call) and caches it; the forked server clears that"
    " cache (zygote._become_server), so its own TMPDIR decides every later temp file"
)
IMPORT_SAFE = {
    "CUDA_VISIBLE_DEVICES": (
        "torch counts devices through NVML (torch/cuda/__init__.py _parse_visible_devices) and keeps no"
        " count before CUDA is initialised; vllm/triton_utils/importing.py fixes HAS_TRITON from whether"
        " Triton's CUDA driver is active and whether the variable is set but empty: the zygote imports"
        " with it unset and the launcher sets one leased GPU, and on a GPU runner both see one active"
        " driver. With config.VLLM_PRELOAD, vLLM's NVML platform (vllm/platforms/interface.py"
        " visible_device_id_to_physical_device_id) answers capability checks at import"
        " (w8a8_utils.py CUTLASS_FP8_SUPPORTED, kernels/oink_ops.py OINK_AVAILABLE; read from the"
        " source, on a CPU the platform is unspecified and asks nothing) for physical GPU 0 and caches"
        " it (platforms/cuda.py get_device_capability): the capability of every server's GPU on a"
        " runner of one GPU model, as the H200 runner is; the zygote logs the preloads' sites"
    ),
    "HOME": (
        "expands '~' in default cache and config paths (huggingface_hub/constants.py, torch/hub.py,"
        " triton/knobs.py, vllm/envs.py); build_env sets every cache the server uses (VLLM_CACHE_ROOT,"
        " XDG_CACHE_HOME, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR), which are key variables, and the"
        " zygote runs with -s, so no user site-packages dir depends on it"
    ),
    "TMPDIR": _TEMP,
    "TEMP": _TEMP,
    "TMP": _TEMP,
}


def is_per_server(name: str) -> bool:
    return name in PER_SERVER_NAMES or name.startswith(PER_SERVER_PREFIXES)


def split_env(env) -> tuple[dict, dict]:
    """(key variables, per-server variables) of a server environment."""
    key: dict[str, str] = {}
    own: dict[str, str] = {}
    for name, value in env.items():
        (own if is_per_server(name) else key)[name] = value
    return key, own


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def _in_runfiles(path: str) -> bool:
    """Whether path lies in a runfiles tree (<binary>.runfiles/...), which belongs to one binary or test."""
    return any(part.endswith(".runfiles") for part in path.split(os.sep))


def provides(entry: str, top_level: str) -> bool:
    """True if the sys.path entry holds the package or module top_level."""
    return os.path.isdir(os.path.join(entry, top_level)) or os.path.isfile(os.path.join(entry, top_level + ".py"))


def split_pythonpath(env, *modules: str) -> tuple[list[str], list[str]]:
    """(key entries, per-server entries) of env's PYTHONPATH, each in PYTHONPATH's order, for a zygote
    that imports modules."""
    entries = [os.path.abspath(e) for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    private = [os.path.abspath(env[v]) for v in PER_TEST_DIR_VARS if env.get(v)]
    top_levels = {module.split(".")[0] for module in modules} - {OWN_PACKAGE}
    key, own = [], []
    for entry in entries:
        mine = any(_inside(entry, d) for d in private) or _in_runfiles(entry)
        if mine and not any(provides(entry, top_level) for top_level in top_levels):
            own.append(entry)
        else:
            key.append(entry)
    return key, own


def zygote_key(python: str, modules: Sequence[str], env, code_digest: str, preloads=()) -> tuple[str, dict]:
    """(key, the zygote's environment without its own code root) for servers started by
    `python -m M` with env, M one of modules, from a zygote that imported modules and then preloads (in
    that order: another order may import otherwise). Equal keys may share a zygote."""
    if isinstance(modules, str):
        raise TypeError("modules is a sequence of module names, not the string %r" % modules)
    key_env, _ = split_env(env)
    key_path, _ = split_pythonpath(env, *modules)
    material = {
        "protocol": PROTOCOL,
        "python": os.path.realpath(python),
        "modules": list(modules),
        "preloads": list(preloads),
        "pythonpath": key_path,
        "env": sorted(key_env.items()),
        "code": code_digest,
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]
    if key_path:
        key_env["PYTHONPATH"] = os.pathsep.join(key_path)
    return digest, key_env
