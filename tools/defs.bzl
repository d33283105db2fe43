"""Bazel macros of the sleepwake suite: one pytest-backed py_test, and the GPU matrix built from it.

Modelled on JAX's jax_multiplatform_test: one macro expands a test source into per-configuration
targets with per-configuration tags, plus test_suites to select slices. Every parameter here changes
what is generated.
"""

load("//platforms:exec_properties.bzl", "exec_properties_for_tags")
load("//tools:goldens.bzl", "CHECKPOINTS", "golden_label")
load("//tools:matrix.bzl", "BAZEL_MAX_SHARDS", "CLASS_SERVER_SETTINGS", "DOOR_CELLS", "DOOR_EXCLUDED", "DOOR_FAKE_ONLY", "EXECUTION_MODES", "FRONT_DOORS", "GOLDEN_CLASSES", "RUNNERS")

# Tags every GPU cell carries. `gpu` is what the default (CPU) config filters out; the others are
# the names TF/XLA/JAX runners already select on.
GPU_TAGS = ["gpu", "requires-gpu-nvidia", "sleep_wake"]

def gpu_class_tag(test_class):
    """The tag only a class's GPU cells carry.

    Bazel's --test_tag_filters selects a target having any of its positive tags, so the class's own tag
    would bring the fake tier's targets of the class along (tools/run_matrix.sh's walk wave selects
    gpu_state_walk, and runs no CPU-only target).

    Args:
      test_class: the class short name.

    Returns:
      "gpu_" + test_class.
    """
    return "gpu_" + test_class

_MODEL_CONFIG = "//tools/checkpoints:synthetic_qwen3/config.json"
_MODEL = "//tools/checkpoints:synthetic_qwen3"

# Checkpoint B (same shapes, other seed): the new weights the weight-sync class pushes into a server.
_MODEL_B_CONFIG = "//tools/checkpoints:synthetic_qwen3_b/config.json"
_MODEL_B = "//tools/checkpoints:synthetic_qwen3_b"
_GPU_IDENTITY = "@sleepwake_gpu//:identity.txt"
_LOCK = "//third_party/python:requirements.lock"

def _is_test_file(src):
    base = src.split("/")[-1]
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))

def sleepwake_py_test(
        name,
        srcs,
        deps = [],
        data = [],
        env = {},
        tags = [],
        size = "small",
        timeout = None,
        shard_count = None,
        args = []):
    """A py_test whose main is tools/pytest_bridge/pytest_main.py, collecting the test files among srcs.

    Args:
      name: target name.
      srcs: Python sources; files named test_*.py or *_test.py are handed to pytest.
      deps: py_library dependencies.
      data: runfiles.
      env: environment for the test process ($(rootpath ...) is expanded).
      tags: Bazel tags.
      size: Bazel test size.
      timeout: Bazel test timeout; None keeps the size's default.
      shard_count: Bazel shards; pytest_main keeps each test class inside one shard.
      args: extra pytest arguments after the test files.
    """
    test_files = [s for s in srcs if _is_test_file(s)]
    if not test_files:
        fail("sleepwake_py_test %s: no test_*.py or *_test.py among srcs %s" % (name, srcs))
    pkg = native.package_name()
    native.py_test(
        name = name,
        srcs = srcs + ["//tools/pytest_bridge:pytest_main.py"],
        main = "//tools/pytest_bridge:pytest_main.py",
        deps = deps + ["//tools/pytest_bridge:pytest_bazel"],
        # The toolchains' interpreters sit at fixed paths outside Bazel's view: the lock they are built
        # from (the CPU venv, the GPU runner's overlay) makes their contents part of every key.
        data = data + [_LOCK],
        env = env,
        args = [(pkg + "/" + f) if pkg else f for f in test_files] + args,
        tags = tags,
        size = size,
        timeout = timeout,
        shard_count = shard_count,
        # Under --config=remote, GPU-tagged tests go to the GPU pool (platforms/exec_properties.bzl).
        exec_properties = exec_properties_for_tags(tags),
        python_version = "PY3",
        srcs_version = "PY3",
    )

# Runfiles every GPU cell needs: the checkpoint it serves, checkpoint B (pushed as new weights by the
# weight-sync class) and the vLLM/GPU identity (a cache-key input).
GPU_CELL_DATA = [_MODEL, _MODEL_CONFIG, _MODEL_B, _MODEL_B_CONFIG, _GPU_IDENTITY]

