"""Platform properties that route each action to its worker pool under remote execution.

REAPI engines match an action's platform properties against what a worker advertises; the properties
are also part of the action's cache key. CPU actions ask for `gpu=none`, GPU cells for `gpu=nvidia`
plus what the GPU pool must match: GPU model, driver/CUDA, and the vLLM build. Those pool-specific
values come from @sleepwake_remote_pool (SLEEPWAKE_*_POOL_PROPERTIES, never a committed file), so two
pools with different vLLM builds never share results. Outside remote execution the properties are inert.
"""

load("@sleepwake_remote_pool//:pool.bzl", "CPU_POOL", "GPU_POOL")

# OSFamily is REAPI's one standard property (remote_execution.proto, "Platform"); `gpu` names the pool.
_CPU_DEFAULTS = {
    "OSFamily": "Linux",
    "gpu": "none",
}

_GPU_DEFAULTS = {
    "OSFamily": "Linux",
    "gpu": "nvidia",
}

def _merge(defaults, overrides):
    """The defaults with the pool's entries on top; an empty value (`KEY=`) drops a default key."""
    merged = dict(defaults)
    merged.update(overrides)
    return {k: v for k, v in merged.items() if v}

CPU_EXEC_PROPERTIES = _merge(_CPU_DEFAULTS, CPU_POOL)

GPU_EXEC_PROPERTIES = _merge(_GPU_DEFAULTS, GPU_POOL)

# A GPU cell's actions run on //platforms:cpu (the only execution platform) with the GPU properties on
# top, and Bazel cannot remove a platform key per target (an empty value is sent as is). A CPU pool key
# the GPU pool does not set would route GPU cells to the CPU pool.
_LEAKED = [k for k in CPU_EXEC_PROPERTIES if k not in GPU_EXEC_PROPERTIES]

# buildifier: disable=no-effect (a check at load time: a .bzl file allows no top-level `if`)
_LEAKED and fail(("SLEEPWAKE_CPU_POOL_PROPERTIES sets %s, which GPU cells would inherit from //platforms:cpu: " +
                  "set it in SLEEPWAKE_GPU_POOL_PROPERTIES too") % ", ".join(_LEAKED))

def exec_properties_for_tags(tags):
    """The per-target exec_properties of a test with these tags: the GPU pool's for `gpu`, else none.

    A target without its own exec_properties takes its execution platform's, //platforms:cpu's.
    """
    return GPU_EXEC_PROPERTIES if "gpu" in tags else {}
