"""The spec (tools/matrix.bzl) against the places it must reach; docs/extending.md lists them."""

import os
import re

import pytest

from tools import matrix

WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(path: str) -> str:
    with open(os.path.join(WORKSPACE, path), encoding="utf-8") as f:
        return f.read()


def test_every_class_has_its_file_a_fake_tier_entry_and_valid_shards():
    for short, test_file in matrix.SLEEP_WAKE_CLASSES.items():
        assert re.fullmatch(r"test_\w+\.py", test_file), (short, test_file)
        assert os.path.isfile(os.path.join(WORKSPACE, "tests", "sleep_wake", test_file)), (
            f"class {short}: tests/sleep_wake/{test_file} does not exist"
        )
        assert (short in matrix.FAKE_TIER_CELLS) != (short in matrix.FAKE_TIER_EXCLUDED), (
            f"class {short}: in exactly one of FAKE_TIER_CELLS and FAKE_TIER_EXCLUDED"
        )
    assert set(matrix.SHARD_COUNTS) <= set(matrix.SLEEP_WAKE_CLASSES)
    for short, by_door in matrix.SHARD_COUNTS.items():
        # A count for every door and mode the class's cells run on, and none for a cell it has not.
        cells = {(door, mode) for door, _, mode in matrix.door_cells() if short in matrix.door_classes(door)}
        listed = {(door, mode) for door, by_mode in by_door.items() for mode in by_mode}
        assert listed == cells, f"SHARD_COUNTS[{short!r}] lists {sorted(listed)}, its cells are {sorted(cells)}"
        for door, mode in cells:
            assert isinstance(matrix.shard_count(short, mode, door), int) and by_door[door][mode] > 1, short


def test_a_split_class_without_a_count_for_a_cell_is_refused():
    split = next(iter(matrix.SHARD_COUNTS))
    assert matrix.shard_count("no_such_class", "eager", matrix.HTTP) == 1  # unsplit
    with pytest.raises(ValueError, match="has no count for the llm door's eager cells: add one"):
        matrix.shard_count(split, "eager", "llm")


def test_the_readmes_counts_and_releases_are_the_specs():
    """The README's opening gives the matrix's size and the supported releases: checked here, not kept by hand."""
    readme = _read("README.md")
    size = re.search(r"×\s+(\d+)\s+test\s+classes\b.*?:\s+(\d+)\s+Bazel\s+cells", readme, re.DOTALL)
    assert size, "README: the opening's '× N test classes ...: M Bazel cells' is gone (update this test with it)"
    classes, cells = int(size.group(1)), int(size.group(2))
    for door, label in (("async_llm", "`AsyncLLM`"), ("llm", "`vllm.LLM`")):
        said = re.search(re.escape(label) + r":\s+(\d+)", readme)
        assert said and int(said.group(1)) == len(matrix.door_classes(door)), f"README: {label}'s class count"
    assert classes == len(matrix.SLEEP_WAKE_CLASSES), f"README says {classes} test classes"
    http = classes * len(matrix.RUNNERS) * len(matrix.EXECUTION_MODES)
    doors = sum(len(matrix.door_classes(d)) * len(matrix.DOOR_CELLS[d]) for d in matrix.FRONT_DOORS[1:])
    assert cells == http + doors, f"README says {cells} cells, the spec makes {http} HTTP and {doors} door cells"
    releases = re.search(r"supported: \*\*([^*]+)\*\*", readme)
    assert releases and releases.group(1).split(", ") == list(matrix.RELEASES), "README's supported releases"


def test_every_in_process_door_has_its_cells_and_reasons():
    from tools.launcher import door_host  # standalone (the door host imports no spec): the same doors by hand

    assert set(door_host.DOORS) == set(door_host.CANNOT) == set(matrix.FRONT_DOORS[1:])
    doors = set(matrix.FRONT_DOORS[1:])
    assert matrix.HTTP == "http" and set(matrix.DOOR_CELLS) == set(matrix.DOOR_EXCLUDED) == doors
    assert set(matrix.DOOR_FAKE_ONLY) == doors
    for door, cells in matrix.DOOR_CELLS.items():
        assert cells, f"door {door}: no cell (drop it from FRONT_DOORS instead)"
        for cell in cells:
            runner, _, mode = cell.partition("_")
            assert runner in matrix.RUNNERS and mode in matrix.EXECUTION_MODES, f"door {door}: cell {cell}"
        for test_class, reason in matrix.DOOR_EXCLUDED[door].items():
            assert test_class in matrix.SLEEP_WAKE_CLASSES and reason.strip(), (door, test_class)
        assert matrix.door_classes(door), f"door {door}: every class excluded"
        assert set(matrix.DOOR_FAKE_ONLY[door]) <= set(matrix.DOOR_EXCLUDED[door]), (
            f"door {door}: a fake-only class must be excluded from the GPU cells, with its reason"
        )


