"""The matrix's spec for Python readers: tools/matrix.bzl's literals (runners, modes, classes, shards,
releases, the fake tier's cells), parsed once, so that the launcher, the suite, the report and the unit
tests read the table the Starlark macros read."""

import ast
import os

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matrix.bzl")


def _literals(path: str) -> dict:
    """NAME -> value of every top-level `NAME = <literal>` of a .bzl file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }


_SPEC = _literals(SPEC)
RUNNERS: dict = _SPEC["RUNNERS"]  # runner -> VLLM_USE_V2_MODEL_RUNNER
LOG_MARKER_V2: str = _SPEC["LOG_MARKER_V2"]
EXECUTION_MODES: dict = _SPEC["EXECUTION_MODES"]  # mode -> vLLM flags
SLEEP_WAKE_CLASSES: dict = _SPEC["SLEEP_WAKE_CLASSES"]  # class short name -> its file in //tests/sleep_wake
SHARD_COUNTS: dict = _SPEC["SHARD_COUNTS"]
GOLDEN_CLASSES: dict = _SPEC["GOLDEN_CLASSES"]  # class short name -> the checkpoints ("a", "b") it compares with
RELEASES: tuple = tuple(_SPEC["RELEASES"])
SUITE_RELEASE: str = _SPEC["SUITE_RELEASE"]
FAKE_TIER_CELLS: dict = _SPEC["FAKE_TIER_CELLS"]
FAKE_TIER_EXCLUDED: dict = _SPEC["FAKE_TIER_EXCLUDED"]


def cell_id(runner: str, mode: str) -> str:
    """The pytest id suffix and thresholds lookup key of a cell, e.g. "MRV1-eager"."""
    return f"{runner.upper()}-{mode}"


FAKE_INFIX = "_fake_"  # <class>_fake_<runner>_<mode>[_vllm<release>]: the fake tier (tools/defs.bzl)


def split_name(name: str) -> tuple[str, str, str] | None:
    """(class, runner, mode) of a GPU cell target name, or None for any other target."""
    if FAKE_INFIX in name:
        return None
    for runner in RUNNERS:
        for mode in EXECUTION_MODES:
            suffix = f"_{runner}_{mode}"
            if name.endswith(suffix) and len(name) > len(suffix):
                return name[: -len(suffix)], runner, mode
    return None
