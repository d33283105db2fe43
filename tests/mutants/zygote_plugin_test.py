"""The zygote with the real vLLM 0.26.0 on a CPU: importing its API server and the modules the launcher
preloads after it (config.VLLM_PRELOAD, DOOR_PRELOAD) leaves CUDA uninitialised, starts no thread and reads no
per-server variable that zygote_env.IMPORT_SAFE does not explain, and a forked server re-enters the
module as __main__ far enough to build its argument parser, which loads the `vllm.general_plugins`
entry points (vllm/engine/arg_utils.py add_cli_args -> load_general_plugins): the mutant plugin, found
only on that server's own PYTHONPATH, applies the mutant named by that server's SLEEPWAKE_MUTANT.

On a machine without a GPU the server then stops where a plain `python -m vllm...` stops too (vLLM
cannot infer a device); what comes after is the GPU cells' business.
"""

import os
import re
import sys

import sleepwake_mutants

from tests.mutants import site_dir
from tools.launcher import process_tree, zygote_client
from tools.launcher.config import (
    DOOR_PRELOAD,
    VLLM_ENTRYPOINT,
    VLLM_PRELOAD,
    ServerConfig,
    build_env,
    preload_modules,
    zygote_modules,
)
from tools.launcher.unit import testing

MUTANT = "slow_wake"


def _fork(tmp_path, lock_dir, env, log_path):
    spec = {
        "argv": [sys.executable, "-m", VLLM_ENTRYPOINT, "--help"],
        "env": env,
        "cwd": os.getcwd(),
        "grace_s": 5.0,
        "parent_pid": os.getpid(),
        "parent_start": process_tree.start_time(os.getpid()),
    }
    with open(log_path, "ab") as log:
        sup, _ = zygote_client.start_supervisor(
            spec,
            log.fileno(),
            None,
            lock_dir=lock_dir,
            idle_s=60,
            start_timeout_s=600,
            host_idle_s=60,
            environ={},
            modules=zygote_modules(ServerConfig(), spec["argv"]),
            preloads=preload_modules(ServerConfig(), spec["argv"]),
        )
    sup.wait(timeout=300)
    with open(log_path) as f:
        return f.read()


def test_a_forked_vllm_server_parses_its_arguments_and_loads_its_own_plugin(tmp_path):
    lock_dir = str(tmp_path / "locks")
    test_tmpdir = str(tmp_path / "cell")
    base = {k: v for k, v in testing.python_env().items() if k != "CUDA_VISIBLE_DEVICES"}
    base["TEST_TMPDIR"] = test_tmpdir  # the plugin's site below it is the server's own PYTHONPATH entry
    env = build_env(ServerConfig(cache_dir=str(tmp_path / "cache"), runner="mrv2"), base, "0")
    site = site_dir.build(os.path.join(test_tmpdir, "site"))
    with zygote_client.private_host(lock_dir):
        with_plugin = dict(env, PYTHONPATH=site_dir.pythonpath_with(site, env), SLEEPWAKE_MUTANT=MUTANT)
        plugged = _fork(tmp_path, lock_dir, with_plugin, str(tmp_path / "with_plugin.log"))
        plain = _fork(tmp_path, lock_dir, env, str(tmp_path / "without.log"))
    zygote_logs = [
        n for n in os.listdir(lock_dir) if n.startswith("zygote-") and n.endswith(".log") and n != "zygote-host.log"
    ]
    assert len(zygote_logs) == 1, "both servers should come from one zygote: %s" % zygote_logs
    with open(os.path.join(lock_dir, zygote_logs[0])) as f:
        zygote_log = f.read()
    assert "CUDA initialised: False" in zygote_log and "refusing every fork" not in zygote_log, zygote_log[-3000:]
    expected = len(VLLM_PRELOAD + DOOR_PRELOAD)
    preloads = "then %d of %d preload(s) in " % (expected, expected)
    assert preloads in zygote_log and "threads: 1 Python" in zygote_log, zygote_log[-3000:]
    imported = re.search(r"\[sleepwake zygote (\d+)\] imported", zygote_log)
    assert imported, "the zygote never logged its imports:\n" + zygote_log[-3000:]
    zygote_pid = int(imported.group(1))
    active = re.search(
        re.escape(sleepwake_mutants.ACTIVATION.format(name=MUTANT, pid="PID")).replace("PID", r"(\d+)"), plugged
    )
    assert active, "the mutant plugin did not load in the forked server:\n" + plugged[-3000:]
    assert int(active.group(1)) != zygote_pid
    assert "forked by zygote %d" % zygote_pid in plugged and "forked by zygote %d" % zygote_pid in plain
    assert "sleepwake-mutant" not in plain  # its sys.path never had the plugin's site