def test_a_cell_name_splits_into_class_door_runner_and_mode():
    assert matrix.split_cell("flags_mrv1_eager") == ("flags", "http", "mrv1", "eager")
    assert matrix.split_cell("flags_async_llm_mrv2_graph") == ("flags", "async_llm", "mrv2", "graph")
    assert matrix.split_cell("weight_sync_llm_mrv2_graph") == ("weight_sync", "llm", "mrv2", "graph")
    assert matrix.split_cell("flags_fake_mrv1_eager") is None and matrix.split_cell("unit_test") is None
    assert matrix.split_name("flags_mrv1_eager") == ("flags", "mrv1", "eager")
    assert matrix.split_name("flags_llm_mrv2_graph") is None


def test_every_runner_and_mode_says_what_selects_it():
    assert set(matrix.RUNNERS.values()) <= {"0", "1"}, "VLLM_USE_V2_MODEL_RUNNER is 0 or 1"
    assert all(isinstance(flags, list) for flags in matrix.EXECUTION_MODES.values())
    assert matrix.LOG_MARKER_V2.strip()


def test_every_release_has_its_overlay_or_is_the_venvs_pin():
    pinned = re.search(r"^vllm==(\S+)", _read("third_party/python/requirements.in"), re.MULTILINE)
    assert pinned, "third_party/python/requirements.in pins no vllm"
    pin = pinned.group(1)
    assert matrix.SUITE_RELEASE == pin, f"SUITE_RELEASE {matrix.SUITE_RELEASE} is not the venv's pin {pin}"
    assert matrix.SUITE_RELEASE in matrix.RELEASES
    for release in matrix.RELEASES:
        if release != matrix.SUITE_RELEASE:
            assert os.path.isfile(os.path.join(WORKSPACE, "third_party", "python", f"vllm-{release}.overlay.lock")), (
                f"release {release}: no third_party/python/vllm-{release}.overlay.lock (docs/extending.md)"
            )


def test_the_build_files_load_the_spec_instead_of_listing_it():
    for path in (
        "tools/defs.bzl",
        "tests/sleep_wake/BUILD.bazel",
        "tests/mutants/BUILD.bazel",
        "tests/engine/BUILD.bazel",
        "third_party/python/BUILD.bazel",
    ):
        text = _read(path)
        assert 'load("//tools:matrix.bzl"' in text, f"{path} must load what it needs from //tools:matrix.bzl"
        for release in matrix.RELEASES:
            assert f'"{release}"' not in text, f"{path} names release {release}: take it from RELEASES"


def test_a_cells_bazel_shards_are_within_bazels_limit_and_run_as_many_shards_each():
    """Bazel refuses more than BAZEL_MAX_SHARDS at analysis; the class's shards are dealt over the Bazel shards
    round robin (pytest_bazel_plugin.assign_groups), as many to each, give or take one, and none gets none."""
    for short, by_door in matrix.SHARD_COUNTS.items():
        for door, by_mode in by_door.items():
            for mode, count in by_mode.items():
                bazel = matrix.bazel_shard_count(short, mode, door)
                loads = [len(range(i, count, bazel)) for i in range(bazel)]
                assert bazel <= matrix.BAZEL_MAX_SHARDS and min(loads) >= 1 and max(loads) - min(loads) <= 1, (
                    short,
                    door,
                    mode,
                    loads,
                )
    assert matrix.bazel_shard_count("no_such_class", "eager", matrix.HTTP) == 1


def test_every_class_server_setting_is_a_launcher_setting_with_a_valid_value():
    from tools.launcher import config

    settings = {f.name: f for f in config.settings()}
    assert matrix.CLASS_SERVER_SETTINGS, "no class sets a server setting: the test below would check nothing"
    for short, values in matrix.CLASS_SERVER_SETTINGS.items():
        assert short in matrix.SLEEP_WAKE_CLASSES, short
        for name, value in values.items():
            assert name in settings and settings[name].metadata["env"], (short, name)
            choices = settings[name].metadata["choices"]
            assert not choices or value in choices, (short, name, value, choices)


def test_release_key_orders_releases_numerically_and_ignores_the_local_build():
    assert matrix.release_key("0.26.0+cu129") == (0, 26, 0)
    assert matrix.release_key("0.9.2") < matrix.release_key("0.24.0") < matrix.release_key("0.26.0rc1")
    assert sorted(matrix.RELEASES, key=matrix.release_key) == list(matrix.RELEASES)
