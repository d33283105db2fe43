"""The vllm_server binary, run as a subprocess: its dry run and its refusals."""

import subprocess
import sys

from tools.launcher import testing

BINARY = testing.ROOT + "/tools/launcher/vllm_server.py"


def _run(*args):
    return subprocess.run([sys.executable, BINARY] + list(args), env=testing.python_env(), capture_output=True,
                          text=True, timeout=60)


def test_dry_run_prints_the_command_and_env_diff(tmp_path):
    result = _run("--dry_run", "--model", str(tmp_path), "--runner=mrv2", "--execution_mode=graph", "--port=8123",
                  "--server_arg=--max-num-batched-tokens", "--server_arg=256", "--mp_method=spawn")
    assert result.returncode == 0, result.stderr
    assert ("-m vllm.entrypoints.openai.api_server --model %s --host 127.0.0.1 --port 8123" % tmp_path
            in result.stdout)
    assert "--max-cudagraph-capture-size 32 --max-num-batched-tokens 256" in result.stdout
    assert "+VLLM_USE_V2_MODEL_RUNNER=1" in result.stdout or "~VLLM_USE_V2_MODEL_RUNNER=1" in result.stdout
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in result.stdout


def test_non_loopback_host_is_refused(tmp_path):
    result = _run("--dry_run", "--model", str(tmp_path), "--host=0.0.0.0")
    assert result.returncode == 2
    assert "refusing to serve on non-loopback host '0.0.0.0'" in result.stderr
    assert _run("--dry_run", "--model", str(tmp_path), "--host=0.0.0.0", "--allow_non_loopback").returncode == 0


def test_missing_model_is_refused(tmp_path):
    result = _run("--dry_run", "--model", str(tmp_path / "missing" / "config.json"))
    assert result.returncode == 2 and "does not exist" in result.stderr
