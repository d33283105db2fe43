"""The reuse equivalence target: reuse_equivalence_test.py over a class order, on a cell of the fake tier or a GPU."""

load("//tools:defs.bzl", "cell_goldens", "cell_walk_plan", "sleepwake_py_test")
load("//tools:matrix.bzl", "SLEEP_WAKE_CLASSES")

_FIRST = "testdata/test_leaves_garbage.py"  # the class that leaves garbage weights, always first

def reuse_equivalence(name, order, runner, mode, cell_env, cell_data, fake_cell = None, door = "http", **kwargs):
    """A reuse_equivalence_test.py target: the garbage-leaving class, then `order`, on one cell.

    Args:
      name: the target.
      order: class short names (tools/matrix.bzl SLEEP_WAKE_CLASSES), in their forward order.
      runner: the cell's model runner.
      mode: the cell's execution mode.
      cell_env: the cell's environment (fake_cell_env or gpu_cell_env).
      cell_data: what the cell's servers read (FAKE_CELL_DATA or GPU_CELL_DATA).
      fake_cell: "<runner>_<mode>" for the fake's goldens; None for a GPU's.
      door: the cell's front door (its walk plan, where the order holds the state walk).
      **kwargs: size, tags, deps of the sleepwake_py_test.
    """
    golden_env, golden_data = cell_goldens(["state_walk"], runner, mode, fake_cell)  # A and B
    files = [_FIRST] + ["//tests/sleep_wake:" + SLEEP_WAKE_CLASSES[c] for c in order]
    plan_env, plan_data = cell_walk_plan(order, runner, mode, door)
    env = dict(cell_env)
    env.update(golden_env)
    env.update(plan_env)
    env["SLEEPWAKE_REUSE_CLASS_FILES"] = ",".join(["$(rootpath %s)" % f for f in files])
    sleepwake_py_test(
        name = name,
        srcs = [
            "__init__.py",
            "reuse_equivalence_test.py",
        ],
        data = files + cell_data + golden_data + plan_data,
        env = env,
        **kwargs
    )
