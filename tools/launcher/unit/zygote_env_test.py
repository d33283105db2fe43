"""What keys a zygote and what each server applies for itself."""

import os

from tools.launcher import zygote_env

MODULE = "vllm.entrypoints.openai.api_server"


def _site(tmp_path, name, *top_level):
    path = tmp_path / name
    for package in top_level:
        (path / package).mkdir(parents=True)
    path.mkdir(exist_ok=True)
    return str(path)


def test_per_server_variables_are_the_servers_own():
    assert all(
        zygote_env.is_per_server(n)
        for n in (
            "CUDA_VISIBLE_DEVICES",
            "VLLM_USE_V2_MODEL_RUNNER",
            "SLEEPWAKE_MUTANT",
            "TEST_TMPDIR",
            "HOME",
            "PYTEST_CURRENT_TEST",
            "RUNFILES_DIR",
            "XML_OUTPUT_FILE",
        )
    )
    # Read while importing vLLM (vllm/logger.py, huggingface_hub/constants.py): they key the zygote.
    assert not any(
        zygote_env.is_per_server(n)
        for n in ("VLLM_LOGGING_LEVEL", "HF_HUB_OFFLINE", "XDG_CACHE_HOME", "VLLM_WORKER_MULTIPROC_METHOD", "PATH")
    )
    key, own = zygote_env.split_env({"VLLM_LOGGING_LEVEL": "INFO", "SLEEPWAKE_MUTANT": "x"})
    assert key == {"VLLM_LOGGING_LEVEL": "INFO"} and own == {"SLEEPWAKE_MUTANT": "x"}


def test_pythonpath_entries_in_a_tests_own_dirs_are_the_servers(tmp_path):
    vllm_site = _site(tmp_path, "vllm-site", "vllm")
    runfiles = _site(tmp_path, "cell.runfiles", "tools")
    vllm_in_runfiles = _site(tmp_path / "cell.runfiles", "pip", "vllm")
    plugin_site = _site(tmp_path, "test_tmp/site", "sleepwake_mutants")
    env = {
        "PYTHONPATH": os.pathsep.join([plugin_site, vllm_site, runfiles, vllm_in_runfiles]),
        "RUNFILES_DIR": runfiles,
        "TEST_TMPDIR": str(tmp_path / "test_tmp"),
    }
    key, own = zygote_env.split_pythonpath(env, MODULE)
    assert key == [vllm_site, vllm_in_runfiles]  # the module's provider stays, even in the runfiles
    assert own == [plugin_site, runfiles]


def test_the_door_hosts_cells_share_a_zygote_though_each_runfiles_provides_it(tmp_path):
    # The door host is a module of the zygote's own package, which every fork imports again from its own
    # sys.path: keying on the runfiles that provide it would give every cell a zygote of its own.
    vllm_site = _site(tmp_path, "vllm-site", "vllm")
    keys = []
    for cell in ("a", "b"):
        runfiles = _site(tmp_path, f"{cell}.runfiles", zygote_env.OWN_PACKAGE)
        env = {"PYTHONPATH": os.pathsep.join([runfiles, vllm_site]), "RUNFILES_DIR": runfiles}
        key, own = zygote_env.split_pythonpath(env, "tools.launcher.door_host")
        assert (key, own) == ([vllm_site], [runfiles])
        keys.append(zygote_env.zygote_key("/usr/bin/python3", ("tools.launcher.door_host",), env, "code")[0])
    assert keys[0] == keys[1]


def test_servers_differing_only_in_their_own_variables_share_a_key(tmp_path):
    vllm_site = _site(tmp_path, "vllm-site", "vllm")
    base = {"PYTHONPATH": vllm_site, "VLLM_LOGGING_LEVEL": "INFO", "TEST_TMPDIR": str(tmp_path / "a")}
    key, zygote_environment = zygote_env.zygote_key("/usr/bin/python3", (MODULE,), base, "code")
    assert zygote_environment == {"PYTHONPATH": vllm_site, "VLLM_LOGGING_LEVEL": "INFO"}
    other_cell = dict(
        base,
        TEST_TMPDIR=str(tmp_path / "b"),
        VLLM_USE_V2_MODEL_RUNNER="1",
        CUDA_VISIBLE_DEVICES="1",
        PYTHONPATH=os.pathsep.join([str(tmp_path / "b" / "site"), vllm_site]),
    )
    assert zygote_env.zygote_key("/usr/bin/python3", (MODULE,), other_cell, "code")[0] == key
    for changed in (dict(base, VLLM_LOGGING_LEVEL="DEBUG"), dict(base, PYTHONPATH=vllm_site + os.pathsep + "/x")):
        assert zygote_env.zygote_key("/usr/bin/python3", (MODULE,), changed, "code")[0] != key
    assert zygote_env.zygote_key("/usr/bin/python3", (MODULE,), base, "other code")[0] != key
    assert zygote_env.zygote_key("/usr/bin/python3", ("other.module",), base, "code")[0] != key
    preloading = zygote_env.zygote_key("/usr/bin/python3", (MODULE,), base, "code", ["a", "b"])[0]
    assert preloading != key  # a zygote that imported more is another image
    assert zygote_env.zygote_key("/usr/bin/python3", (MODULE,), base, "code", ("a", "b"))[0] == preloading
    assert zygote_env.zygote_key("/usr/bin/python3", (MODULE,), base, "code", ["b", "a"])[0] != preloading


def test_import_safe_names_only_per_server_variables():
    assert all(zygote_env.is_per_server(name) for name in zygote_env.IMPORT_SAFE)


def test_a_goldens_server_and_a_cells_share_a_zygote(tmp_path):
    """The golden actions' servers (a build action) and the cells' (a test) start from the same runner
    overlay and vLLM, but Bazel gives a test more: '.' first on PATH, TZ, USER, its runner's variables and
    TEST_SRCDIR, while the action's PYTHONPATH names its runfiles with no variable saying whose they are.
    Keyed apart, a fresh run imported vLLM twice (the zygote host's log named these variables)."""
    from tools.launcher import config

    overlay, vllm_site = _site(tmp_path, "runner-overlay"), _site(tmp_path, "vllm-site", "vllm")
    golden = _site(tmp_path, "bin/tests/sleep_wake/goldens/take_golden.runfiles/sleepwake", "tools")
    cell = _site(tmp_path, "bin/tests/sleep_wake/state_walk_mrv1_eager.runfiles/sleepwake", "tools")
    action = {
        "PATH": "/bin:/usr/bin:/usr/local/bin",
        "PYTHONPATH": os.pathsep.join([golden + "/tools/launcher/phase_plugin", overlay, vllm_site, golden]),
    }
    test = {
        "PATH": ".:/bin:/usr/bin:/usr/local/bin",
        "PYTHONPATH": os.pathsep.join([overlay, vllm_site, cell + "/tools/launcher/phase_plugin", cell]),
        "TZ": "UTC",
        "USER": "someone",
        "EXPERIMENTAL_SPLIT_XML_GENERATION": "1",
        "RUN_UNDER_RUNFILES": "1",
        "TEST_SRCDIR": os.path.dirname(cell),
    }
    cfg = config.ServerConfig(cache_dir=str(tmp_path / "cache"))
    keys = [
        zygote_env.zygote_key("/usr/bin/python3", (MODULE,), config.build_env(cfg, env), "code")
        for env in (action, test)
    ]
    assert keys[0] == keys[1]
    assert keys[0][1]["PYTHONPATH"] == os.pathsep.join([overlay, vllm_site])
