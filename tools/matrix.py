"""The matrix's spec for Python readers: tools/matrix.bzl's literals (runners, modes, classes, shards,
releases, the fake tier's cells), parsed once, so that the launcher, the suite, the report and the unit
tests read the table the Starlark macros read."""

import ast
import os
import re

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
SHARD_COUNTS: dict = _SPEC["SHARD_COUNTS"]  # class short name -> {door: {mode: shards}}
BAZEL_MAX_SHARDS: int = _SPEC["BAZEL_MAX_SHARDS"]
CLASS_SERVER_SETTINGS: dict = _SPEC["CLASS_SERVER_SETTINGS"]  # class short name -> {ServerConfig setting: value}
GOLDEN_CLASSES: dict = _SPEC["GOLDEN_CLASSES"]  # class short name -> the checkpoints ("a", "b") it compares with
RELEASES: tuple = tuple(_SPEC["RELEASES"])
SUITE_RELEASE: str = _SPEC["SUITE_RELEASE"]
FAKE_TIER_CELLS: dict = _SPEC["FAKE_TIER_CELLS"]
FAKE_TIER_EXCLUDED: dict = _SPEC["FAKE_TIER_EXCLUDED"]
FRONT_DOORS: tuple = tuple(_SPEC["FRONT_DOORS"])
HTTP = FRONT_DOORS[0]  # vLLM's OpenAI server: the door of every cell whose name names none
DOOR_CELLS: dict = _SPEC["DOOR_CELLS"]  # in-process door -> its "<runner>_<mode>" cells
DOOR_EXCLUDED: dict = _SPEC["DOOR_EXCLUDED"]  # in-process door -> {class: why it cannot run there}
DOOR_FAKE_ONLY: dict = _SPEC["DOOR_FAKE_ONLY"]  # in-process door -> excluded classes the fake tier runs


def release_key(version: str) -> tuple[int, ...]:
    """A vLLM version's release as numbers, for ordering releases: "0.26.0+cu129" -> (0, 26, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+", 1)[0])[:3])


def shard_count(test_class: str, mode: str, door: str) -> int:
    """The shards of a cell of test_class in execution mode `mode` through `door` (SHARD_COUNTS; 1: unsplit),
    one test class each; ValueError for a split class with no count for that door and mode. Bazel runs them
    in bazel_shard_count shards."""
    if test_class not in SHARD_COUNTS:
        return 1
    count = SHARD_COUNTS[test_class].get(door, {}).get(mode)
    if count is None:
        raise ValueError(
            f"tools/matrix.bzl SHARD_COUNTS[{test_class!r}] has no count for the {door} door's {mode} cells: add one"
        )
    return count


def bazel_shard_count(test_class: str, mode: str, door: str) -> int:
    """The Bazel shard_count of the cell (tools/defs.bzl): its shards (shard_count) dealt evenly over at most
    BAZEL_MAX_SHARDS, so that each Bazel shard runs the same number of the class's shards, give or take one."""
    count = shard_count(test_class, mode, door)
    per_shard = -(-count // BAZEL_MAX_SHARDS)
    return -(-count // per_shard)


def cell_id(runner: str, mode: str) -> str:
    """The pytest id suffix and thresholds lookup key of a cell, e.g. "MRV1-eager"."""
    return f"{runner.upper()}-{mode}"


def door_cells() -> list[tuple[str, str, str]]:
    """(door, runner, mode) of every GPU cell configuration: every runner x mode through HTTP, then each
    in-process door's cells (DOOR_CELLS), in the spec's order."""
    http = [(HTTP, r, m) for r in RUNNERS for m in EXECUTION_MODES]
    return http + [(door, *cell.split("_", 1)) for door in FRONT_DOORS[1:] for cell in DOOR_CELLS[door]]


FAKE_INFIX = "_fake_"  # <class>_fake_<runner>_<mode>[_vllm<release>]: the fake tier (tools/defs.bzl)


def door_classes(door: str) -> list[str]:
    """The classes whose cells run through `door`: all of them over HTTP, else those not excluded."""
    return [c for c in SLEEP_WAKE_CLASSES if door == HTTP or c not in DOOR_EXCLUDED[door]]


def split_cell(name: str) -> tuple[str, str, str, str] | None:
    """(class, door, runner, mode) of a GPU cell target name (<class>[_<door>]_<runner>_<mode>, tools/defs.bzl
    cell_name), or None for any other target."""
    if FAKE_INFIX in name:
        return None
    for runner in RUNNERS:
        for mode in EXECUTION_MODES:
            suffix = f"_{runner}_{mode}"
            if not name.endswith(suffix) or len(name) <= len(suffix):
                continue
            head = name[: -len(suffix)]
            # Longest first: "async_llm" ends with "llm".
            for door in sorted(FRONT_DOORS[1:], key=len, reverse=True):
                if head.endswith("_" + door) and len(head) > len(door) + 1:
                    return head[: -len(door) - 1], door, runner, mode
            return head, HTTP, runner, mode
    return None


def split_name(name: str) -> tuple[str, str, str] | None:
    """(class, runner, mode) of an HTTP GPU cell target name, or None for any other target (a door cell's
    name too: split_cell reads those)."""
    parts = split_cell(name)
    if parts is None or parts[1] != HTTP:
        return None
    return parts[0], parts[2], parts[3]
