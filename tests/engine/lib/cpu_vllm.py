"""Import this before any vLLM module: it pins vLLM to the CPU and to files on disk.

- Hugging Face stays offline: the engine reads a config.json from a temporary directory, and a
  lookup on the Hub would hang or fail on a machine without network (CI, the GPU runners).
- vLLM's platform is UnspecifiedPlatform, what it detects on a host without an accelerator, on
  every host: `import vllm` resolves the platform, and on a GPU runner (`--config=gpu`) it would
  pick CudaPlatform, whose config checks and cache cleanup touch CUDA. The out-of-tree platform
  plugin in tests/engine/platform_plugin outranks the builtin detection; this puts it on sys.path
  first, and fails loudly if vLLM was imported before, or VLLM_PLUGINS leaves the plugin out.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

PLUGIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "platform_plugin")
PLUGIN = "sleepwake_engine_cpu"
if PLUGIN_DIR not in sys.path:
    sys.path.insert(0, PLUGIN_DIR)

import vllm.platforms  # noqa: E402  (resolves the platform, through the plugin)
from vllm.platforms.interface import UnspecifiedPlatform  # noqa: E402

if not isinstance(vllm.platforms.current_platform, UnspecifiedPlatform):
    raise RuntimeError(
        f"vLLM runs on {type(vllm.platforms.current_platform).__name__}, not the engine tier's "
        f"UnspecifiedPlatform: vLLM was imported before tests/engine/lib/cpu_vllm.py, or "
        f"VLLM_PLUGINS={os.environ.get('VLLM_PLUGINS')!r} leaves out {PLUGIN}. Import cpu_vllm "
        f"first, or add {PLUGIN} to VLLM_PLUGINS"
    )


def expect_release(environ=os.environ) -> None:
    """Raises unless the vLLM imported is the release this target tests (SLEEPWAKE_EXPECT_VLLM, set by the
    per-release targets, which put its overlay /opt/sleepwake/vllm-<v> first on the path): a missing overlay
    would silently test the venv's own vLLM. Called, not run at import: a zygote that preloads this module
    for the door hosts (lib/door_host_process.py) must not read a per-test variable while it imports."""
    expected = environ.get("SLEEPWAKE_EXPECT_VLLM")
    if expected and vllm.__version__ != expected:
        raise RuntimeError(
            f"this target tests vLLM {expected} but imported vLLM {vllm.__version__} from "
            f"{os.path.dirname(vllm.__file__)}: its overlay is not installed; run tools/setup.sh --install-only"
        )
