"""The lifecycle of VllmServer, driven with testdata/stub_api_server.py in place of vLLM."""

import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tools.launcher import gpu_lease, memory_claims, ports, process_tree
from tools.launcher import server as server_lib
from tools.launcher.errors import (
    LeaseTimeoutError,
    PortConflictError,
    ServerReleaseError,
    ServerStartError,
    VllmNotFoundError,
)
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.phase_plugin import sleepwake_memory_phase as phase_plugin
from tools.launcher.server import VllmServer, check_runner, first_error
from tools.launcher.unit import testing

GIB = 1 << 30


def _server(
    tmp_path, pid_file, mode="ok", runner_line="env", nvml=None, lease=False, fixed_port=None, extra_env=None, **cfg
):
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return VllmServer(
        testing.fast_config(tmp_path, **cfg),
        lease=lease,
        nvml=nvml or FakeNvml(),
        command_factory=testing.stub_command(mode, runner_line, pid_file, fixed_port),
        environ=dict(environ, **(extra_env or {})),
    )


def _ppid(pid):
    return process_tree.parent(pid)


@pytest.mark.parametrize("runner", ["mrv1", "mrv2"])
def test_serves_then_takes_down_the_whole_tree(tmp_path, pid_file, runner):
    with _server(tmp_path, pid_file, runner=runner) as server:
        with urllib.request.urlopen(server.url + "/health") as response:
            assert response.status == 200
        recorded = testing.recorded_pids(pid_file)
        assert len(recorded) == 4 and sorted(recorded) == server.pids()
        orphan = max(recorded)  # the double-forked, setsid'd "engine core"
        assert _ppid(orphan) == server._sup.pid, "the supervisor should have adopted the orphan (subreaper)"
        assert server.command[1] == testing.STUB_SERVER and str(server.port) in server.command
        assert server.url == "http://127.0.0.1:%d" % server.port
        assert "stub vLLM server ready" in open(server.log_path).read()
    assert server.pids() == []
    assert testing.survivors_after(recorded, 0) == []
    assert "tree of 4 process(es) gone" in open(server.log_path).read()


@pytest.mark.parametrize(
    "runner,runner_line,wrong",
    [("mrv2", "never", "built the V1 runner"), ("mrv1", "always", "says 'Using V2 Model Runner'")],
)
def test_a_runner_other_than_asked_fails_the_start(tmp_path, pid_file, runner, runner_line, wrong):
    with pytest.raises(ServerStartError, match=wrong):
        _server(tmp_path, pid_file, runner=runner, runner_line=runner_line).start()


def test_runner_check_reads_the_log_text():
    check_runner("mrv2", "x\n(EngineCore pid=1) INFO gpu_worker.py:378] Using V2 Model Runner\n")
    check_runner("mrv1", "INFO loading weights\n")
    with pytest.raises(ServerStartError):
        check_runner("mrv1", "Using V2 Model Runner")


def test_death_at_start_raises_with_the_log_tail_and_leaves_nothing(tmp_path, pid_file):
    with pytest.raises(ServerStartError) as e:
        _server(tmp_path, pid_file, mode="die_at_start").start()
    message = str(e.value)
    assert "exited during start-up (exit code 3)" in message
    assert "fake engine core failed" in message and "fake start-up line 79" in message
    assert "fake start-up line 29\n" not in message  # only the last 50 lines
    # The engine's cause, above those lines, leads the message.
    assert "200; its first error: ModuleNotFoundError: No module named 'fake'. Fix" in message


