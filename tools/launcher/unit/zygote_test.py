"""The zygote start path, with testdata/stub_api_server.py (and fake_heavy, its "vllm", and fake_preload, its
engine core's worker) in place of vLLM."""

import logging
import os
import re
import shutil
from typing import Any

import pytest

from tools.launcher import config, process_tree, unix_socket, zygote, zygote_client
from tools.launcher.errors import ServerStartError
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.server import VllmServer
from tools.launcher.unit import testing


@pytest.fixture
def site(tmp_path):
    return testing.fake_site(tmp_path)


@pytest.fixture
def host(tmp_path):
    with zygote_client.private_host(str(tmp_path / "locks")) as proc:
        yield proc


def _server(tmp_path, pid_file, environ, mode="ok", lease=False, script=False, module=testing.STUB_MODULE, **cfg):
    cfg.setdefault("start_mode", "zygote")
    return VllmServer(
        testing.fast_config(tmp_path, **cfg),
        lease=lease,
        nvml=FakeNvml(),
        command_factory=testing.stub_command(mode, pid_file=pid_file, as_module=not script, module=module),
        environ=environ,
    )


def _environ(tmp_path, site, **extra):
    extra.setdefault("STUB_SERVER_IMPORT_LOG", str(tmp_path / "imports"))
    return testing.module_environ(site, test_tmpdir=str(tmp_path), **extra)


def _log(server):
    with open(server.log_path) as f:
        return f.read()


def _wait_gone(pid, timeout_s=10.0):
    assert process_tree.wait_gone({pid: process_tree.start_time(pid)}, timeout_s) == {}, "%d still alive" % pid


def test_servers_fork_from_one_import_each_with_its_own_environment(tmp_path, pid_file, site, host):
    plugins = testing.plugin_site(str(tmp_path / "cell_a" / "site"))  # in TEST_TMPDIR: a per-server entry
    base = _environ(tmp_path, site, STUB_SERVER_PLUGINS="fake_plugin")
    with_plugin = dict(base, SLEEPWAKE_MUTANT="alpha", PYTHONPATH=os.pathsep.join([plugins, base["PYTHONPATH"]]))
    mrv1 = _server(tmp_path, pid_file, with_plugin, lease=True, slots_per_gpu=2)
    mrv2 = _server(tmp_path, pid_file, dict(base, SLEEPWAKE_MUTANT="beta"), runner="mrv2", lease=True, slots_per_gpu=2)
    with mrv1, mrv2:  # each start checks the runner the stub built from VLLM_USE_V2_MODEL_RUNNER
        assert mrv1.start_mode == mrv2.start_mode == "zygote"
        first = mrv1.pids()
        servers = first + mrv2.pids()
        assert len(servers) == 8 and mrv1._sup.pid not in servers
        orphan = max(testing.recorded_pids(pid_file))  # the double-forked, setsid'd "engine core"
        assert process_tree.parent(orphan) in (mrv1._sup.pid, mrv2._sup.pid), "not adopted by its supervisor"
        # The supervisor holds the lease, as in the plain path: the slot stays taken until the tree is gone.
        assert mrv1.lease.path in [
            os.path.realpath("/proc/%d/fd/%s" % (mrv1._sup.pid, fd)) for fd in os.listdir("/proc/%d/fd" % mrv1._sup.pid)
        ]
    imported = testing.imports(str(tmp_path / "imports"))
    assert len(imported) == 1 and imported[0] not in servers, "fake_heavy imported %s" % imported
    plugin = re.search(r"fake plugin fake_plugin in (\d+): SLEEPWAKE_MUTANT=alpha CUDA_VISIBLE_DEVICES=0", _log(mrv1))
    assert plugin and int(plugin.group(1)) in first, "the plugin did not run in the server with its variables"
    assert "fake plugin" not in _log(mrv2)  # its sys.path never had the plugin's site
    for server in (mrv1, mrv2):
        assert "forked by zygote %d" % imported[0] in _log(server)
        assert "tree of 4 process(es) gone" in _log(server)


