"""Takes one checkpoint's golden on one cell (runner x mode, with the vLLM build of the toolchain that
runs this) and writes it as a file (tests/core/goldens.py): the action behind //tests/sleep_wake/goldens, so the
reference servers of the weight-sync class and the state walk start once per matrix and never on a re-run.
The server starts on the checkpoint itself: no push, so the golden does not depend on the push the
classes test.

The server is started exactly as a cell's (the same ServerConfig, the GPU lease, the zygote), from the
variables the action passes through (.bazelrc build:gpu --action_env), so it shares the GPU with the
cells of the run that built it.
"""

import argparse
import os
import sys
import tempfile

from tests.core import goldens, releases, servers, thresholds
from tests.core.client import client_of


def take(args, environ) -> None:
    from tools.launcher.config import ServerConfig, resolve_model

    environ[servers.SERVER_MODULE_ENV] = args.server_module
    if args.fake_vllm_version:
        environ["SLEEPWAKE_FAKE_VLLM_VERSION"] = args.fake_vllm_version
    if args.identity:
        environ[servers.IDENTITY_ENV] = os.path.abspath(args.identity)
    identity = servers.identity(environ)
    # Not the action's own TMPDIR: a failed action's log must outlive it to be read.
    log_dir = tempfile.mkdtemp(prefix="sleepwake-golden-%s-%s-" % (args.runner, args.mode))
    config = ServerConfig.from_env(
        log_dir,
        environ=environ,
        runner=args.runner,
        execution_mode=args.mode,
        model=resolve_model(os.path.abspath(args.checkpoint)),
    )
    config.health_poll_s = thresholds.get("health_poll_s")
    VllmServer = servers.server_class(environ)
    with VllmServer(config, lease=True, environ=environ) as server:
        client = client_of(server)
        served = client.version()
        releases.check_served(served, identity)
        golden = goldens.take(client)
    goldens.write(
        args.out,
        golden,
        runner=args.runner,
        mode=args.mode,
        checkpoint=goldens.checkpoint_name(config.model),
        identity=identity,
        served=served,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="The checkpoint's config.json (or its dir).")
    parser.add_argument("--runner", required=True, help="The cell's model runner (tools/matrix.bzl RUNNERS).")
    parser.add_argument("--mode", required=True, help="The cell's execution mode (tools/matrix.bzl EXECUTION_MODES).")
    parser.add_argument("--out", required=True, help="The golden file to write.")
    parser.add_argument(
        "--identity",
        default="",
        help="The vLLM/GPU identity file the cells read "
        "(@sleepwake_gpu//:identity.txt); the served release is checked against it.",
    )
    parser.add_argument(
        "--server_module",
        default=servers.DEFAULT_SERVER_MODULE,
        help="The module whose VllmServer serves (the fake tier's: tests.sleep_wake.fakes.fake_server).",
    )
    parser.add_argument(
        "--fake_vllm_version", default="", help="For the fake server: the release whose response shapes it serves."
    )
    args = parser.parse_args(argv)
    try:
        take(args, dict(os.environ))
    except Exception as e:  # one line for Bazel's action output: what failed and where its log is
        print(
            "take_golden: no golden for %s on %s_%s: %s: %s"
            % (args.checkpoint, args.runner, args.mode, type(e).__name__, e),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
