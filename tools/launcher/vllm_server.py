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

_DEFAULTS = ServerConfig()

flags.DEFINE_string("model", "", "Checkpoint dir or its config.json (or a hub name, served offline from the HF"
                    " cache). Default: the suite's synthetic checkpoint from the runfiles"
                    " (%s)." % config_lib.DEFAULT_MODEL_RUNFILE)
flags.DEFINE_enum("runner", "mrv1", list(config_lib.RUNNERS), "Model runner: mrv1 or mrv2. Sets"
                  " VLLM_USE_V2_MODEL_RUNNER=0|1 explicitly (unset, vLLM picks V2 for dense models).")
flags.DEFINE_enum("execution_mode", "eager", list(config_lib.EXECUTION_MODES),
                  "eager: --enforce-eager; graph: CUDA graphs up to batch 32.")
flags.DEFINE_string("host", _DEFAULTS.host, "Address to serve on. Non-loopback needs --allow_non_loopback.")
flags.DEFINE_bool("allow_non_loopback", False, "Allow a non-loopback --host. The server runs with"
                  " VLLM_SERVER_DEV_MODE=1, whose endpoints let anyone who reaches it reset or reload it.")
flags.DEFINE_integer("port", 0, "Port; 0 picks a free one. A bind conflict is retried on a fresh port.")
flags.DEFINE_integer("kv_cache_bytes", _DEFAULTS.kv_cache_bytes, "KV-cache size in bytes"
                     " (--kv-cache-memory-bytes). Explicit because --gpu-memory-utilization is device-wide:"
                     " a second server on a shared GPU gets only what the first left.")
flags.DEFINE_float("gpu_memory_utilization", _DEFAULTS.gpu_memory_utilization,
                   "--gpu-memory-utilization. With explicit --kv_cache_bytes vLLM uses it only to check at"
                   " start that this fraction of the device is free; keep it small on a shared GPU.")
flags.DEFINE_integer("max_model_len", _DEFAULTS.max_model_len, "--max-model-len of the server.")
flags.DEFINE_integer("seed", _DEFAULTS.seed, "--seed of the server.")
flags.DEFINE_float("startup_timeout_s", _DEFAULTS.startup_timeout_s, "Seconds to wait for GET /health == 200.")
flags.DEFINE_float("release_timeout_s", _DEFAULTS.release_timeout_s,
                   "Seconds to wait after teardown for NVML to show the GPU memory released.")
# absl.logging already defines --log_dir (for its own log files, unused here): share it, with our help.
flags.FLAGS["log_dir"].help = ("Where the server log goes. Default: $TEST_UNDECLARED_OUTPUTS_DIR, else a new"
                               " temp dir.")
flags.DEFINE_string("cache_dir", _DEFAULTS.cache_dir, "Shared vLLM/Triton/inductor cache dir, so later starts"
                    " are not cold.")
flags.DEFINE_enum("mp_method", _DEFAULTS.mp_method, list(config_lib.MP_METHODS),
                  "VLLM_WORKER_MULTIPROC_METHOD. fork starts in ~24 s vs ~51 s for spawn on the H200, but"
                  " the worker inherits the parent's state (unsafe if CUDA was initialised first, which vLLM"
                  " detects and then spawns anyway); spawn is slower and clean.")
flags.DEFINE_enum("start_mode", _DEFAULTS.start_mode, list(config_lib.START_MODES),
                  "auto: fork the server from a zygote that imported vLLM once per runner (started on first"
                  " use, over a socket in --lock_dir; tools/launcher/zygote.py), else start it plainly and log"
                  " why; zygote: the zygote or an error; plain: `python -m vllm...` every time.")
flags.DEFINE_bool("lease", False, "Take a GPU slot (flock in --lock_dir) and pin the server to that GPU.")
flags.DEFINE_integer("slots_per_gpu", _DEFAULTS.slots_per_gpu, "Servers allowed per GPU when leasing.")
flags.DEFINE_string("lock_dir", _DEFAULTS.lock_dir, "Directory of the GPU slot lock files.")
flags.DEFINE_multi_string("server_arg", [], "Extra argument for the vLLM server, passed through; repeatable.")
flags.DEFINE_bool("check", False, "Start, wait until healthy, verify the runner vLLM built, stop, verify the GPU"
                  " memory was released, then exit 0 (non-zero on any failure): a smoke test of a runner.")
flags.DEFINE_bool("dry_run", False, "Print the command and the environment changes, then exit; starts nothing.")

FLAGS = flags.FLAGS


def config_from_flags() -> ServerConfig:
    return ServerConfig(
        model=FLAGS.model, runner=FLAGS.runner, execution_mode=FLAGS.execution_mode, host=FLAGS.host,
        allow_non_loopback=FLAGS.allow_non_loopback, port=FLAGS.port, kv_cache_bytes=FLAGS.kv_cache_bytes,
        gpu_memory_utilization=FLAGS.gpu_memory_utilization,
        max_model_len=FLAGS.max_model_len, seed=FLAGS.seed, startup_timeout_s=FLAGS.startup_timeout_s,
        release_timeout_s=FLAGS.release_timeout_s, log_dir=FLAGS.log_dir or None, cache_dir=FLAGS.cache_dir,
        mp_method=FLAGS.mp_method, slots_per_gpu=FLAGS.slots_per_gpu, lock_dir=FLAGS.lock_dir,
        server_args=list(FLAGS.server_arg), start_mode=FLAGS.start_mode)


def dry_run(cfg: ServerConfig, environ) -> str:
    config_lib.validate(cfg)
    argv = config_lib.build_command(cfg, cfg.port or "<free port>")
    lease = "<the leased GPU>" if FLAGS.lease else None
    env = config_lib.build_env(cfg, environ, lease)
    return "command:\n  %s\nenvironment changes:\n%s" % (
        shlex.join(argv), "\n".join("  " + line for line in config_lib.env_diff(environ, env)))


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
        print("vLLM server ready at %s (%.1f s, %s start)\n  command: %s\n  log: %s" % (
            server.url, time.monotonic() - started, server.start_mode, shlex.join(server.command),
            server.log_path), flush=True)
        if FLAGS.check:
            print("check: runner %s verified, %d GPU bytes held; stopping" % (cfg.runner, server.gpu_bytes()),
                  flush=True)
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
    """make_server(config, lease) -> a VllmServer; tests pass one running a fake server."""
    if len(argv) > 1:
        print("error: unexpected arguments %s; pass server arguments with --server_arg=..." % argv[1:],
              file=sys.stderr)
        return 2
    cfg = config_from_flags()
    try:
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
