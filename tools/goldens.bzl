"""Goldens as cached actions: a checkpoint's golden on one cell, taken by a server started once.

The weight-sync class compares a server that was pushed checkpoint B with what a fresh server on B
serves. That fresh server is a cell's server start like any other (tens of seconds beside the matrix);
as an action keyed by the checkpoint, the cell (runner, mode), the vLLM/GPU identity and the code that
takes it, a matrix starts it once per cell and a re-run, a --nocache_test_results run or another runner
sharing the remote cache never.
"""

load("//platforms:exec_properties.bzl", "exec_properties_for_tags")

_PACKAGE = "//tests/sleep_wake/goldens"

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
        progress_message = "Taking %s's golden on %s_%s" % (ctx.attr.checkpoint.label.name, ctx.attr.runner,
                                                          ctx.attr.mode),
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
    doc = "<name>.json: a checkpoint's golden (tests/sleep_wake/lib/goldens.py) on one cell.",
    attrs = {
        "checkpoint": attr.label(mandatory = True, doc = "The checkpoint's files (its genrule)."),
        "checkpoint_config": attr.label(mandatory = True, allow_single_file = [".json"],
                                        doc = "The checkpoint's config.json, among those files."),
        "runner": attr.string(mandatory = True, doc = "The cell's model runner."),
        "mode": attr.string(mandatory = True, doc = "The cell's execution mode."),
        "gpu": attr.bool(default = True, doc = "A vLLM server on a GPU; False: the fake server on a CPU."),
        "identity": attr.label(allow_single_file = True,
                               doc = "The vLLM/GPU identity (a key input; the served release is checked)."),
        "server_module": attr.string(default = "tools.launcher.server", doc = "Whose VllmServer serves."),
        "fake_vllm_version": attr.string(doc = "The release whose response shapes the fake serves."),
        # cfg = "target": the golden runs the toolchain's Python with its vLLM, as the cells do.
        "_tool": attr.label(default = _PACKAGE + ":take_golden", executable = True, cfg = "target"),
    },
)

def checkpoint_b_golden_label(runner, mode, fake_cell = None):
    """The label of checkpoint B's golden on a GPU cell, or on a fake cell ("<runner>_<mode>[_vllm<v>]")."""
    if fake_cell:
        return "%s:checkpoint_b_fake_%s" % (_PACKAGE, fake_cell)
    return "%s:checkpoint_b_%s_%s" % (_PACKAGE, runner, mode)

# buildifier: disable=unnamed-macro (it declares one target per cell, each named by its cell: a name would name none)
def checkpoint_b_goldens(runners, modes, fake_cells, checkpoint, fake_checkpoint, identity, fake_server_module,
                         gpu_tags):
    """Checkpoint B's golden on every GPU cell and on each fake cell given.

    Each is tagged manual: built only for the cells that take them.

    Args:
      runners: the GPU cells' runners.
      modes: the GPU cells' execution modes.
      fake_cells: "<runner>_<mode>[_vllm<version>]" of each fake cell to take one on.
      checkpoint: (files, config.json) of the GPU cells' checkpoint B.
      fake_checkpoint: (files, config.json) of the fake cells' checkpoint B.
      identity: the vLLM/GPU identity file the GPU cells read.
      fake_server_module: the fake server's module.
      gpu_tags: the GPU cells' tags (the golden's server needs a GPU where they do).
    """
    for runner in runners:
        for mode in modes:
            checkpoint_golden(
                name = "checkpoint_b_%s_%s" % (runner, mode),
                checkpoint = checkpoint[0],
                checkpoint_config = checkpoint[1],
                runner = runner,
                mode = mode,
                identity = identity,
                tags = gpu_tags + ["manual"],
                testonly = True,
                exec_properties = exec_properties_for_tags(gpu_tags),
            )
    for cell in fake_cells:
        parts = cell.split("_", 2)
        checkpoint_golden(
            name = "checkpoint_b_fake_%s" % cell,
            checkpoint = fake_checkpoint[0],
            checkpoint_config = fake_checkpoint[1],
            runner = parts[0],
            mode = parts[1],
            gpu = False,
            server_module = fake_server_module,
            fake_vllm_version = parts[2][len("vllm"):] if len(parts) == 3 else "",
            tags = ["manual"],
            testonly = True,
        )
