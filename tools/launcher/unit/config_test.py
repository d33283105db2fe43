import os
import re
import sys
from typing import Any

import pytest

from tools.launcher import config
from tools.launcher.config import ServerConfig
from tools.launcher.errors import ConfigError, VllmNotFoundError


def test_command_is_exact_for_eager_and_graph(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    cfg = ServerConfig(model=str(tmp_path), seed=7, max_model_len=512, kv_cache_bytes=123, server_args=["--foo", "bar"])
    argv = config.build_command(cfg, 8001, python="/py")
    assert argv == [
        "/py",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tmp_path),
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--seed",
        "7",
        "--max-model-len",
        "512",
        "--kv-cache-memory-bytes",
        "123",
        "--gpu-memory-utilization",
        "0.05",
        "--enable-sleep-mode",
        "--enable-server-load-tracking",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--max-num-seqs",
        "32",
        "--worker-extension-cls",
        "tools.launcher.weight_receiver.WeightReceiver",
        "--enforce-eager",
        "--foo",
        "bar",
    ]
    cfg.weight_transfer = "ipc"
    assert config.build_command(cfg, 8001, python="/py")[-5:-3] == ["--weight-transfer-config", '{"backend": "ipc"}']
    cfg.weight_transfer = "none"
    cfg.execution_mode = "graph"
    graph = config.build_command(cfg, 8001)
    assert "--enforce-eager" not in graph and graph[-4:] == ["--max-cudagraph-capture-size", "32", "--foo", "bar"]
    assert "--disable-log-stats" not in graph  # the sleep gauge lives in /metrics


def test_model_is_a_dir_or_its_config_json(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert config.resolve_model(str(tmp_path)) == str(tmp_path)
    assert config.resolve_model(str(tmp_path / "config.json")) == str(tmp_path)
    assert config.resolve_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # a hub id passes through


@pytest.mark.parametrize("missing", ["/no/such/model", "tools/checkpoints/nothing/config.json", "./model"])
def test_missing_model_path_says_what_to_do(missing):
    with pytest.raises(ConfigError, match="does not exist.*Pass a checkpoint dir"):
        config.resolve_model(missing)


def test_a_model_path_that_is_no_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--model .* is a directory without config.json"):
        config.resolve_model(str(tmp_path))
    (tmp_path / "weights.safetensors").write_text("")
    with pytest.raises(ConfigError, match="--model .* is a file but not a config.json"):
        config.resolve_model(str(tmp_path / "weights.safetensors"))


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("port", -1, "--port=-1 is out of range: use 0 (a free port) or a port in 1-65535"),
        ("port", 65536, "--port=65536 is out of range"),
        ("kv_cache_bytes", -5, "--kv_cache_bytes=-5 is out of range: give the KV-cache size in bytes, > 0"),
        ("kv_cache_bytes", 0, "--kv_cache_bytes=0 is out of range"),
        ("max_model_len", 0, "--max_model_len=0 is out of range: give the longest sequence in tokens"),
        ("gpu_memory_utilization", 7, "--gpu_memory_utilization=7 is out of range: give a fraction of the device"),
        ("gpu_memory_utilization", 0.0, "--gpu_memory_utilization=0.0 is out of range"),
        ("seed", -3, "--seed=-3 is out of range"),
        ("slots_per_gpu", 0, "--slots_per_gpu=0 is out of range"),
        ("startup_timeout_s", 0, "--startup_timeout_s=0 is out of range"),
        ("release_timeout_s", -1, "--release_timeout_s=-1 is out of range"),
    ],
)
def test_values_out_of_range_are_refused_naming_the_flag(field, value, message):
    with pytest.raises(ConfigError) as e:
        config.validate(_with(field, value))
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("field", ["log_dir", "cache_dir", "lock_dir"])
def test_directories_that_cannot_be_written_are_refused_naming_the_flag(tmp_path, field):
    (tmp_path / "a_file").write_text("")
    for path in (tmp_path / "a_file", tmp_path / "a_file" / "below"):
        with pytest.raises(
            ConfigError, match="--%s=%s cannot be a directory: %s is a file" % (field, path, tmp_path / "a_file")
        ):
            config.validate(_with(field, str(path)))
    config.validate(_with(field, str(tmp_path / "new" / "dir")))  # creatable is fine