# The fake tier's server module (tests/sleep_wake/conftest.py SLEEPWAKE_SERVER_MODULE) and what it
# needs: the small checkpoints A and B, whose tensor bytes become the fake's weights pool and whose
# digests what it generates, and the fake itself.
FAKE_SERVER_MODULE = "tests.sleep_wake.fakes.fake_server"
_SMALL_MODEL = "//tools/checkpoints:synthetic_qwen3_small"
_SMALL_MODEL_CONFIG = "//tools/checkpoints:synthetic_qwen3_small/config.json"
_SMALL_MODEL_B = "//tools/checkpoints:synthetic_qwen3_small_b"
_SMALL_MODEL_B_CONFIG = "//tools/checkpoints:synthetic_qwen3_small_b/config.json"
FAKE_CELL_DATA = [_SMALL_MODEL, _SMALL_MODEL_CONFIG, _SMALL_MODEL_B, _SMALL_MODEL_B_CONFIG]

# What the golden actions take (tests/sleep_wake/goldens, tools/goldens.bzl): each checkpoint (its files,
# its config.json) of the GPU cells and of the fake ones, and the identity the GPU cells read.
GOLDEN_CHECKPOINTS = {"a": (_MODEL, _MODEL_CONFIG), "b": (_MODEL_B, _MODEL_B_CONFIG)}
FAKE_GOLDEN_CHECKPOINTS = {"a": (_SMALL_MODEL, _SMALL_MODEL_CONFIG), "b": (_SMALL_MODEL_B, _SMALL_MODEL_B_CONFIG)}
GPU_IDENTITY = _GPU_IDENTITY
FAKE_CELL_DEPS = ["//tests/sleep_wake/fakes"]

def gpu_cell_env(runner, mode, door = "http"):
    """The environment that configures a GPU cell (ServerConfig.from_env, read once by tests/core/cells.py)."""
    return {
        "SLEEPWAKE_FRONT_DOOR": door,
        "SLEEPWAKE_RUNNER": runner,
        "SLEEPWAKE_EXECUTION_MODE": mode,
        "SLEEPWAKE_MODEL": "$(rootpath %s)" % _MODEL_CONFIG,
        "SLEEPWAKE_MODEL_B": "$(rootpath %s)" % _MODEL_B_CONFIG,
        "SLEEPWAKE_VLLM_IDENTITY": "$(rootpath %s)" % _GPU_IDENTITY,
    }

def class_server_env(test_class):
    """The variables of the server settings a class's GPU cells start with (CLASS_SERVER_SETTINGS)."""
    return {"SLEEPWAKE_" + name.upper(): value for name, value in CLASS_SERVER_SETTINGS.get(test_class, {}).items()}

def cell_goldens(classes, runner, mode, fake_cell = None):
    """The env and data that give a target the goldens of the checkpoints its classes compare with.

    Only the checkpoints one of `classes` compares with (GOLDEN_CLASSES), so no cell waits for an action
    whose file it does not read; each golden's runfile path is SLEEPWAKE_GOLDEN_<A|B> (tests/sleep_wake/
    tests/core/goldens.py ENV).

    Args:
      classes: the test classes the target runs.
      runner: the cell's model runner.
      mode: the cell's execution mode.
      fake_cell: "<runner>_<mode>[_vllm<version>]" for the fake server's goldens; None for a GPU cell's.

    Returns:
      (env, data): the variables and the goldens' labels, or ({}, []).
    """
    env = {}
    data = []
    for checkpoint in CHECKPOINTS:
        if [c for c in classes if checkpoint in GOLDEN_CLASSES.get(c, [])]:
            label = golden_label(checkpoint, runner, mode, fake_cell)
            env["SLEEPWAKE_GOLDEN_" + checkpoint.upper()] = "$(rootpath %s)" % label
            data.append(label)
    return env, data

def cell_walk_plan(classes, runner, mode, door, alone = False):
    """The env and data that give a walk cell its plan, written ahead (tests/core/walk/write_plan.py).

    Args:
      classes: the target's class short names; only state_walk walks.
      runner: the cell's model runner.
      mode: the cell's execution mode.
      door: the cell's front door.
      alone: the cell runs without its door's other cells (the fake tier's, the mutants'), so it walks
        every pair of its door (SLEEPWAKE_WALK_SHARE=door) instead of its share of the deal.

    Returns:
      (env, data): SLEEPWAKE_WALK_PLAN and SLEEPWAKE_WALK_SHARE, and the plan's label, or ({}, []).
    """
    if "state_walk" not in classes:
        return {}, []
    label = "//tests/core/walk:plan_%s_%s_%s%s" % (door, runner, mode, "_door" if alone else "")
    env = {"SLEEPWAKE_WALK_PLAN": "$(rootpath %s)" % label, "SLEEPWAKE_WALK_SHARE": "door" if alone else "cell"}
    return env, [label]