def test_the_api_server_and_the_door_host_fork_from_one_zygote(tmp_path, pid_file, site, host, monkeypatch):
    """With zygote_preload auto the two server modules share a zygote (config.SHARED_ZYGOTE_MODULES), so
    the door host's first cell forks from the import the goldens' API servers paid for. Two copies of the
    stub stand in for them."""
    shutil.copy(os.path.join(site, testing.STUB_MODULE + ".py"), os.path.join(site, "stub_door_host.py"))
    monkeypatch.setattr(config, "SHARED_ZYGOTE_MODULES", (testing.STUB_MODULE, "stub_door_host"))
    monkeypatch.setattr(config, "VLLM_PRELOAD", ())  # vLLM's, which the stubs do not import
    monkeypatch.setattr(config, "DOOR_PRELOAD", ())
    environ = _environ(tmp_path, site)
    with (
        _server(tmp_path, pid_file, environ) as api_server,
        _server(tmp_path, pid_file, environ, module="stub_door_host") as door_host,
    ):
        assert api_server.start_mode == door_host.start_mode == "zygote"
    imported = testing.imports(str(tmp_path / "imports"))
    assert len(imported) == 1, "fake_heavy imported by %s" % imported
    assert "forked by zygote %d" % imported[0] in _log(api_server)
    key = re.search(r"# start: zygote key (\w+)", _log(api_server))
    assert key is not None, _log(api_server)
    assert "forked by zygote %d (key %s): the server skips importing stub_door_host" % (
        imported[0],
        key.group(1),
    ) in _log(door_host)
    with _server(tmp_path, pid_file, environ, module="stub_door_host", zygote_preload="none") as own:
        assert own.start_mode == "zygote"  # a list of its own: a zygote of the door host alone
    assert len(testing.imports(str(tmp_path / "imports"))) == 2


def test_the_zygote_answers_pings_and_refuses_what_it_cannot_serve(tmp_path, pid_file, site, host):
    environ = _environ(tmp_path, site)
    with _server(tmp_path, pid_file, environ) as server:
        spec = {
            "argv": server.command,
            "env": server.env,
            "cwd": os.getcwd(),
            "grace_s": 0.5,
            "parent_pid": os.getpid(),
            "parent_start": process_tree.start_time(os.getpid()),
        }
    sockets = [
        name
        for name in os.listdir(tmp_path / "locks")
        if name.startswith("zygote-") and name.endswith(".sock") and name != "zygote-host.sock"
    ]
    assert len(sockets) == 1
    path = str(tmp_path / "locks" / sockets[0])

    def ask(message, fds=()):
        with unix_socket.connect(path, 5) as sock:
            unix_socket.send(sock, message, fds)
            return unix_socket.recv(sock, 5)[0]

    pong = ask({"op": "ping"})
    assert pong["ok"] and pong["modules"] == [testing.STUB_MODULE] and sockets[0] == "zygote-%s.sock" % pong["key"]
    read_end, write_end = os.pipe()
    try:
        fds = [read_end, write_end, write_end]
        assert "serves key" in ask({"op": "fork", "key": "another", "spec": spec}, fds)["error"]
        other = dict(spec, argv=[spec["argv"][0], "-m", "json.tool"])
        assert "runs `" in ask({"op": "fork", "key": pong["key"], "spec": other}, fds)["error"]
        assert "needs 3 or 4 descriptors" in ask({"op": "fork", "key": pong["key"], "spec": spec}, fds[:2])["error"]
        assert "unknown op" in ask({"op": "exec"})["error"]
    finally:
        os.close(read_end)
        os.close(write_end)


def test_an_idle_zygote_exits_and_the_next_start_imports_again(tmp_path, pid_file, site, host):
    environ = _environ(tmp_path, site)
    with _server(tmp_path, pid_file, environ, zygote_idle_s=0.5):
        pass
    first = testing.imports(str(tmp_path / "imports"))
    _wait_gone(first[0])
    assert not [n for n in os.listdir(tmp_path / "locks") if n.endswith(".sock") and n != "zygote-host.sock"]
    with _server(tmp_path, pid_file, environ, zygote_idle_s=0.5) as server:
        assert server.start_mode == "zygote"
    assert len(testing.imports(str(tmp_path / "imports"))) == 2


def test_a_forked_servers_collections_skip_what_the_zygote_imported(tmp_path, pid_file, site, host):
    """The import's objects are frozen before the fork: a plain start's collections walk all of them."""
    environ = _environ(tmp_path, site)
    walked = re.compile(r"gc: (\d+) frozen, (\d+) of fake_heavy's (\d+) containers walked")
    with _server(tmp_path, pid_file, environ) as forked:
        assert forked.start_mode == "zygote"
    with _server(tmp_path, pid_file, environ, start_mode="plain") as plain:
        pass
    forked_gc, plain_gc = walked.search(_log(forked)), walked.search(_log(plain))
    assert forked_gc is not None and plain_gc is not None, (_log(forked), _log(plain))
    frozen, seen, heavy = map(int, forked_gc.groups())
    assert frozen >= heavy > 0 and seen == 0, forked_gc.group(0)
    frozen, seen, heavy = map(int, plain_gc.groups())
    assert frozen == 0 and seen == heavy, plain_gc.group(0)


