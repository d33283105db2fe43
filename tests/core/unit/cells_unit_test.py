import dataclasses

import pytest

from tests.core import cells
from tools.launcher.config import ServerConfig
from tools.launcher.errors import ConfigError


@pytest.mark.parametrize("runner,mode,ident", [("mrv1", "eager", "MRV1-eager"), ("mrv2", "graph", "MRV2-graph")])
def test_cell_is_the_configuration_the_servers_start_with(runner, mode, ident):
    env = {"SLEEPWAKE_RUNNER": runner, "SLEEPWAKE_EXECUTION_MODE": mode, "SLEEPWAKE_KV_CACHE_BYTES": "12345"}
    cell = cells.cell_from_env(env)
    assert (cell.runner, cell.mode, cell.id) == (runner, mode, ident)
    assert cell.config == ServerConfig.from_env(environ=env)
    server = cell.server_config("/logs/TestX")
    assert server == dataclasses.replace(cell.config, log_dir="/logs/TestX")
    server.health_poll_s = 9.0  # a server's copy is its own: the cell's stays as read
    assert cell.config.health_poll_s != 9.0 and cell.config.kv_cache_bytes == 12345


def test_unset_cell_is_the_launchers_default():
    assert cells.cell_from_env({}).id == "MRV1-eager"


@pytest.mark.parametrize(
    "env",
    [
        {"SLEEPWAKE_RUNNER": "mrv3", "SLEEPWAKE_EXECUTION_MODE": "eager"},
        {"SLEEPWAKE_RUNNER": "mrv1", "SLEEPWAKE_EXECUTION_MODE": "EAGER"},
    ],
)
def test_bad_env_names_the_variable(env):
    with pytest.raises(ConfigError, match="SLEEPWAKE_"):
        cells.cell_from_env(env)


def test_a_door_that_declares_it_cannot_gives_its_reason_and_another_door_none():
    llm = cells.cell_from_env({"SLEEPWAKE_FRONT_DOOR": "llm"})
    http, async_llm = cells.cell_from_env({}), cells.cell_from_env({"SLEEPWAKE_FRONT_DOOR": "async_llm"})
    assert (llm.door, http.door) == ("llm", "http")
    reason = cells.door_cannot(llm, "stream")
    assert reason and "llm door cannot" in reason and "stream" in reason
    assert cells.door_cannot(http, "stream") is None and cells.door_cannot(async_llm, "stream") is None
    with pytest.raises(ValueError, match="no door declares it"):
        cells.door_cannot(llm, "streaming")  # a misspelt capability must not skip nothing, silently


def _identity(tmp_path, release: str) -> str:
    path = tmp_path / "identity.txt"
    path.write_text(f"python: 3.12.3 /py\nvllm: {release} record-sha256=00\ntorch: 2.11.0 record-sha256=00\n")
    return str(path)


@pytest.mark.parametrize(
    "release,backend,off",
    [("0.26.0", "ipc", ""), ("0.26.0+cu130", "ipc", ""), ("0.25.0", "none", "vLLM 0.25.0 has no weight-transfer API")],
)
def test_weight_transfer_auto_follows_the_toolchains_release(tmp_path, release, backend, off):
    env = {"SLEEPWAKE_WEIGHT_TRANSFER": "auto", "SLEEPWAKE_VLLM_IDENTITY": _identity(tmp_path, release)}
    cell = cells.cell_from_env(env)
    assert cell.config.weight_transfer == backend
    assert cell.native_off.startswith(off) and bool(cell.native_off) == bool(off)


def test_weight_transfer_auto_without_an_identity_is_none_and_says_why():
    cell = cells.cell_from_env({"SLEEPWAKE_WEIGHT_TRANSFER": "auto"})
    assert cell.config.weight_transfer == "none" and "release is unknown" in cell.native_off


def test_a_set_weight_transfer_is_kept_whatever_the_release(tmp_path):
    env = {"SLEEPWAKE_WEIGHT_TRANSFER": "ipc", "SLEEPWAKE_VLLM_IDENTITY": _identity(tmp_path, "0.25.0")}
    assert cells.cell_from_env(env).config.weight_transfer == "ipc"