def fake_cell_env(runner, mode, vllm_version = None, door = "http"):
    """A cell's environment with the fake server (fake_server.py) in place of vLLM's.

    Args:
      runner: the cell's model runner.
      mode: the cell's execution mode.
      vllm_version: the release whose response shapes the fake serves; None for its default.
      door: the front door the fake stands for (http, or the door host of an in-process door).

    Returns:
      The test's env dict.
    """
    env = {
        "SLEEPWAKE_FRONT_DOOR": door,
        "SLEEPWAKE_RUNNER": runner,
        "SLEEPWAKE_EXECUTION_MODE": mode,
        "SLEEPWAKE_MODEL": "$(rootpath %s)" % _SMALL_MODEL_CONFIG,
        "SLEEPWAKE_MODEL_B": "$(rootpath %s)" % _SMALL_MODEL_B_CONFIG,
        "SLEEPWAKE_SERVER_MODULE": FAKE_SERVER_MODULE,
    }
    if vllm_version:
        env["SLEEPWAKE_FAKE_VLLM_VERSION"] = vllm_version
    return env

def _runner_modes(runners, modes):
    """Every (runner, mode) pair, after checking both are known."""
    for runner in runners:
        if runner not in RUNNERS:
            fail("unknown runner %s; known: %s" % (runner, RUNNERS))
    for mode in modes:
        if mode not in EXECUTION_MODES:
            fail("unknown execution mode %s; known: %s" % (mode, EXECUTION_MODES))
    return [(runner, mode) for runner in runners for mode in modes]

def cell_name(test_class, runner, mode, door = "http"):
    """The one naming pattern of matrix cells.

    <class>_<runner>_<mode> through HTTP, e.g. scheduler_gate_mrv1_eager, and <class>_<door>_<runner>_<mode>
    through an in-process door, e.g. scheduler_gate_async_llm_mrv2_graph.

    Args:
      test_class: the class short name.
      runner: the cell's model runner.
      mode: the cell's execution mode.
      door: the cell's front door.

    Returns:
      The target name.
    """
    if door == "http":
        return "%s_%s_%s" % (test_class, runner, mode)
    return "%s_%s_%s_%s" % (test_class, door, runner, mode)

def _shard_count(shard_counts, test_class, door, mode):
    """A cell's Bazel shard_count; None for an unsplit class.

    Its class's SHARD_COUNTS entry for its door and mode, dealt evenly over at most BAZEL_MAX_SHARDS.

    The twin of tools/matrix.py bazel_shard_count.
    """
    if test_class not in shard_counts:
        return None
    count = shard_counts[test_class].get(door, {}).get(mode)
    if count == None:
        fail("tools/matrix.bzl SHARD_COUNTS[%s] has no count for the %s door's %s cells: add one" % (
            test_class,
            door,
            mode,
        ))
    per_shard = (count + BAZEL_MAX_SHARDS - 1) // BAZEL_MAX_SHARDS
    return (count + per_shard - 1) // per_shard

def _door_cells(classes, runners, modes):
    """(class, door, runner, mode) of every cell of the matrix.

    Each class on every runner x mode through HTTP, and each in-process door's classes (those
    DOOR_EXCLUDED does not exclude) on its DOOR_CELLS.
    """
    out = [(c, "http", r, m) for c in classes for r, m in _runner_modes(runners, modes)]
    for door in FRONT_DOORS[1:]:
        for c in classes:
            if c in DOOR_EXCLUDED[door]:
                continue
            for cell in DOOR_CELLS[door]:
                runner, mode = cell.split("_", 1)
                if runner in runners and mode in modes:
                    out.append((c, door, runner, mode))
    return out

