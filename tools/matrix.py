"""The matrix's vocabulary, one definition for every Python reader: the model runners (and the value of
VLLM_USE_V2_MODEL_RUNNER that selects each), the execution modes, and a cell's id. tools/defs.bzl holds
the Starlark twin for the macros; tools/defs_test.py checks the two agree.
"""

RUNNERS = {"mrv1": "0", "mrv2": "1"}  # runner -> VLLM_USE_V2_MODEL_RUNNER
EXECUTION_MODES = ("eager", "graph")


def cell_id(runner: str, mode: str) -> str:
    """The pytest id suffix and thresholds lookup key of a cell, e.g. "MRV1-eager"."""
    return f"{runner.upper()}-{mode}"
