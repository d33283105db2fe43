"""The vllm_server binary, run as a subprocess: its dry run, its refusals and its interruption."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tools.launcher import config as config_lib
from tools.launcher.unit import testing

BINARY = testing.ROOT + "/tools/launcher/vllm_server.py"
DRIVER = os.path.join(testing.TESTDATA, "vllm_server_driver.py")


def _run(*args, env=None):
    return subprocess.run(
        [sys.executable, BINARY] + list(args),
        env=dict(testing.python_env(), **(env or {})),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def model(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return str(tmp_path / "model")


def test_dry_run_prints_the_command_and_env_diff(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    result = _run(
        "--dry_run",
        "--model",
        str(tmp_path),
        "--runner=mrv2",
        "--execution_mode=graph",
        "--port=8123",
        "--server_arg=--max-num-batched-tokens",
        "--server_arg=256",
        "--mp_method=spawn",
    )
    assert result.returncode == 0, result.stderr
    assert "-m vllm.entrypoints.openai.api_server --model %s --host 127.0.0.1 --port 8123" % tmp_path in result.stdout
    assert "--max-cudagraph-capture-size 32 --max-num-batched-tokens 256" in result.stdout
    assert "+VLLM_USE_V2_MODEL_RUNNER=1" in result.stdout or "~VLLM_USE_V2_MODEL_RUNNER=1" in result.stdout
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in result.stdout


def test_non_loopback_host_is_refused(tmp_path):
    result = _run("--dry_run", "--model", str(tmp_path), "--host=0.0.0.0")
    assert result.returncode == 2
    assert "refusing to serve on non-loopback host '0.0.0.0'" in result.stderr
    (tmp_path / "config.json").write_text("{}")
    assert _run("--dry_run", "--model", str(tmp_path), "--host=0.0.0.0", "--allow_non_loopback").returncode == 0


def test_missing_model_is_refused(tmp_path):
    result = _run("--dry_run", "--model", str(tmp_path / "missing" / "config.json"))
    assert result.returncode == 2 and "does not exist" in result.stderr


def _bad_inputs(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    return {
        "port": (["--port=-1"], "--port=-1 is out of range"),
        "kv_cache_bytes": (["--kv_cache_bytes=-5"], "--kv_cache_bytes=-5 is out of range"),
        "max_model_len": (["--max_model_len=0"], "--max_model_len=0 is out of range"),
        "gpu_memory_utilization": (["--gpu_memory_utilization=7"], "--gpu_memory_utilization=7.0 is out of range"),
        "seed": (["--seed=-1"], "--seed=-1 is out of range"),
        "slots_per_gpu": (["--slots_per_gpu=0"], "--slots_per_gpu=0 is out of range"),
        "log_dir": (["--log_dir=%s/sub" % a_file], "--log_dir=%s/sub cannot be a directory" % a_file),
        "cache_dir": (["--cache_dir=%s" % a_file], "--cache_dir=%s cannot be a directory" % a_file),
        "lock_dir": (["--lock_dir=%s/locks" % a_file], "--lock_dir=%s/locks cannot be a directory" % a_file),
        "model_dir_without_config": (["--model=%s" % tmp_path], "is a directory without config.json"),
        "model_missing": (["--model=/no/such/checkpoint"], "does not exist"),
        "host": (["--host=0.0.0.0"], "refusing to serve on non-loopback host '0.0.0.0'"),
        "runner": (["--runner=mrv3"], "error: flag --runner=mrv3: value should be one of <mrv1|mrv2>"),
        "port_not_a_number": (["--port=eighty"], "error: flag --port=eighty: invalid literal"),
        "unknown_flag": (["--no_such_flag=1"], "error: Unknown command line flag 'no_such_flag'"),
        "positional": (["serve"], "error: unexpected arguments ['serve']; pass server arguments with --server_arg"),
    }


BAD_INPUTS = [
    "port",
    "kv_cache_bytes",
    "max_model_len",
    "gpu_memory_utilization",
    "seed",
    "slots_per_gpu",
    "log_dir",
    "cache_dir",
    "lock_dir",
    "model_dir_without_config",
    "model_missing",
    "host",
    "runner",
    "port_not_a_number",
    "unknown_flag",
    "positional",
]


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_a_bad_flag_or_path_is_one_line_naming_it_with_exit_code_2(tmp_path, model, case, dry_run):
    args, message = _bad_inputs(tmp_path)[case]
    if not any(a.startswith("--model") for a in args):
        args = args + ["--model=" + model]
    # Without --dry_run the launcher would go on to NVML and vLLM: the input is refused before that.
    result = _run(*(args + (["--dry_run"] if dry_run else [])))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert message in lines[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_during_the_start_stops_the_server_tree_and_exits_130_quietly(tmp_path, model, sig):
    pid_file = str(tmp_path / "pids")
    env = dict(testing.python_env(), STUB_SERVER_MODE="never_healthy", STUB_SERVER_PID_FILE=pid_file)
    proc = subprocess.Popen(
        [
            sys.executable,
            DRIVER,
            "--model=" + model,
            "--log_dir=%s" % (tmp_path / "logs"),
            "--cache_dir=%s" % (tmp_path / "cache"),
            "--lock_dir=%s" % (tmp_path / "locks"),
            "--lease",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(testing.recorded_pids(pid_file)) < 4:  # the stub server and its three helpers
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    # The launcher's own log lines (the lease taken) come first; the interruption is one quiet line.
    assert err.strip().splitlines()[-1] == "interrupted: the server was stopped." and "Traceback" not in err, err
    assert testing.survivors_after(testing.recorded_pids(pid_file), 5) == []


def test_variables_configure_the_binary_and_a_flag_wins(tmp_path, model):
    """One way to configure a server: SLEEPWAKE_<NAME> (what a GPU cell sets) or --<name>, the flag first."""
    env = {"SLEEPWAKE_RUNNER": "mrv2", "SLEEPWAKE_PORT": "8124", "SLEEPWAKE_MP_METHOD": "spawn"}
    result = _run("--dry_run", "--model", model, env=env)
    assert result.returncode == 0, result.stderr
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in result.stdout and "--port 8124" in result.stdout
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in result.stdout
    result = _run("--dry_run", "--model", model, "--runner=mrv1", "--port=8125", env=env)
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in result.stdout and "--port 8125" in result.stdout
    result = _run("--dry_run", "--model", model, env={"SLEEPWAKE_PORT": "eighty"})
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: SLEEPWAKE_PORT='eighty' is not an int: set it to one (or unset it for 0)"
    ]


def test_every_setting_is_a_flag_with_help():
    result = _run("--helpfull")
    for f in config_lib.settings():
        flag = config_lib.flag_name(f)
        assert re.search(r"--(\[no\])?%s:" % flag, result.stdout), "ServerConfig.%s has no flag" % f.name
        assert f.metadata["help"], "ServerConfig.%s has no help" % f.name