def sleep_wake_matrix(
        name,
        classes,
        deps,
        runners = RUNNERS,
        modes = EXECUTION_MODES,
        timeout = "long",
        shard_counts = {}):
    """The GPU cells and the test_suites that pick slices of them.

    One py_test per test class x runner x execution mode through HTTP, and per class x cell of each
    in-process door (tools/matrix.bzl DOOR_CELLS).

    Args:
      name: the test_suite holding every cell.
      classes: dict of class short name (used in target names and tags) -> test source file.
      deps: libraries the test files import (fixtures, client, launcher).
      runners: subset of RUNNERS to generate.
      modes: subset of EXECUTION_MODES to generate.
      timeout: Bazel timeout of each cell. A cell starts one vLLM server (48-110 s measured, more when
        cells share CPUs); the tests themselves bound every wait, so a hang fails inside the timeout.
      shard_counts: class short name -> {door: {mode: shard_count}} (tools/matrix.bzl SHARD_COUNTS), for
        classes large enough to split (a shard keeps a pytest class whole, so this pays only for files
        holding several classes, e.g. real models).
    """
    by_runner = {r: [] for r in runners}
    by_mode = {m: [] for m in modes}
    by_class = {c: [] for c in classes}
    by_door = {d: [] for d in FRONT_DOORS}
    for test_class, door, runner, mode in _door_cells(classes, runners, modes):
        cell = cell_name(test_class, runner, mode, door)
        golden_env, golden_data = cell_goldens([test_class], runner, mode)
        plan_env, plan_data = cell_walk_plan([test_class], runner, mode, door)
        sleepwake_py_test(
            name = cell,
            srcs = [classes[test_class]],
            deps = deps,
            data = GPU_CELL_DATA + golden_data + plan_data,
            env = dict(dict(dict(gpu_cell_env(runner, mode, door), **golden_env), **plan_env), **class_server_env(test_class)),
            tags = GPU_TAGS + [runner, mode, test_class, gpu_class_tag(test_class), door],
            size = "large",
            timeout = timeout,
            shard_count = _shard_count(shard_counts, test_class, door, mode),
        )
        by_runner[runner].append(cell)
        by_mode[mode].append(cell)
        by_class[test_class].append(cell)
        by_door[door].append(cell)

    # test_suite's tag filtering would drop `manual` cells; the lists are explicit instead.
    for group in [by_runner, by_mode, by_class, by_door]:
        for suite, cells in group.items():
            native.test_suite(name = suite, tests = [":" + c for c in cells])
    native.test_suite(name = name, tests = [":" + m for m in modes])

def sleep_wake_fake_tier(name, classes, cells, deps, shard_counts = {}):
    """One CPU py_test per class x fake cell: the class's file run against the fake server.

    A collection or import error fails the target like any failing test, so a class that stops
    importing under the fake breaks CI.

    Args:
      name: the test_suite holding every target.
      classes: dict of class short name -> test source file (tools/matrix.bzl).
      cells: dict of class short name -> fake cells, each "<runner>_<mode>" or
        "<runner>_<mode>_vllm<version>" (the fake then serves that release's response shapes).
        Target names: <class>_fake_<cell>[_<door>], e.g. flags_fake_mrv1_eager, flags_fake_mrv2_graph_vllm0.25.0_llm.
      deps: libraries the test files import (the fixtures); the fakes are added.
      shard_counts: class short name -> {door: {mode: shard_count}} (tools/matrix.bzl SHARD_COUNTS): a split
        class's fake target is split as its GPU cells are, each shard its own fake server, so that the walk's
        every shard runs within the size's timeout.
    """
    tests = []
    for test_class, class_cells in cells.items():
        if test_class not in classes:
            fail("fake tier: %s is not a class of the suite (%s)" % (test_class, classes.keys()))

        # Each in-process door's cells too, for the classes that door runs: the fake answers what the door
        # cannot do as the door host does (tests/sleep_wake/fakes/fake_vllm.py), so an exclusion missing
        # from DOOR_EXCLUDED fails here, on a CPU.
        # A class's release cells go through each door too, on that door's cell: what differs by release
        # may differ by door (the router's answers, which an in-process door skips).
        releases = [c.split("_", 2)[2] for c in class_cells if len(c.split("_", 2)) == 3]
        door_cells = [(c, "http") for c in class_cells]
        for door in FRONT_DOORS[1:]:
            if test_class not in DOOR_EXCLUDED[door] or test_class in DOOR_FAKE_ONLY[door]:
                door_cells.append((DOOR_CELLS[door][0], door))
                door_cells += [(DOOR_CELLS[door][0] + "_" + release, door) for release in releases]
        for cell, door in door_cells:
            parts = cell.split("_", 2)
            if len(parts) < 2 or parts[0] not in RUNNERS or parts[1] not in EXECUTION_MODES:
                fail("fake cell %s of %s: expected <runner>_<mode>[_vllm<version>]" % (cell, test_class))
            version = None
            if len(parts) == 3:
                if not parts[2].startswith("vllm"):
                    fail("fake cell %s of %s: the suffix must be vllm<version>" % (cell, test_class))
                version = parts[2][len("vllm"):]
            target = "%s_fake_%s" % (test_class, cell) + ("" if door == "http" else "_" + door)
            golden_env, golden_data = cell_goldens([test_class], parts[0], parts[1], cell)
            plan_env, plan_data = cell_walk_plan([test_class], parts[0], parts[1], door, alone = True)
            sleepwake_py_test(
                name = target,
                srcs = [classes[test_class]],
                deps = deps + FAKE_CELL_DEPS,
                data = FAKE_CELL_DATA + golden_data + plan_data,
                env = dict(dict(fake_cell_env(parts[0], parts[1], version, door), **golden_env), **plan_env),
                tags = ["fake", test_class, door],
                size = "medium",
                shard_count = _shard_count(shard_counts, test_class, door, parts[1]),
            )
            tests.append(":" + target)
    native.test_suite(name = name, tests = tests)
