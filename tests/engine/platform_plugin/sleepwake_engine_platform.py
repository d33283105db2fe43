"""A vLLM platform plugin that selects UnspecifiedPlatform: the engine tier's CPU, on every host.

vLLM resolves its platform during `import vllm` (vllm/platforms/__init__.py): every builtin and
out-of-tree `vllm.platform_plugins` entry point is asked, and a single activated out-of-tree plugin
wins over the builtin ones. On a GPU runner the builtin CUDA check activates too; this plugin makes
the engine tier still run on UnspecifiedPlatform, the platform a host without an accelerator gets.
Found through sleepwake_engine_platform-0.dist-info beside it, which tests/engine/lib/cpu_vllm.py
puts on sys.path before vLLM is imported. No imports here: vLLM calls it mid-import.
"""

UNSPECIFIED = "vllm.platforms.interface.UnspecifiedPlatform"


def unspecified_platform() -> str:
    return UNSPECIFIED
