"""mutant_suite: one GPU py_test per catalogued mutant (plus a control), on the MRV2-eager cell, or the
door's own matrix cell for a mutant through an in-process door.

Each target runs tests/mutants/mutant_test.py, which runs the mutant's killing classes in one pytest
subprocess against vLLM servers that load the sleepwake_mutants plugin, and passes only if every
listed class failed for the catalogued reason (the control: if every test passed).

A mutant of an in-process front door's own code (the catalogue's `door`, here `doors`) runs its classes
through that door (the door host, tools/launcher/door_host.py) on the door's cell in the matrix
(tools/matrix.bzl DOOR_CELLS, whose bounds the matrix measures run after run), and has an HTTP twin on that
runner and mode, mutant_<name>_http: the same classes through vLLM's server under the same mutant, which
must pass with the mutant applied and never reached (the defect is the door's own). Its classes get a
control through the door too, mutant_control_<class>_<door>, since the mutants' cell is no door cell of
the matrix.
"""

load(
    "//tools:defs.bzl",
    "FAKE_CELL_DATA",
    "FAKE_CELL_DEPS",
    "GPU_CELL_DATA",
    "GPU_TAGS",
    "cell_goldens",
    "cell_walk_plan",
    "fake_cell_env",
    "gpu_cell_env",
    "sleepwake_py_test",
)
load("//tools:matrix.bzl", "DOOR_CELLS")

_CLASS_PACKAGE = "//tests/sleep_wake:"

# What mutant_test.py imports: the suite's fixtures and the mutants' library (site_dir, verdict, the plugin).
_DEPS = ["//tests/sleep_wake:fixtures", "//tests/sleep_wake/walk", "//tests/mutants:lib"]

# Mutants are observed on one cell: MRV2 (vLLM 0.26.0's default runner for dense models) in eager mode
# (no graph capture, so servers start fastest).
_RUNNER = "mrv2"
_MODE = "eager"

# How many of a target's shards (tools/matrix.bzl SHARD_COUNTS) run side by side (mutant_test.py), each
# with its own server: on a GPU runner they wait for slots as cells do, and a surviving walk mutant or the
# control takes a quarter of its shards' times one after another; on CI's two cores two (one at a time
# took the fake's walk control past its inner bound: a pytest start per shard).
_SHARDS_AT_ONCE = {"gpu": "4", "fake": "2"}

def _mode(door, own_door):
    """The execution mode a target runs in.

    An in-process door's target (its own, or its twin's) takes the door's mode in the matrix, since its
    controls are judged by the bounds of a cell the matrix runs (the colocated engine comes back from a
    level-2 sleep further below its awake bytes in eager mode than an HTTP server does).
    """
    in_process = door if door != "http" else own_door
    if in_process == "http":
        return _MODE
    runner, mode = DOOR_CELLS[in_process][0].split("_")
    if runner != _RUNNER:
        fail("door %s runs on %s, not the mutants' runner %s" % (in_process, DOOR_CELLS[in_process][0], _RUNNER))
    return mode