def _with(field: str, value: Any) -> ServerConfig:
    """The default config with one field set, by its name."""
    return ServerConfig(**{field: value})


def test_default_model_comes_from_the_runfiles(tmp_path):
    model_dir = tmp_path / "sleepwake" / "tools" / "checkpoints" / "synthetic_qwen3"
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text("{}")
    found = config.default_model({"RUNFILES_DIR": str(tmp_path)}, anchor="/nowhere/a/b/c.py", argv0="/nowhere/x")
    assert found == str(model_dir)
    with pytest.raises(ConfigError, match="not in the runfiles.*--model"):
        config.default_model({}, anchor="/nowhere/a/b/c.py", argv0="/nowhere/x")


@pytest.mark.parametrize("runner,value", [("mrv1", "0"), ("mrv2", "1")])
def test_env_sets_the_runner_explicitly_over_an_inherited_value(runner, value):
    inherited = {"VLLM_USE_V2_MODEL_RUNNER": "1" if value == "0" else "0", "PATH": "/bin"}
    env = config.build_env(ServerConfig(runner=runner, cache_dir="/c", mp_method="spawn"), inherited)
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == value
    assert env["PATH"] == "/bin" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert (env["VLLM_CACHE_ROOT"], env["TRITON_CACHE_DIR"], env["TORCHINDUCTOR_CACHE_DIR"], env["XDG_CACHE_HOME"]) == (
        "/c/vllm",
        "/c/triton",
        "/c/inductor",
        "/c/xdg",
    )
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["HUMMING_DISABLE_PARALLEL_BUILD"] == "1"  # a preloading zygote starts no build processes
    assert config.build_env(ServerConfig(), {}, "3")["CUDA_VISIBLE_DEVICES"] == "3"


def test_from_env_reads_the_cell_contract():
    cfg = ServerConfig.from_env(
        "/out",
        {
            "SLEEPWAKE_RUNNER": "mrv2",
            "SLEEPWAKE_EXECUTION_MODE": "graph",
            "SLEEPWAKE_MODEL": "m/config.json",
            "SLEEPWAKE_CACHE_DIR": "/cache",
            "SLEEPWAKE_LOCK_DIR": "/locks",
            "SLEEPWAKE_SLOTS_PER_GPU": "2",
            "SLEEPWAKE_KV_CACHE_BYTES": "1024",
            "SLEEPWAKE_STARTUP_TIMEOUT_S": "99",
            "SLEEPWAKE_MP_METHOD": "spawn",
        },
    )
    assert (cfg.runner, cfg.execution_mode, cfg.model, cfg.log_dir, cfg.cache_dir, cfg.lock_dir) == (
        "mrv2",
        "graph",
        "m/config.json",
        "/out",
        "/cache",
        "/locks",
    )
    assert (cfg.slots_per_gpu, cfg.kv_cache_bytes, cfg.startup_timeout_s, cfg.mp_method) == (2, 1024, 99.0, "spawn")
    assert ServerConfig.from_env(None, {"SLEEPWAKE_MODEL": "a", "VLLM_TEST_MODEL": "b"}).model == "b"