def test_a_key_variable_gets_its_own_zygote_a_per_server_one_does_not(tmp_path, pid_file, site, host):
    environ = _environ(tmp_path, site, FAKE_KEY_VARIABLE="1")
    for variant in (
        environ,
        dict(environ, SLEEPWAKE_MUTANT="x", PYTEST_CURRENT_TEST="t"),
        dict(environ, FAKE_KEY_VARIABLE="2"),
    ):
        with _server(tmp_path, pid_file, variant) as server:
            assert server.start_mode == "zygote"
    assert len(testing.imports(str(tmp_path / "imports"))) == 2


def test_a_reinstalled_module_gets_a_fresh_zygote(tmp_path, pid_file, site, host):
    environ = _environ(tmp_path, site)
    with _server(tmp_path, pid_file, environ):
        pass
    with open(os.path.join(site, "stub_api_server.py"), "a") as f:
        f.write("\n# reinstalled\n")  # new size and mtime, as pip's reinstall leaves
    with _server(tmp_path, pid_file, environ) as server:
        assert server.start_mode == "zygote"
    first, second = testing.imports(str(tmp_path / "imports"))
    _wait_gone(first)  # the stale zygote exits after refusing
    assert "forked by zygote %d" % second in _log(server)


def test_first_use_outside_bazel_starts_the_host(tmp_path, pid_file, site):
    environ = testing.module_environ(site)  # no TEST_TMPDIR: not inside a Bazel test
    started = len(zygote_client._hosts_started)
    try:
        with _server(tmp_path, pid_file, environ) as server:
            assert server.start_mode == "zygote"
    finally:
        for proc in zygote_client._hosts_started[started:]:
            proc.terminate()
            proc.wait(timeout=30)
    assert len(zygote_client._hosts_started) == started + 1


@pytest.mark.parametrize(
    "case", ["no host inside bazel", "per-server variable read at import", "not a module", "import fails"]
)
def test_an_unusable_zygote_falls_back_to_a_plain_start_and_says_why(tmp_path, pid_file, site, caplog, case):
    caplog.set_level(logging.WARNING, "sleepwake.launcher")
    environ = _environ(tmp_path, site)
    reason = {
        "no host inside bazel": "no zygote host serves %s" % (tmp_path / "locks"),
        "per-server variable read at import": "reads per-server variables, which would keep this"
        " zygote's values in every server: VLLM_USE_V2_MODEL_RUNNER",
        "not a module": "the server command is not `python -m module ...`",
        "import fails": "the zygote host could not start a zygote for stub_api_server: RuntimeError: fake_heavy:"
        " import failed",
    }[case]
    if case == "per-server variable read at import":
        environ["STUB_SERVER_READS_AT_IMPORT"] = "VLLM_USE_V2_MODEL_RUNNER"
    if case == "import fails":  # the plain start then fails too, at its own import
        environ["STUB_SERVER_IMPORT_FAILS"] = "1"
    script = case == "not a module"
    with zygote_client.private_host(str(tmp_path / "locks")) if case != "no host inside bazel" else _nothing():
        server = _server(tmp_path, pid_file, environ, script=script, start_mode="auto")
        if case == "import fails":
            with pytest.raises(ServerStartError, match="exited during start-up"):
                server.start()
        else:
            with server:
                assert server.start_mode == "plain"
        assert "# start: plain (the zygote is unavailable: " in _log(server) and reason in _log(server)
        assert "starting the server plainly: " in caplog.text and reason in caplog.text
        with pytest.raises(ServerStartError, match="start_mode zygote: .*" + re.escape(reason[:40])):
            _server(tmp_path, pid_file, environ, script=script, start_mode="zygote").start()
    if case == "import fails":  # the zygote's failed import, then the plain server's; the host remembered
        assert len(testing.imports(str(tmp_path / "imports"))) == 2


