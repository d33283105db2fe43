"""The targets tools/defs.bzl generates for tests/sleep_wake/BUILD.bazel, without Bazel.

Starlark BUILD files of this shape are also Python: the BUILD file and the .bzl files it loads are
executed with StarlarkFake standing in for the BUILD language's builtins (native.*, glob, load, ...),
which records every rule declared.
"""

import glob
import os

import pytest

WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MATRIX_PACKAGE = "tests/sleep_wake"


class StarlarkFake:
    """The BUILD-language builtins tests/sleep_wake/BUILD.bazel and the .bzl files it loads use."""

    def __init__(self, package):
        self.package = package
        self.rules = {}  # name -> (kind, attributes)

    def _rule(self, kind):
        def declare(name, **attributes):
            assert name not in self.rules, f"{kind} {name} declared twice"
            self.rules[name] = (kind, attributes)

        return declare

    def package_name(self):
        return self.package

    def glob(self, patterns, exclude=()):
        found: set[str] = set()
        for pattern in patterns:
            found.update(
                os.path.relpath(p, os.path.join(WORKSPACE, self.package))
                for p in glob.glob(os.path.join(WORKSPACE, self.package, pattern), recursive=True)
            )
        return sorted(found - set(exclude))

    # Generated repositories, as a client with no SLEEPWAKE_*_POOL_PROPERTIES writes them.
    GENERATED: dict[str, dict[str, dict]] = {"@sleepwake_remote_pool//:pool.bzl": {"CPU_POOL": {}, "GPU_POOL": {}}}

    def load_bzl(self, label):
        if label in self.GENERATED:
            return dict(self.GENERATED[label])
        path = os.path.join(WORKSPACE, label.lstrip("/").replace(":", "/"))
        scope = self.scope()
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), scope)  # noqa: S102 (our own build files)
        return scope

    def scope(self):
        """Globals for executing a BUILD or .bzl file: the builtins, and load() into these globals."""

        def fail(message):
            raise AssertionError("fail(): " + message)

        native = type("native", (), {})()
        for kind in ("py_test", "py_library", "test_suite", "filegroup"):
            setattr(native, kind, self._rule(kind))
        native.package_name = self.package_name
        native.glob = self.glob
        native.exports_files = lambda files, **_: None
        # rule() and attr: the golden rule (tools/goldens.bzl) declares as its implementation's name.
        attr = type("attr", (), {k: staticmethod(lambda **_: None) for k in ("bool", "label", "string")})()
        scope = {
            "fail": fail,
            "native": native,
            "glob": self.glob,
            "package": lambda **_: None,
            "rule": lambda implementation, **_: self._rule(implementation.__name__.strip("_")),
            "attr": attr,
            "exports_files": native.exports_files,
            "py_library": native.py_library,
            "test_suite": native.test_suite,
            "filegroup": native.filegroup,
        }

        def load(label, *names):
            loaded = self.load_bzl(label)
            scope.update({name: loaded[name] for name in names})

        scope["load"] = load
        return scope


def _evaluate(package):
    fake = StarlarkFake(package)
    scope = fake.scope()
    path = os.path.join(WORKSPACE, package, "BUILD.bazel")
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), scope)  # noqa: S102
    loaded = fake.load_bzl("//tools:matrix.bzl")
    return fake.rules, loaded["SLEEP_WAKE_CLASSES"], loaded["SHARD_COUNTS"]


@pytest.fixture(scope="module")
def matrix():
    return _evaluate(MATRIX_PACKAGE)


def test_the_matrix_cells_stay_one_class_each_and_in_the_default_pattern(matrix):
    rules, classes, shard_counts = matrix
    cells = {
        name: attrs
        for name, (kind, attrs) in rules.items()  # the fake tier's CPU targets aside
        if kind == "py_test" and "gpu" in attrs["tags"]
    }
    from tools import matrix as spec

    doors = {d: len(spec.door_classes(d)) * len(spec.DOOR_CELLS[d]) for d in spec.FRONT_DOORS[1:]}
    assert len(cells) == 4 * len(classes) + sum(doors.values())
    for name, attrs in cells.items():
        test_class = next(c for c in classes if c in attrs["tags"])
        mode = next(m for m in spec.EXECUTION_MODES if m in attrs["tags"])
        split = spec.split_cell(name)
        assert split is not None, f"{name}: no GPU cell's name"
        door = split[1]
        assert len(attrs["args"]) == 1 and attrs["shard_count"] == (
            spec.bazel_shard_count(test_class, mode, door) if test_class in shard_counts else None
        ), name
        assert "manual" not in attrs["tags"], "//tests/sleep_wake/... must keep running every cell"
        # The name, the tag and the server's setting say one door.
        assert door in attrs["tags"] and attrs["env"]["SLEEPWAKE_FRONT_DOOR"] == door, name
        # A walk cell reads its own door's, runner's and mode's plan, written ahead; no other cell waits for one.
        runner = next(r for r in spec.RUNNERS if r in attrs["tags"])
        plan = f"//tests/core/walk:plan_{door}_{runner}_{mode}"
        walks = test_class == "state_walk"
        assert (plan in attrs["data"]) == walks and (
            attrs["env"].get("SLEEPWAKE_WALK_PLAN") == f"$(rootpath {plan})"
        ) == walks, name