def _other_value(f):
    default = config.default_of(f)
    if f.metadata["choices"]:
        return next(c for c in f.metadata["choices"] if c != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 7
    return "/elsewhere"


def test_every_setting_with_a_variable_is_read_from_it_and_overrides_win():
    fields = [f for f in config.settings() if f.metadata["env"]]
    assert len(fields) >= 20, "settings lost their variables"
    env = {config.env_name(f.name): str(_other_value(f)) for f in fields}
    cfg = ServerConfig.from_env(None, env)
    for f in fields:
        assert getattr(cfg, f.name) == _other_value(f), "%s not read" % config.env_name(f.name)
    assert ServerConfig.from_env(None, env, runner="mrv1", port=9).runner == "mrv1"
    assert ServerConfig.from_env(None, {"SLEEPWAKE_ALLOW_NON_LOOPBACK": "1"}).allow_non_loopback is False


@pytest.mark.parametrize(
    "name,value,message",
    [
        (
            "SLEEPWAKE_SLOTS_PER_GPU",
            "two",
            "SLEEPWAKE_SLOTS_PER_GPU='two' is not an int: set it to one (or unset it for 1)",
        ),
        ("SLEEPWAKE_GRACE_S", "1s", "SLEEPWAKE_GRACE_S='1s' is not a float"),
        ("SLEEPWAKE_START_MODE", "fast", "SLEEPWAKE_START_MODE='fast' is not one of auto, zygote, plain"),
    ],
)
def test_a_variable_that_does_not_parse_is_named(name, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        ServerConfig.from_env(None, {name: value})


def test_zygote_preloads_default_to_the_vllm_list_for_vllm_and_the_door_host_only():
    vllm, fake = ["/py", "-m", config.VLLM_ENTRYPOINT, "--port", "1"], ["/py", "-m", "stub_api_server"]
    assert config.preload_modules(ServerConfig(), vllm) == list(config.VLLM_PRELOAD + config.DOOR_PRELOAD)
    door = ["/py", "-m", config.DOOR_HOST_MODULE, "--door", "async_llm", "--port", "1"]
    assert config.preload_modules(ServerConfig(), door) == list(config.VLLM_PRELOAD + config.DOOR_PRELOAD)
    assert "vllm.v1.worker.gpu_worker" in config.VLLM_PRELOAD
    assert config.preload_modules(ServerConfig(), fake) == []
    assert config.preload_modules(ServerConfig(), ["/py", "stub_api_server.py"]) == []
    assert config.preload_modules(ServerConfig(zygote_preload="none"), vllm) == []
    mine = ServerConfig.from_env(None, {"SLEEPWAKE_ZYGOTE_PRELOAD": "a.b, c"})
    assert config.preload_modules(mine, fake) == config.preload_modules(mine, vllm) == ["a.b", "c"]
    with pytest.raises(ConfigError, match=re.escape("--zygote_preload: 'a b' is not a module name")):
        config.validate(ServerConfig(zygote_preload="c,a b"))
    config.validate(ServerConfig(zygote_preload="a.b:key,c"))  # MODULE:FUNCTION calls a cached function
    for bad in ("a.b:", "a.b:key:more", "a.b:1"):
        with pytest.raises(ConfigError, match=re.escape("--zygote_preload: %r is not a module name" % bad)):
            config.validate(ServerConfig(zygote_preload=bad))


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com", "::"])
def test_non_loopback_host_is_refused_unless_allowed(host):
    with pytest.raises(ConfigError, match="non-loopback.*--allow_non_loopback"):
        config.validate(ServerConfig(host=host))
    config.validate(ServerConfig(host=host, allow_non_loopback=True))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_are_fine(host):
    config.validate(ServerConfig(host=host))


def test_unknown_runner_is_refused():
    with pytest.raises(ConfigError, match="unknown runner 'mrv3'; use one of mrv1, mrv2"):
        config.validate(ServerConfig(runner="mrv3"))


def test_importable_check_sees_the_servers_path(tmp_path):
    (tmp_path / "sleepwake_probe_pkg").mkdir()
    (tmp_path / "sleepwake_probe_pkg" / "__init__.py").write_text("raise SystemExit('must not be imported')")
    config.check_importable(sys.executable, dict(os.environ, PYTHONPATH=str(tmp_path)), "sleepwake_probe_pkg")
    with pytest.raises(VllmNotFoundError, match="cannot import sleepwake_probe_pkg.*--config=gpu"):
        config.check_importable(sys.executable, dict(os.environ, PYTHONPATH=""), "sleepwake_probe_pkg")


def test_env_diff_names_added_changed_and_removed():
    assert config.env_diff({"A": "1", "B": "2", "C": "3"}, {"A": "1", "B": "9", "D": "4"}) == [
        "~B=9 (was 2)",
        "+D=4",
        "-C",
    ]


def test_weight_transfer_auto_is_resolved_before_a_start_never_by_the_launcher(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    cfg = ServerConfig(model=str(tmp_path), weight_transfer="auto")
    with pytest.raises(ConfigError, match="weight_transfer auto depends on the runner's vLLM release"):
        config.build_command(cfg, 8001, python="/py")
    assert config.resolve_weight_transfer("auto", "0.26.0") == ("ipc", "")
    assert config.resolve_weight_transfer("auto", "0.27.1") == ("ipc", "")
    assert config.resolve_weight_transfer("auto", "0.24.0")[0] == "none"
    assert config.resolve_weight_transfer("ipc", "0.24.0") == ("ipc", "")