def _mutant_target(name, mutant, classes, class_files, fake, door = "http", own_door = "http"):
    """One target: `classes` under `mutant` through the front door `door`.

    own_door is the mutant's own door (the catalogue's): a target through another door is its twin, whose
    classes must all pass (mutant_test.py reads SLEEPWAKE_MUTANT_DOOR against the cell's door).
    """
    mode = _mode(door, own_door)
    unknown = [c for c in classes if c not in class_files]
    if unknown:
        fail("mutant %s: classes %s are not in class_files (%s)" % (mutant, unknown, class_files.keys()))
    if not classes:
        fail("mutant %s: no classes; list the classes expected to kill it" % mutant)
    files = [_CLASS_PACKAGE + class_files[c] for c in classes]
    env = dict(
        SLEEPWAKE_MUTANT_UNDER_TEST = mutant,
        SLEEPWAKE_MUTANT_CLASSES = ",".join(classes),
        SLEEPWAKE_MUTANT_CLASS_FILES = ",".join(
            ["%s=$(rootpath %s)" % (c, f) for c, f in zip(classes, files)],
        ),
        SLEEPWAKE_MUTANT_SHARDS_AT_ONCE = _SHARDS_AT_ONCE["fake" if fake else "gpu"],
    )
    tags = ["mutant", _RUNNER, mode]
    if own_door != "http" and mutant != "none":
        env["SLEEPWAKE_MUTANT_DOOR"] = own_door
    if door != "http" or own_door != "http":
        tags.append(door)  # as the matrix's cells: the front door they run through
    if door != own_door:
        tags.append("off_door")
    golden_env, golden_data = cell_goldens(classes, _RUNNER, mode, "%s_%s" % (_RUNNER, mode) if fake else None)
    env.update(golden_env)
    plan_env, plan_data = cell_walk_plan(classes, _RUNNER, mode, door, alone = True)
    env.update(plan_env)
    files = files + golden_data + plan_data
    if fake:
        if door != "http" or own_door != "http":
            fail("mutant %s: the fake has no in-process door's code (fake_defects.py NOT_RE_CREATED)" % mutant)

        # The fake server re-creates the mutant (tests/sleep_wake/fakes/fake_engine.py DEFECTS) and
        # logs the plugin's activation line, so mutant_test.py judges it as on the GPU, on a CPU in seconds.
        env.update(fake_cell_env(_RUNNER, mode))
        sleepwake_py_test(
            name = name,
            srcs = ["mutant_test.py"],
            deps = _DEPS + FAKE_CELL_DEPS,
            data = files + FAKE_CELL_DATA,
            env = env,
            tags = ["mutant", "fake", _RUNNER, mode],
            size = "medium",
            # The walk's control walks every shard to its end: its inner pytest took 133 s alone on the
            # CPU machine and was cut at the 150 s a medium test leaves it (mutant_test.py TIMEOUT_MARGIN_S)
            # beside the CPU suite, once its 31 shards walked /pause, /resume and the pushes.
            timeout = "long" if mutant == "none" and "state_walk" in classes else None,
        )
        return
    env.update(gpu_cell_env(_RUNNER, mode, door))
    sleepwake_py_test(
        name = name,
        srcs = ["mutant_test.py"],
        deps = _DEPS,
        data = files + GPU_CELL_DATA,
        env = env,
        tags = GPU_TAGS + tags,
        size = "large",
        # One vLLM server per class, started one after another in the same target: a matrix cell
        # (one class) fits "long" (900 s); several classes need "eternal" (3600 s).
        timeout = "long" if len(classes) == 1 else "eternal",
    )

def mutant_suite(name, mutants, control_classes, class_files, fake = False, doors = {}, door_suite = None):
    """mutant_<name> per mutant, mutant_control_<class> per control class, and a test_suite `name`.

    With fake = True the targets (fake_mutant_<name>, fake_mutant_control_<class>) run on a CPU
    against the fake server instead of vLLM.

    A mutant in `doors` runs through its door, and also gets mutant_<name>_http (its HTTP twin, which must
    pass) and, per class of its, mutant_control_<class>_<door> (no mutant, through the door).

    Args:
      name: the test_suite of every generated target.
      mutants: mutant name (a key of sleepwake_mutants.MUTANTS) -> class short names expected to
        kill it; must equal the catalogue's `kills` keys (checked at run time and by a unit test).
      control_classes: class short names the control (the plugin loaded, no mutant) runs, one
        target each; all must pass.
      class_files: class short name -> its file in //tests/sleep_wake (as in sleep_wake_matrix).
      fake: the fake tier's targets instead of vLLM's.
      doors: mutant name -> its in-process front door (the catalogue's `door`), for the mutants that have
        one; every other mutant runs through HTTP. Must equal the catalogue's (a unit test checks).
      door_suite: a test_suite of the door mutants' targets, twins and door controls, if named.
    """
    prefix = "fake_mutant_" if fake else "mutant_"
    tests = []
    door_tests = []
    door_controls = {}  # (class, door) -> True, in first-seen order
    for mutant, classes in mutants.items():
        if mutant == "none":
            fail("'none' is the control's name; pass its classes as control_classes")
        door = doors.get(mutant, "http")
        _mutant_target(prefix + mutant, mutant, classes, class_files, fake, door, door)
        tests.append(":" + prefix + mutant)
        if door == "http":
            continue
        _mutant_target(prefix + mutant + "_http", mutant, classes, class_files, fake, "http", door)
        door_tests += [":" + prefix + mutant, ":" + prefix + mutant + "_http"]
        for test_class in classes:
            door_controls[(test_class, door)] = True
    for mutant in doors:
        if mutant not in mutants:
            fail("doors names %s, which is not among the mutants" % mutant)

    # One control per class, so the control's servers start in parallel like the mutants' do.
    for test_class in control_classes:
        _mutant_target(prefix + "control_" + test_class, "none", [test_class], class_files, fake)
        tests.append(":" + prefix + "control_" + test_class)
    for test_class, door in door_controls.keys():
        control = prefix + "control_" + test_class + "_" + door
        _mutant_target(control, "none", [test_class], class_files, fake, door, door)
        door_tests.append(":" + control)
    tests += [t for t in door_tests if t not in tests]

    # Explicit lists, as in sleep_wake_matrix: a test_suite's own tag filtering would drop targets.
    native.test_suite(name = name, tests = tests)
    if door_suite:
        native.test_suite(name = door_suite, tests = door_tests)
