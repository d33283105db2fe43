"""Goldens as cached actions: a checkpoint's golden on one cell, taken by a server started once on it.

The weight-sync class compares a server that was pushed checkpoint B with what a fresh server on B
serves; the state walk compares whichever of A and B it pushed last with that checkpoint's. Each
reference is a cell's server start like any other (tens of seconds beside the matrix), started on the
checkpoint itself, never pushed, so the push under test is never its own expectation. As an action keyed
by the checkpoint, the cell (runner, mode), the vLLM/GPU identity and the code that takes it, a matrix
starts it once per checkpoint and cell, and a re-run, a --nocache_test_results run or another runner
sharing the remote cache never. Which classes take which checkpoint's: tools/matrix.bzl GOLDEN_CLASSES.
"""

load("//platforms:exec_properties.bzl", "exec_properties_for_tags")
load("//tools:matrix.bzl", "EXECUTION_MODES", "FAKE_TIER_CELLS", "GOLDEN_CLASSES", "RUNNERS")

_PACKAGE = "//tests/sleep_wake/goldens"

# The checkpoints a golden is taken of: A, the one every cell serves, and B, the one pushed into it.
CHECKPOINTS = ["a", "b"]

def _checkpoint_golden_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".json")
    args = ctx.actions.args()
    args.add("--checkpoint", ctx.file.checkpoint_config)
    args.add("--runner", ctx.attr.runner)
    args.add("--mode", ctx.attr.mode)
    args.add("--out", out)
    args.add("--server_module", ctx.attr.server_module)
    inputs = ctx.files.checkpoint + [ctx.file.checkpoint_config]
    if ctx.file.identity:
        args.add("--identity", ctx.file.identity)
        inputs.append(ctx.file.identity)
    if ctx.attr.fake_vllm_version:
        args.add("--fake_vllm_version", ctx.attr.fake_vllm_version)
    ctx.actions.run(
        executable = ctx.executable._tool,
        arguments = [args],
        inputs = inputs,
        outputs = [out],
        mnemonic = "SleepwakeGolden",
        progress_message = "Taking %s's golden on %s_%s" % (
            ctx.attr.checkpoint.label.name,
            ctx.attr.runner,
            ctx.attr.mode,
        ),
        # The runner's GPU settings the cells get through --test_env (slots, visible GPUs, start mode)
        # come through --action_env (.bazelrc build:gpu): the golden's server leases a slot beside them.
        use_default_shell_env = True,
        # A GPU server takes its slot from the lock files under /tmp and forks from the runner's zygote
        # host there, which a sandbox would hide (the cells run local for the same reason).
        execution_requirements = {"no-sandbox": "1"} if ctx.attr.gpu else {},
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

checkpoint_golden = rule(
    implementation = _checkpoint_golden_impl,
    doc = "<name>.json: a checkpoint's golden (tests/core/goldens.py) on one cell.",
    attrs = {
        "checkpoint": attr.label(mandatory = True, doc = "The checkpoint's files (its genrule)."),
        "checkpoint_config": attr.label(
            mandatory = True,
            allow_single_file = [".json"],
            doc = "The checkpoint's config.json, among those files.",
        ),
        "runner": attr.string(mandatory = True, doc = "The cell's model runner."),
        "mode": attr.string(mandatory = True, doc = "The cell's execution mode."),
        "gpu": attr.bool(default = True, doc = "A vLLM server on a GPU; False: the fake server on a CPU."),
        "identity": attr.label(
            allow_single_file = True,
            doc = "The vLLM/GPU identity (a key input; the served release is checked).",
        ),
        "server_module": attr.string(default = "tools.launcher.server", doc = "Whose VllmServer serves."),
        "fake_vllm_version": attr.string(doc = "The release whose response shapes the fake serves."),
        # cfg = "target": the golden runs the toolchain's Python with its vLLM, as the cells do.
        "_tool": attr.label(default = _PACKAGE + ":take_golden", executable = True, cfg = "target"),
    },
)

def golden_label(checkpoint, runner, mode, fake_cell = None):
    """The label of a checkpoint's golden on a GPU cell, or on a fake cell.

    Args:
      checkpoint: "a" or "b".
      runner: the cell's model runner.
      mode: the cell's execution mode.
      fake_cell: "<runner>_<mode>[_vllm<v>]" for the fake server's golden; None for a GPU cell's.

    Returns:
      golden_<checkpoint>_<runner>_<mode>, or golden_<checkpoint>_fake_<cell>, in the goldens' package.
    """
    if checkpoint not in CHECKPOINTS:
        fail("golden of checkpoint %r: the goldens are of %s (tools/matrix.bzl GOLDEN_CLASSES)" % (
            checkpoint,
            CHECKPOINTS,
        ))
    if fake_cell:
        return "%s:golden_%s_fake_%s" % (_PACKAGE, checkpoint, fake_cell)
    return "%s:golden_%s_%s_%s" % (_PACKAGE, checkpoint, runner, mode)

def golden_fake_cells(checkpoint):
    """The fake cells that take a checkpoint's golden.

    Every <runner>_<mode> (the fake mutants run on one) and the fake-tier cells of each class that
    compares with it (GOLDEN_CLASSES).

    Args:
      checkpoint: "a" or "b".

    Returns:
      The cells, "<runner>_<mode>[_vllm<version>]", sorted.
    """
    cells = {"%s_%s" % (r, m): None for r in RUNNERS for m in EXECUTION_MODES}
    for test_class, checkpoints in GOLDEN_CLASSES.items():
        if checkpoint in checkpoints:
            for cell in FAKE_TIER_CELLS.get(test_class, []):
                cells[cell] = None
    return sorted(cells.keys())

# buildifier: disable=unnamed-macro (it declares one target per cell, each named by its cell: a name would name none)
def checkpoint_goldens(checkpoints, fake_checkpoints, runners, modes, identity, fake_server_module, gpu_tags):
    """Each checkpoint's golden on every GPU cell and on the fake cells that take it (golden_fake_cells).

    Each is tagged manual: built only for the cells that take them.

    Args:
      checkpoints: "a"/"b" -> (files, config.json) of the GPU cells' checkpoint.
      fake_checkpoints: "a"/"b" -> (files, config.json) of the fake cells' checkpoint.
      runners: the GPU cells' runners.
      modes: the GPU cells' execution modes.
      identity: the vLLM/GPU identity file the GPU cells read.
      fake_server_module: the fake server's module.
      gpu_tags: the GPU cells' tags (the golden's server needs a GPU where they do).
    """
    if sorted(checkpoints.keys()) != CHECKPOINTS or sorted(fake_checkpoints.keys()) != CHECKPOINTS:
        fail("checkpoint_goldens: checkpoints and fake_checkpoints must give the files of %s" % CHECKPOINTS)
    for checkpoint in CHECKPOINTS:
        files = checkpoints[checkpoint]
        for runner in runners:
            for mode in modes:
                checkpoint_golden(
                    name = "golden_%s_%s_%s" % (checkpoint, runner, mode),
                    checkpoint = files[0],
                    checkpoint_config = files[1],
                    runner = runner,
                    mode = mode,
                    identity = identity,
                    tags = gpu_tags + ["manual"],
                    testonly = True,
                    exec_properties = exec_properties_for_tags(gpu_tags),
                )
        fake_files = fake_checkpoints[checkpoint]
        for cell in golden_fake_cells(checkpoint):
            parts = cell.split("_", 2)
            checkpoint_golden(
                name = "golden_%s_fake_%s" % (checkpoint, cell),
                checkpoint = fake_files[0],
                checkpoint_config = fake_files[1],
                runner = parts[0],
                mode = parts[1],
                gpu = False,
                server_module = fake_server_module,
                fake_vllm_version = parts[2][len("vllm"):] if len(parts) == 3 else "",
                tags = ["manual"],
                testonly = True,
            )
