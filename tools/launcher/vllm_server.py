"""Serves one vLLM server the way the sleepwake suite starts it, in the foreground until Ctrl-C.

bazel run //tools/launcher:vllm_server -- --runner=mrv2 --execution_mode=graph
bazel run //tools/launcher:vllm_server -- --dry_run     # print the command and env, start nothing
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import sys
import time

from absl import app, flags

from tools.launcher import config as config_lib
from tools.launcher.config import ServerConfig
from tools.launcher.errors import LauncherError
from tools.launcher.server import VllmServer


# The server's settings are ServerConfig's fields (tools/launcher/config.py), each a flag here and a
# SLEEPWAKE_<NAME> variable; a flag given on the command line wins over the variable.
def _define_setting_flags() -> None:
    for f in config_lib.settings():
        name, default = config_lib.flag_name(f), config_lib.default_of(f)
        help = f.metadata["help"] + (" Also %s." % config_lib.env_name(f.name) if f.metadata["env"] else "")
        if name == "log_dir":  # absl.logging defines --log_dir (for its own files, unused here): share it
            flags.FLAGS["log_dir"].help = help
        elif f.metadata["choices"]:
            flags.DEFINE_enum(name, default, list(f.metadata["choices"]), help)
        elif isinstance(default, bool):
            flags.DEFINE_bool(name, default, help)
        elif isinstance(default, int):
            flags.DEFINE_integer(name, default, help)
        elif isinstance(default, float):
            flags.DEFINE_float(name, default, help)
        elif isinstance(default, list):
            flags.DEFINE_multi_string(name, default, help)
        else:
            flags.DEFINE_string(name, default, help)


_define_setting_flags()
flags.DEFINE_bool("lease", False, "Take a GPU slot (flock in --lock_dir) and pin the server to that GPU.")
flags.DEFINE_bool(
    "check",
    False,
    "Start, wait until healthy, verify the runner vLLM built, stop, verify the GPU"
    " memory was released, then exit 0 (non-zero on any failure): a smoke test of a runner.",
)
flags.DEFINE_bool("dry_run", False, "Print the command and the environment changes, then exit; starts nothing.")

FLAGS = flags.FLAGS


def config_from_flags(environ=None) -> ServerConfig:
    """SLEEPWAKE_<NAME> variables, then the flags given on the command line."""
    given = {
        f.name: FLAGS[config_lib.flag_name(f)].value
        for f in config_lib.settings()
        if FLAGS[config_lib.flag_name(f)].present
    }
    if given.get("log_dir") == "":
        given.pop("log_dir")
    return ServerConfig.from_env(environ=os.environ if environ is None else environ, **given)


def dry_run(cfg: ServerConfig, environ) -> str:
    config_lib.validate(cfg)
    argv = config_lib.build_command(cfg, cfg.port or "<free port>")
    lease = "<the leased GPU>" if FLAGS.lease else None
    env = config_lib.build_env(cfg, environ, lease)
    return "command:\n  %s\nenvironment changes:\n%s" % (
        shlex.join(argv),
        "\n".join("  " + line for line in config_lib.env_diff(environ, env)),
    )


def _interrupt(signum, frame):
    # The first Ctrl-C or SIGTERM stops the server. Further ones are ignored while it is torn down
    # (bounded by the grace period), so they cannot cut the teardown short and leave processes.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def serve(cfg: ServerConfig, make_server=VllmServer) -> int:
    """Starts the server, then stops it on Ctrl-C/SIGTERM (or at once with --check); returns the exit code."""
    started = time.monotonic()
    with make_server(cfg, FLAGS.lease) as server:
        print(
            "vLLM server ready at %s (%.1f s, %s start)\n  command: %s\n  log: %s"
            % (server.url, time.monotonic() - started, server.start_mode, shlex.join(server.command), server.log_path),
            flush=True,
        )
        if FLAGS.check:
            print(
                "check: runner %s verified, %d GPU bytes held; stopping" % (cfg.runner, server.gpu_bytes()), flush=True
            )
        else:
            print("Ctrl-C stops it.", flush=True)
            try:
                server.wait()
                print("the server exited on its own; see %s" % server.log_path, file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                print("stopping the server ...", flush=True)
    # Leaving the with-block ran the release check; reaching here means it passed.
    print("stopped; GPU memory released.")
    return 0


def main(argv, make_server=VllmServer) -> int:
    """make_server(config, lease) -> a VllmServer; tests pass one running a stub server."""
    if len(argv) > 1:
        print("error: unexpected arguments %s; pass server arguments with --server_arg=..." % argv[1:], file=sys.stderr)
        return 2
    try:
        cfg = config_from_flags()
        if FLAGS.dry_run:
            print(dry_run(cfg, os.environ))
            return 0
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _interrupt)
        return serve(cfg, make_server)
    except KeyboardInterrupt:  # while starting (or checking): VllmServer tore the server tree down
        print("interrupted: the server was stopped.", file=sys.stderr)
        return 130
    except LauncherError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2


def _parse_flags(argv):
    """absl's flag parsing, with a bad flag reported in one line and exit code 2 (absl: usage, 1)."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        print("error: %s. See --help for every flag." % e, file=sys.stderr)
        sys.exit(2)


def run(make_server=VllmServer) -> None:
    app.run(functools.partial(main, make_server=make_server), flags_parser=_parse_flags)


if __name__ == "__main__":
    run()