def _zygote_log(tmp_path, server) -> str:
    key = re.search(r"# start: zygote key (\w+)", _log(server))
    assert key is not None, _log(server)
    with open(tmp_path / "locks" / ("zygote-%s.log" % key.group(1))) as f:
        return f.read()


def test_a_preload_is_imported_once_in_the_zygote_and_a_zygote_without_it_is_another(tmp_path, pid_file, site, host):
    environ = _environ(
        tmp_path, site, FAKE_PRELOAD_IMPORT_LOG=str(tmp_path / "preloads"), STUB_SERVER_LATE_IMPORTS="fake_preload"
    )
    with (
        _server(tmp_path, pid_file, environ, zygote_preload="fake_preload") as first,
        _server(tmp_path, pid_file, environ, zygote_preload="fake_preload") as second,
    ):
        assert first.start_mode == second.start_mode == "zygote"
    zygote_pid = testing.imports(str(tmp_path / "imports"))
    assert testing.imports(str(tmp_path / "preloads")) == zygote_pid, "imported outside the one zygote"
    for server in (first, second):
        assert "late import fake_preload (imported already: True)" in _log(server)
    assert re.search(
        r"imported stub_api_server in [\d.]+ s, then 1 of 1 preload\(s\) in [\d.]+ s;", _zygote_log(tmp_path, first)
    )
    with _server(tmp_path, pid_file, environ, zygote_preload="none") as plain_list:  # the list keys the zygote
        assert plain_list.start_mode == "zygote"
    assert len(testing.imports(str(tmp_path / "imports"))) == 2
    assert "late import fake_preload (imported already: False)" in _log(plain_list)
    assert len(testing.imports(str(tmp_path / "preloads"))) == 2  # that server's own import


def test_a_preload_with_a_function_computes_its_cached_value_once_in_the_zygote(tmp_path, pid_file, site, host):
    environ = _environ(
        tmp_path, site, FAKE_PRELOAD_CALL_LOG=str(tmp_path / "calls"), STUB_SERVER_LATE_CALLS="fake_preload:cache_key"
    )
    with (
        _server(tmp_path, pid_file, environ, zygote_preload="fake_preload:cache_key") as first,
        _server(tmp_path, pid_file, environ, zygote_preload="fake_preload:cache_key") as second,
    ):
        assert first.start_mode == second.start_mode == "zygote"
    assert testing.imports(str(tmp_path / "calls")) == testing.imports(str(tmp_path / "imports")), (
        "computed outside the one zygote"
    )
    for server in (first, second):
        assert "late call fake_preload:cache_key -> key" in _log(server)
    assert "then 1 of 1 preload(s) in" in _zygote_log(tmp_path, first)


def test_a_preload_reading_a_per_server_variable_refuses_every_fork(tmp_path, pid_file, site, host):
    environ = _environ(tmp_path, site, FAKE_PRELOAD_READS_AT_IMPORT="VLLM_USE_V2_MODEL_RUNNER")
    with _server(tmp_path, pid_file, environ) as server:  # not preloaded: the server reads its own value
        assert server.start_mode == "zygote"
    preloading = _server(tmp_path, pid_file, environ, zygote_preload="fake_preload")
    try:
        with pytest.raises(
            ServerStartError,
            match=r"start_mode zygote: .*reads per-server variables, which would"
            r" keep this zygote's values in every server: VLLM_USE_V2_MODEL_RUNNER"
            r" \(\S*fake_preload\.py:\d+\)",
        ):
            preloading.start()
    finally:
        preloading.stop()


def test_a_preload_that_fails_to_import_is_logged_and_the_zygote_serves(tmp_path, pid_file, site, host):
    environ = _environ(tmp_path, site, STUB_SERVER_LATE_IMPORTS="fake_preload")
    with _server(tmp_path, pid_file, environ, zygote_preload="fake_no_such_module,fake_preload") as server:
        assert server.start_mode == "zygote"
        assert "late import fake_preload (imported already: True)" in _log(server)
    log = _zygote_log(tmp_path, server)
    assert (
        "preload fake_no_such_module failed, left to the server: ModuleNotFoundError: No module named"
        " 'fake_no_such_module'\n"
    ) in log
    assert "then 1 of 2 preload(s) in" in log


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _zygote_of(module, **fields) -> zygote.Zygote:
    values: dict[str, Any] = dict(
        modules=(module,),
        key="k",
        python="/py",
        key_pythonpath=[],
        site_path=[],
        files=zygote.module_files_state(module),
        unsafe_reads={},
        loaded={},
        import_fds=frozenset(),
    )
    values.update(fields)
    return zygote.Zygote(**values)