def test_first_error_is_the_first_exception_line_without_vllms_prefixes():
    log = (
        "(APIServer pid=1) INFO 12-06 11:32:13 [api_utils.py:273] non-default args: {'error': 1}\n"
        "(EngineCore pid=2) ERROR 12-06 11:32:24 [core.py:1330] Traceback (most recent call last):\n"
        '(EngineCore pid=2) ERROR 12-06 11:32:24 [core.py:1330]   File "x.py", line 6, in <module>\r\n'
        "(EngineCore pid=2) ERROR 12-06 11:32:24 [core.py:1330] ModuleNotFoundError: No module named 'jsonschema'\r\n"
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    assert first_error(log) == "ModuleNotFoundError: No module named 'jsonschema'"
    assert first_error("torch.OutOfMemoryError: CUDA out of memory.\n") == "torch.OutOfMemoryError: CUDA out of memory."
    assert first_error("INFO all fine\nAn Error: in prose is not one\n") is None


def test_start_timeout_raises_and_stops_the_server(tmp_path, pid_file):
    with pytest.raises(
        ServerStartError,
        match=r"(?s)did not answer GET .*/health with 200 within 1 s.*stub vLLM"
        r" server ready",
    ):
        _server(tmp_path, pid_file, mode="never_healthy", startup_timeout_s=1.0).start()
    assert len(testing.recorded_pids(pid_file)) == 4


def test_port_conflict_is_retried_on_a_fresh_port(tmp_path, pid_file, caplog):
    caplog.set_level(logging.WARNING, "sleepwake.launcher")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with _server(tmp_path, pid_file, port=busy) as server:
            assert server.port != busy
    assert "port %d was taken" % busy in caplog.text


def test_port_conflict_after_retries_is_an_error(tmp_path, pid_file):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with pytest.raises(PortConflictError, match="every port tried was already in use.*1 retries"):
            _server(tmp_path, pid_file, fixed_port=busy, port_retries=1).start()


def _neighbour_on(port: int, served: list[str]) -> http.server.HTTPServer:
    """A neighbour's HTTP server that binds `port` with SO_REUSEADDR, as vLLM does, as soon as another
    socket has bound it (which a plain bind then sees), and listens at once, answering /health 200."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            served.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                break  # our server has bound it and does not listen yet
        time.sleep(0.01)
    httpd = http.server.HTTPServer(("127.0.0.1", port), Handler, bind_and_activate=False)
    httpd.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    httpd.server_bind()
    httpd.server_activate()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def test_a_neighbour_listening_first_on_the_port_is_not_taken_for_this_server(tmp_path, pid_file, caplog):
    """Two servers bound to one port (SO_REUSEADDR, neither listening yet) and the neighbour listens first:
    its /health 200 must not start this server, which retries on a fresh port."""
    caplog.set_level(logging.WARNING, "sleepwake.launcher")
    port = ports.Reservation("127.0.0.1")
    port.close()
    served: list[str] = []
    holder: dict[str, http.server.HTTPServer] = {}
    thread = threading.Thread(target=lambda: holder.setdefault("httpd", _neighbour_on(port.port, served)))
    thread.start()
    try:
        with _server(tmp_path, pid_file, port=port.port, extra_env={"STUB_SERVER_LISTEN_DELAY_S": "1.0"}) as server:
            assert server.port != port.port
            assert ports.listening_pids(server.pids(), server.port)
        thread.join(5)
        assert served, "the neighbour never answered: the race was not set up"
        assert "no process of this server listens on port %d" % port.port in caplog.text
    finally:
        thread.join(5)
        if "httpd" in holder:
            holder["httpd"].shutdown()
            holder["httpd"].server_close()


def test_a_reserved_port_is_never_handed_out_and_the_server_can_still_bind_it():
    reservation = ports.Reservation("127.0.0.1")
    try:
        handed_out = set()
        for _ in range(3000):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                handed_out.add(probe.getsockname()[1])
        assert reservation.port not in handed_out
        with socket.socket() as server_sock:  # vLLM's bind: SO_REUSEADDR, then listen
            server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server_sock.bind(("127.0.0.1", reservation.port))
            server_sock.listen()
            assert ports.listening_pids([os.getpid()], reservation.port) == {os.getpid()}
    finally:
        reservation.close()


def test_restart_keeps_the_port_and_replaces_the_processes(tmp_path, pid_file):
    with _server(tmp_path, pid_file) as server:
        port, before = server.port, server.pids()
        server.restart()
        assert server.port == port and not set(before) & set(server.pids())
        with urllib.request.urlopen(server.url + "/health") as response:
            assert response.status == 200


def test_release_waits_for_nvml_to_drop_the_pids(tmp_path, pid_file):
    nvml = FakeNvml()
    with pytest.raises(ServerReleaseError, match="NVML still lists server PIDs"):
        with _server(tmp_path, pid_file, nvml=nvml) as server:
            nvml.procs = {pid: GIB for pid in server.pids()}  # NVML lags behind the process exits
    with _server(tmp_path, pid_file, nvml=nvml, release_timeout_s=10.0) as server:
        nvml.procs = {pid: GIB for pid in server.pids()}
        threading.Timer(0.3, nvml.procs.clear).start()
    assert nvml.processes() == {}


@pytest.mark.parametrize("slots,raises", [(1, True), (2, False)])
def test_device_memory_is_checked_only_with_an_exclusive_lease(tmp_path, pid_file, slots, raises):
    nvml = FakeNvml(used={0: GIB})
    server = _server(tmp_path, pid_file, nvml=nvml, lease=True, slots_per_gpu=slots)
    with server:
        assert server.env["CUDA_VISIBLE_DEVICES"] == "0" and server.lease.exclusive == (slots == 1)
        assert server.device_used_bytes() == GIB
        nvml.used[0] = GIB + (600 << 20)  # leaked: more than the 512 MiB tolerance
        if raises:
            with pytest.raises(
                ServerReleaseError, match="device 0 holds 1624 MiB that no process NVML lists accounts for vs 1024 MiB"
            ):
                server.stop()
    assert server.lease is None  # given back even when the release check fails


def test_teardown_waits_for_a_neighbours_exclusive_memory_phase(tmp_path, pid_file):
    """A server leaving a shared GPU frees device memory: a neighbour inside its exclusive phase (a
    sleep judged by device-wide bytes) must not see that happen mid-window."""
    server = _server(tmp_path, pid_file, lease=True, slots_per_gpu=2)
    server.start()
    stopped = threading.Event()
    neighbour = gpu_lease.Lease(
        gpu=server.lease.gpu, slot=1 - server.lease.slot, path=server.lease.path, fd=-1, waited_s=0.0, exclusive=False
    )
    with gpu_lease.memory_phase(neighbour, gpu_lease.EXCLUSIVE, timeout_s=5):
        stop_wall = []

        def stop():
            begin = time.monotonic()
            server.stop()
            stop_wall.append(time.monotonic() - begin)
            stopped.set()

        stopper = threading.Thread(target=stop)
        stopper.start()
        assert not stopped.wait(1.0), "the server was torn down inside a neighbour's exclusive phase"
        assert testing.survivors_after(testing.recorded_pids(pid_file), 0), (
            "its processes must still be there while the neighbour measures"
        )
    assert stopped.wait(30), "the teardown did not proceed once the neighbour's phase ended"
    stopper.join()
    # The bench's breakdown of a slow matrix: the wait is the neighbour's, and not the stop's too
    # (the phases are disjoint, so the cell's rest is its tests' own time).
    timings = server.timings
    assert timings.memory_phases == len(phase_plugin.STEPS) + 1  # each step of the start (ALLOCATE), the stop (RELEASE)
    assert timings.memory_phase_wait_s >= 0.9
    assert timings.stop_s + timings.memory_phase_wait_s <= stop_wall[0] + 0.01
    assert 0 < timings.start_s and timings.lease_wait_s < 1.0


@pytest.mark.parametrize("scope", ["steps", "start"])
def test_a_shared_start_holds_the_allocate_phase_only_in_its_workers_steps(tmp_path, pid_file, scope):
    """With steps, a neighbour's sleep (FREE) gets in while the server starts, between its worker's
    steps; with start, the launcher holds ALLOCATE from launch to /health and it never does."""
    server = _server(tmp_path, pid_file, lease=True, slots_per_gpu=2, memory_phase_scope=scope)
    neighbour = gpu_lease.Lease(
        gpu="0", slot=1, path=gpu_lease._slot_path(server.config.lock_dir, "0", 1), fd=-1, waited_s=0.0, exclusive=False
    )
    starting, healthy, got_in = threading.Event(), threading.Event(), []

    def sleep_repeatedly():
        starting.wait()
        while not healthy.is_set():
            try:
                with gpu_lease.memory_phase(neighbour, gpu_lease.FREE, timeout_s=0.02):
                    if not healthy.is_set():
                        got_in.append(server.port)
            except LeaseTimeoutError:
                pass

    sleeper = threading.Thread(target=sleep_repeatedly)
    sleeper.start()
    os.makedirs(server.config.lock_dir, exist_ok=True)
    real_launch, real_wait = server._launch, server._wait_healthy

    def launch(port):
        real_launch(port)
        starting.set()  # the server's processes exist: from here until /health, the start

    def wait_healthy():
        try:
            return real_wait()
        finally:
            healthy.set()

    server._launch, server._wait_healthy = launch, wait_healthy
    try:
        server.start()
    finally:
        starting.set()
        healthy.set()
        sleeper.join()
    try:
        log_text = server_lib.read_log(server.log_path)
        steps = phase_plugin.read_steps(log_text)
        if scope == "steps":
            assert [s["step"] for s in steps] == list(phase_plugin.STEPS)
            assert "MiB after the last bracketed step" in log_text
            # what each step mapped beyond its pools, for a declared bound per step (bazel_runs prints it)
            assert sorted(server.timings.step_bytes_by) == sorted(phase_plugin.STEPS)
            assert got_in, "no neighbour's sleep got in while the server started"
        else:
            assert steps == [] and got_in == []
    finally:
        server.stop()


@pytest.mark.parametrize("scope", ["steps", "start"])
def test_a_worker_that_brackets_its_calls_is_covered_by_its_clients_phases_and_its_waits_count(
    tmp_path, pid_file, scope
):
    """With steps the worker brackets its sleeps, wakes and reloads (phase_plugin.CALLS): the server says
    so (brackets_calls), a phase its client holds covers them on the server's cover file, and at the stop
    the waits the worker logged for uncovered calls count as memory-phase waits, not as the cell's work."""
    server = _server(tmp_path, pid_file, lease=True, slots_per_gpu=2, memory_phase_scope=scope)
    os.makedirs(server.config.lock_dir, exist_ok=True)
    server.start()
    cover = server.env.get(phase_plugin.ENV_COVER)
    try:
        assert server.brackets_calls == (scope == "steps")
        if scope == "start":
            assert cover is None
            return
        assert os.path.exists(cover) and not gpu_lease.covered(cover, gpu_lease.FREE)
        with server.memory_phase(gpu_lease.FREE, "window"):
            assert gpu_lease.covered(cover, gpu_lease.FREE) and not gpu_lease.covered(cover, gpu_lease.ALLOCATE)
        with open(server.log_path, "a") as f:  # what the worker logs for two calls, one of them covered
            for waited, covered in ((0.75, False), (9.0, True)):
                f.write(
                    '(EngineCore pid=1) %s{"call": "sleep", "waited_s": %s, "held_s": 0.02, "covered": %s}\n'
                    % (phase_plugin.MARK, waited, json.dumps(covered))
                )
        before = server.timings.memory_phase_wait_s
    finally:
        server.stop()
    assert server.timings.memory_phase_wait_s - before == pytest.approx(0.75, abs=0.5)
    assert not os.path.exists(cover)


@pytest.mark.parametrize(
    "extra_env,nvml,message",
    [
        ({"STUB_SERVER_UNBRACKETED": "1"}, None, "its worker did not bracket init_device, load_model"),
        ({"STUB_SERVER_NO_SLEEP": "1"}, None, "its worker does not bracket sleep (this vLLM renamed the call"),
        ({"STUB_SERVER_WORKER_BYTES": str(1 << 30)}, FakeNvml(procs={}), "NVML"),
    ],
)
def test_a_start_whose_memory_phases_cannot_be_shown_fails(tmp_path, pid_file, extra_env, nvml, message):
    if "STUB_SERVER_WORKER_BYTES" in extra_env:
        # The worker reported 1 GiB after its last step; NVML shows the tree holding 2 GiB at /health.
        class Grown(FakeNvml):
            def process_bytes(self, pids):
                return 2 << 30

        nvml, message = Grown(), "1024 MiB more than the worker held after its last bracketed step"
    server = _server(tmp_path, pid_file, lease=True, slots_per_gpu=2, extra_env=extra_env, nvml=nvml)
    with pytest.raises(ServerStartError, match="memory_phase_scope steps: ") as e:
        server.start()
    assert message in str(e.value) and "SLEEPWAKE_MEMORY_PHASE_SCOPE=start" in str(e.value)
    assert testing.survivors_after(testing.recorded_pids(pid_file), 5) == []
    server.stop()


# Holds GPU 0's only slot lock for argv[2] seconds: another cell's lease, from another process.
_HOLD_SLOT = (
    "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
    "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(float(sys.argv[2]))"
)


def test_timings_add_up_over_restarts_and_take_the_lease_wait(tmp_path, pid_file):
    server = _server(tmp_path, pid_file, lease=True, slots_per_gpu=1)
    os.makedirs(server.config.lock_dir, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SLOT, gpu_lease._slot_path(server.config.lock_dir, "0", 0), "1.0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    server.start()  # waits for the holder's slot
    holder.wait()
    first_start = server.timings.start_s
    server.restart()
    with server.memory_phase(gpu_lease.EXCLUSIVE) as waited:
        assert waited == 0.0  # alone on its GPU: no lock at all
    server.stop()
    timings = server.timings.as_record()
    assert timings["lease_wait_s"] >= 0.5
    assert server.timings.start_s > first_start > 0
    # start, the restart's stop and start, the exclusive phase above, stop: five, none waited for
    assert timings["memory_phases"] == 5 and timings["memory_phase_wait_s"] == 0.0
    by = timings["memory_phase_by"]  # the same five by what took them, each timed
    assert sum(e["n"] for e in by.values()) == 5 and all(e["held_s"] >= 0 for e in by.values()), by
    assert timings["stop_s"] > 0
    assert timings["launches"] == 2  # the start and the restart's
    assert set(timings) == {
        "lease_wait_s",
        "launches",
        "start_s",
        "memory_phase_wait_s",
        "memory_phases",
        "memory_phase_by",
        "reserved_growth_by",
        "step_bytes_by",
        "sleep_asserts",
        "stop_s",
        "start_cpu_s",
        "serve_cpu_s",
        "cpu_by_thread",
    }


def test_the_trees_cpu_is_split_into_its_start_and_its_serving(tmp_path, pid_file):
    """What the start spent (to /health) and what serving spent after it, each counted once."""
    server = _server(tmp_path, pid_file, extra_env={"STUB_SERVER_START_CPU_S": "0.6"})
    server.start()
    with urllib.request.urlopen(server.url + "/spin?cpu_s=0.4", timeout=10) as answer:
        assert answer.status == 200
    # The kernel counts CPU time in clock ticks (user and system apart, each rounded down), so a reading
    # may fall short by two of them.
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    # The request's thread answers before it ends: the stop below must find it ended, as a real one does.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        threads = process_tree.thread_cpu(process_tree.snapshot(server._sup.pid, include_root=False))
        if any(k.endswith("/(exited threads)") and g["cpu_s"] >= 0.4 - 2 * tick for k, g in threads.items()):
            break
        time.sleep(0.02)  # polled: the thread's end has no event to wait on from here
    server.stop()
    # The interpreter's own start-up and the family it forks add a little to the start's 0.6 s.
    assert 0.6 - 2 * tick <= server.timings.start_cpu_s < 1.2
    assert 0.4 - 2 * tick <= server.timings.serve_cpu_s < 0.7
    # By thread: the start spun in the main thread; /spin in a request's thread, gone since, which the
    # process's own time still counts. Together they are the tree's time (reaped children aside).
    by_thread = server.timings.cpu_by_thread
    main = [g for k, g in by_thread.items() if k.endswith("/main") and g["cpu_s"] >= 0.6 - 2 * tick]
    exited = [g["cpu_s"] for k, g in by_thread.items() if k.endswith("/(exited threads)")]
    assert len(main) == 1 and main[0]["threads"] >= 1, by_thread  # the main threads of the tree's processes
    assert max(exited, default=0.0) >= 0.4 - 2 * tick, by_thread
    total = sum(g["cpu_s"] for g in by_thread.values())
    assert total <= server.timings.start_cpu_s + server.timings.serve_cpu_s + 2 * tick


def test_gpu_bytes_counts_the_servers_processes(tmp_path, pid_file):
    nvml = FakeNvml()
    with _server(tmp_path, pid_file, nvml=nvml, lease=True) as server:
        nvml.procs = {server.pids()[0]: GIB, server.pids()[-1]: 2 * GIB, 1: 5 * GIB}
        assert server.gpu_bytes() == 3 * GIB
        nvml.procs = {}


def test_vllm_importable_check_runs_only_for_the_real_command(tmp_path, pid_file, monkeypatch):
    calls = []

    def check(python, env, module="vllm"):
        calls.append(module)
        raise VllmNotFoundError("no vllm")

    monkeypatch.setattr(server_lib, "check_importable", check)
    with _server(tmp_path, pid_file):
        assert calls == []
    with pytest.raises(VllmNotFoundError):
        VllmServer(testing.fast_config(tmp_path), nvml=FakeNvml()).start()
    assert calls == ["vllm"]


def test_missing_model_fails_before_anything_starts(tmp_path, pid_file):
    with pytest.raises(ServerStartError, match="does not exist"):
        _server(tmp_path, pid_file, model=str(tmp_path / "nope" / "config.json")).start()
    assert testing.recorded_pids(pid_file) == {}


def test_an_interrupt_during_start_leaves_no_server_and_no_lease(tmp_path, pid_file, monkeypatch):
    def interrupted(url):
        raise KeyboardInterrupt  # what pytest_main makes of Bazel's timeout SIGTERM

    monkeypatch.setattr(server_lib, "_healthy", interrupted)
    server = _server(tmp_path, pid_file, lease=True)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert server.lease is None and server.pids() == []
    assert testing.survivors_after(testing.recorded_pids(pid_file)) == []


def test_bind_conflicts_are_recognised_on_every_port_the_server_binds():
    from tools.launcher import ports

    assert ports.is_bind_conflict("OSError: [Errno 98] Address already in use")
    assert ports.is_bind_conflict(
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network"
        " address. port: 33229, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    assert not ports.is_bind_conflict("RuntimeError: CUDA out of memory")


def test_torch_threads_reach_the_servers_process_through_the_cpu_use_plugin(tmp_path, pid_file):
    """The plugin's folder is on the server's PYTHONPATH whenever a CPU-use setting is set, shared lease
    or not: without it vLLM never finds the plugin and the setting does nothing, silently."""
    fake_torch = tmp_path / "fake_torch"
    fake_torch.mkdir()
    (fake_torch / "torch.py").write_text(
        "def set_num_threads(n):\n    global N\n    N = n\ndef get_num_threads():\n    return N\n"
    )
    server = _server(
        tmp_path,
        pid_file,
        extra_env={"STUB_SERVER_PLUGINS": "sleepwake_cpu_use", "PYTHONPATH": str(fake_torch)},
        torch_threads=2,
    )
    with server:
        pass
    log_text = open(server.log_path).read()
    assert "plugin sleepwake_cpu_use loaded" in log_text, log_text[-2000:]
    assert 'sleepwake-cpu-use {"torch_threads": 2' in log_text, log_text[-2000:]


def test_memory_phases_are_kept_by_what_took_them():
    from tools.launcher.timings import ServerTimings

    t = ServerTimings()
    t.add_memory_phase(0.5, "sleep", 0.125)
    t.add_memory_phase(0.25, "sleep", 0.25)
    t.add_memory_phase(1.0, "start:load_model")  # held not known
    assert t.memory_phase_wait_s == 1.75 and t.memory_phases == 3
    assert t.as_record()["memory_phase_by"] == {
        "sleep": {"n": 2, "waited_s": 0.75, "held_s": 0.375},
        "start:load_model": {"n": 1, "waited_s": 1.0, "held_s": -1.0},
    }


def _claims_inside(server, kind, what):
    """The declared bytes of the claims this process holds on the server's GPU inside its phase."""
    with server.memory_phase(kind, what):
        fd = os.open(gpu_lease.memory_lock_path(server.lease), os.O_RDWR)
        try:
            with memory_claims.mutex(fd):
                return [c.declared for c in memory_claims.live(fd) if c.pid == os.getpid()]
        finally:
            os.close(fd)


@pytest.mark.parametrize("rule", [memory_claims.BYTES, memory_claims.KINDS])
def test_an_allocation_beside_the_servers_own_calls_declares_what_its_budget_says(tmp_path, pid_file, rule):
    """Under the rule bytes a client's push or a trainer's checkpoint declares its size (memory_budget), so a
    neighbour's sleep may overlap it; what the budget does not know, and every phase under kinds, declares
    nothing, which keeps the old exclusion."""
    server = _server(
        tmp_path,
        pid_file,
        lease=True,
        slots_per_gpu=2,
        memory_phase_rule=rule,
        memory_phase_margin=0.75,
        sleep_frees_bytes=2 * GIB,
        step_overhead_bytes=GIB,
        load_overhead_bytes=64 << 20,
        # the worker's NVML figure from its first step on: the CUDA context's step maps 2 GiB, over its 1 GiB
        extra_env={"STUB_SERVER_WORKER_BYTES": str(2 * GIB)},
    )
    header = json.dumps({"w": {"dtype": "BF16", "shape": [8], "data_offsets": [0, 16]}}).encode()
    with open(os.path.join(server.config.model, "model.safetensors"), "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + bytes(16))
    with server:
        declared = {
            what: _claims_inside(server, gpu_lease.ALLOCATE, what)
            for what in ("trainer", "trainer:context", "rpc load_checkpoint_tensors", "rpc load_ipc_tensors")
        }
        over = {step: e["over"] for step, e in server.timings.step_bytes_by.items() if e["over"]}
    # A step held to what it declared beside its pools, where it declared (the rule bytes).
    assert over == ({"init_device": 1} if rule == memory_claims.BYTES else {})
    if rule == memory_claims.BYTES:
        assert declared == {
            "trainer": [16 + (64 << 20)],
            "trainer:context": [GIB],
            "rpc load_checkpoint_tensors": [16 + (64 << 20)],
            "rpc load_ipc_tensors": [None],
        }
    else:
        assert set(map(tuple, declared.values())) == {(None,)}