def test_only_a_classs_gpu_cells_carry_its_gpu_tag(matrix):
    """tools/run_matrix.sh's walk wave selects gpu_state_walk: a CPU-only target carrying it would run in a
    GPU wave, on the GPU job's critical path."""
    rules, classes, _ = matrix
    for name, (kind, attrs) in rules.items():
        if kind != "py_test":
            continue
        tagged = {t for t in attrs["tags"] if t.startswith("gpu_")}
        if "gpu" in attrs["tags"]:
            test_class = next(c for c in classes if c in attrs["tags"])
            assert tagged == {f"gpu_{test_class}"}, name
        else:
            assert not tagged, f"{name} runs on a CPU but carries {sorted(tagged)}"


def test_starlark_and_python_read_one_spec():
    """tools/defs.bzl takes the runners and modes from tools/matrix.bzl, as tools/matrix.py does: one
    matrix, two readers."""
    from tools import matrix as spec

    loaded = StarlarkFake("tools").load_bzl("//tools:defs.bzl")
    assert loaded["RUNNERS"] == spec.RUNNERS and loaded["EXECUTION_MODES"] == spec.EXECUTION_MODES
    with open(os.path.join(WORKSPACE, "tools", "defs.bzl"), encoding="utf-8") as f:
        assert "\nRUNNERS = " not in f.read(), "defs.bzl must load RUNNERS from //tools:matrix.bzl, not define it"


GOLDEN_PACKAGE = "//tests/sleep_wake/goldens"


def _golden_labels(attrs) -> dict:
    """checkpoint ("a", "b") -> the golden label a target reads from SLEEPWAKE_GOLDEN_<A|B>."""
    return {
        var[-1].lower(): value[len("$(rootpath ") : -1]
        for var, value in attrs["env"].items()
        if var.startswith("SLEEPWAKE_GOLDEN_")
    }


@pytest.mark.parametrize("checkpoint", ["a", "b"])
def test_only_the_golden_classes_cells_take_a_checkpoints_golden_and_each_its_own(matrix, checkpoint):
    """A cell that waited for a golden it does not read would start later for nothing; one that read
    another cell's or checkpoint's golden would compare with the wrong reference."""
    from tools import matrix as spec

    rules, classes, _ = matrix
    cells = {name: attrs for name, (kind, attrs) in rules.items() if kind == "py_test"}
    takers = set()
    for name, attrs in cells.items():
        label = _golden_labels(attrs).get(checkpoint)
        if label is None:
            continue
        takers.add(name)
        assert label in attrs["data"], f"{name} reads {label} without having it as data"
        runner, mode = attrs["env"]["SLEEPWAKE_RUNNER"], attrs["env"]["SLEEPWAKE_EXECUTION_MODE"]
        fake = "fake" in attrs["tags"]
        # A fake door cell takes its runner x mode's golden: the door changes how vLLM is called, not its output.
        door = "_" + attrs["env"]["SLEEPWAKE_FRONT_DOOR"]
        suffix = name.split("_fake_", 1)[1].removesuffix(door) if fake else f"{runner}_{mode}"
        assert label == f"{GOLDEN_PACKAGE}:golden_{checkpoint}_{'fake_' if fake else ''}{suffix}", name
    expected = {n for n, a in cells.items() if any(checkpoint in spec.GOLDEN_CLASSES.get(c, []) for c in a["tags"])}
    assert takers == expected and takers


def test_a_cell_has_no_golden_data_it_does_not_read(matrix):
    rules, _, _ = matrix
    for name, (kind, attrs) in rules.items():
        if kind == "py_test":
            data = {d for d in attrs["data"] if d.startswith(GOLDEN_PACKAGE + ":")}
            assert data == set(_golden_labels(attrs).values()), name


def test_the_state_walk_takes_both_goldens_and_weight_sync_only_bs(matrix):
    rules, _, _ = matrix
    assert sorted(_golden_labels(rules["state_walk_fake_mrv1_eager"][1])) == ["a", "b"]
    assert sorted(_golden_labels(rules["state_walk_mrv2_graph"][1])) == ["a", "b"]
    assert sorted(_golden_labels(rules["weight_sync_mrv1_eager"][1])) == ["b"]
    assert _golden_labels(rules["flags_mrv1_eager"][1]) == {}


def test_every_golden_a_cell_or_mutant_takes_is_declared():
    rules = dict(_evaluate(MATRIX_PACKAGE)[0])
    rules.update(_evaluate("tests/mutants")[0])
    declared = StarlarkFake("tests/sleep_wake/goldens")
    scope = declared.scope()
    scope["py_binary"] = declared._rule("py_binary")
    path = os.path.join(WORKSPACE, "tests/sleep_wake/goldens/BUILD.bazel")
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), scope)  # noqa: S102
    goldens = {
        f"{GOLDEN_PACKAGE}:{name}" for name, (kind, _) in declared.rules.items() if kind == "checkpoint_golden_impl"
    }
    taken = {label for kind, a in rules.values() if kind == "py_test" for label in _golden_labels(a).values()}
    assert {label.rsplit(":", 1)[1].split("_")[1] for label in taken} == {"a", "b"}
    assert taken and taken <= goldens, f"taken but not declared: {sorted(taken - goldens)}"