def _fork_request(tmp_path, *pythonpath):
    return {
        "key": "k",
        "spec": {
            "argv": ["/py", "-m", "json", "--x"],
            "cwd": str(tmp_path),
            "env": {"PYTHONPATH": os.pathsep.join(pythonpath)},
        },
    }


def test_a_fork_is_refused_when_cuda_is_initialised(tmp_path):
    assert _zygote_of("json").refusal(_fork_request(tmp_path)) is None
    refusal = _zygote_of("json", cuda_initialized=lambda: True).refusal(_fork_request(tmp_path))
    assert refusal is not None and "CUDA is initialised" in refusal.reason and not refusal.stale


class _Driver:
    """libcuda.so.1 as ctypes loads it: cuDeviceGetCount answers `answer` (3: no cuInit yet)."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def cuDeviceGetCount(self, _count):
        self.calls += 1
        return self.answer


def test_a_driver_initialised_without_torch_knowing_counts_as_cuda_initialised():
    assert zygote.driver_initialized(load=lambda _name: _Driver(0))  # cuInit ran: forks would be unusable
    fresh = _Driver(3)
    assert not zygote.driver_initialized(load=lambda _name: fresh) and fresh.calls == 1

    def no_driver(name):
        raise OSError("%s: cannot open shared object file" % name)

    assert not zygote.driver_initialized(load=no_driver)


def test_a_fork_is_refused_when_a_servers_path_shadows_an_imported_module(tmp_path):
    imported_from, shadowing = tmp_path / "key_entry", tmp_path / "server_site"
    for entry in (imported_from, shadowing):
        (entry / "heavy").mkdir(parents=True)
    (tmp_path / "cwd").mkdir()
    z = _zygote_of("json", key_pythonpath=[str(imported_from)], loaded={"heavy": str(imported_from)})
    request = _fork_request(tmp_path / "cwd", str(shadowing), str(imported_from))
    refusal = z.refusal(request)
    assert refusal is not None and "heavy in %s (imported from %s)" % (shadowing, imported_from) in refusal.reason
    assert z.refusal(_fork_request(tmp_path / "cwd", str(imported_from), str(shadowing))) is None  # behind it


def test_a_fork_is_refused_as_stale_once_the_module_files_change(tmp_path):
    z = _zygote_of("json", files=[["/x/json/__init__.py", 1, 2, 3]])
    refusal = z.refusal(_fork_request(tmp_path))
    assert refusal is not None and refusal.stale and "changed since this zygote imported them" in refusal.reason


def test_environment_reads_are_recorded_with_their_sites():
    with zygote.EnvReads() as reads:
        os.environ.get("SLEEPWAKE_PROBE_A")
        "SLEEPWAKE_PROBE_B" in os.environ  # noqa: B015 (the read is the point)
        dict(os.environ)  # a walk over everything: not a point read
    point = reads.point_reads()
    assert set(point) >= {"SLEEPWAKE_PROBE_A", "SLEEPWAKE_PROBE_B"}
    assert all(site.startswith(__file__) for site in point["SLEEPWAKE_PROBE_A"])
    assert "PATH" not in point  # read only by the walk
    assert type(os.environ).__getitem__ is reads._saved[0]  # restored


def test_a_dead_test_process_is_seen_before_the_server_starts():
    child = os.fork()
    if child == 0:
        os._exit(0)
    start = process_tree.start_time(child)
    os.waitpid(child, 0)
    assert zygote.watch_test_process(child, start) is None
    fd = zygote.watch_test_process(os.getpid(), process_tree.start_time(os.getpid()))
    assert fd is not None
    os.close(fd)
    assert zygote.watch_test_process(os.getpid(), 1) is None  # a reused PID: another start time


def test_a_supervisor_killed_without_its_teardown_leaves_nothing_behind(tmp_path, pid_file, site, host):
    environ = _environ(tmp_path, site)
    server = _server(tmp_path, pid_file, environ)
    server.start()
    recorded = testing.recorded_pids(pid_file)
    os.kill(server._sup.pid, 9)  # the server dies by PDEATHSIG; its orphans land in the zygote
    try:
        assert testing.survivors_after(recorded, zygote.ORPHAN_CHECK_S * 3) == []
    finally:
        server.stop()
