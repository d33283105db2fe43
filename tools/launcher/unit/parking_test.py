"""Parked servers (parking.py) with the stub server forked by a zygote: a server given back outlives the
test process that parked it, the next start of its configuration takes it over with its slot, another
configuration's start evicts it only once it waited, and nothing outlives park_s."""

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from tools.launcher import gpu_lease, parking, process_tree, zygote_client
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.server import VllmServer
from tools.launcher.unit import testing

# Parks a server started from argv[1] (a ServerConfig as JSON) with the suite's note argv[2], prints
# {"parked", "pids", "supervisor"} and exits: the test process that gave the server back is gone.
_PARK_AND_EXIT = """
import json, os, sys
from tools.launcher.config import ServerConfig
from tools.launcher.fake_nvml import FakeNvml
from tools.launcher.server import VllmServer
from tools.launcher.unit import testing
server = VllmServer(ServerConfig(**json.loads(sys.argv[1])), lease=True, nvml=FakeNvml(),
                    command_factory=testing.stub_command(pid_file=sys.argv[3], as_module=True),
                    environ={k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"})
server.start()
pids, supervisor = server.pids(), server._sup.pid
print(json.dumps({"parked": server.park(json.loads(sys.argv[2])), "pids": pids, "supervisor": supervisor}), flush=True)
"""


@pytest.fixture
def environ(tmp_path):
    env = testing.module_environ(testing.fake_site(tmp_path), test_tmpdir=str(tmp_path))
    with zygote_client.private_host(str(tmp_path / "locks")):
        yield env


def _config(tmp_path, **overrides):
    overrides.setdefault("start_mode", "zygote")
    overrides.setdefault("slots_per_gpu", 2)
    return testing.fast_config(tmp_path, **overrides)


def _park_in_another_process(tmp_path, environ, pid_file, suite, **overrides) -> dict:
    cfg = json.dumps(dataclasses.asdict(_config(tmp_path, **overrides)))
    done = subprocess.run(
        [sys.executable, "-c", _PARK_AND_EXIT, cfg, json.dumps(suite), pid_file],
        env=environ,  # testing.module_environ: the launcher importable, as in this process
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    parked = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert parked["parked"], "the server was not parked: %s" % done.stderr.decode()[-2000:]
    return parked


def _server(tmp_path, environ, pid_file, claim=True, **overrides) -> VllmServer:
    return VllmServer(
        dataclasses.replace(_config(tmp_path, **overrides), claim=claim),
        lease=True,
        nvml=FakeNvml(),
        command_factory=testing.stub_command(pid_file=pid_file, as_module=True),
        environ=environ,
    )


def _healthy(url: str) -> bool:
    with urllib.request.urlopen(url + "/health", timeout=5) as r:
        return r.status == 200


def _free_slots(tmp_path, slots: int = 2) -> int:
    leases = [
        gpu_lease.try_acquire(["0"], str(tmp_path / "locks"), slots, "the test", time.monotonic()) for _ in range(slots)
    ]
    for lease in leases:
        if lease is not None:
            lease.release()
    return sum(lease is not None for lease in leases)


def _gone(pids, timeout_s=15.0) -> list:
    return sorted(process_tree.wait_gone({p: process_tree.start_time(p) for p in pids}, timeout_s))


def test_a_server_given_back_outlives_its_test_process_and_the_next_one_takes_it_over(tmp_path, environ, pid_file):
    parked = _park_in_another_process(tmp_path, environ, pid_file, {"fresh": {"device_bytes": 7}})
    assert os.path.exists(parked["parked"]) and all(process_tree.alive(p) for p in parked["pids"])
    holders = gpu_lease.holders(str(tmp_path / "locks"), ["0"], 2)
    assert any("parked server: supervisor pid=%d" % parked["supervisor"] in h for h in holders), holders

    server = _server(tmp_path, environ, pid_file, log_dir=str(tmp_path / "claimant-logs"))
    server.start()
    try:
        assert server.borrowed == {"fresh": {"device_bytes": 7}}, "the suite's note did not travel with it"
        assert server.pids() == parked["pids"] and _healthy(server.url)
        assert server.timings.start_s == 0.0, "a claim is no start"
        assert not os.path.exists(parked["parked"]), "a claimed server still offered itself"
        holders = gpu_lease.holders(str(tmp_path / "locks"), ["0"], 2)
        assert any(" pid=%d " % os.getpid() in h for h in holders), holders
        with open(server.log_path, "a") as log:
            log.write("a line of this tenancy\n")  # as the server writes while this process has it
        again = _server(tmp_path, environ, pid_file)
        again.start()  # nothing parked now: a start of its own, on the second slot
        try:
            assert again.borrowed is None and again.pids() != server.pids()
        finally:
            again.stop()
    finally:
        server.stop()
    share = (tmp_path / "claimant-logs" / os.path.basename(server.log_path)).read_text()
    assert share.startswith("# sleepwake launcher: this test process's share of " + server.log_path)
    assert "a line of this tenancy" in share and "parked at" not in share, share
    assert _gone(parked["pids"] + [parked["supervisor"]]) == []
    assert _free_slots(tmp_path) == 2, "the slot outlived the server"


def test_a_claim_asks_for_its_own_configuration_only(tmp_path, environ, pid_file):
    parked = _park_in_another_process(tmp_path, environ, pid_file, {})
    other = _server(tmp_path, environ, pid_file, max_model_len=512)
    mutant = _server(tmp_path, dict(environ, SLEEPWAKE_MUTANT="alpha"), pid_file)
    for server in (other, mutant):
        server.start()
        try:
            assert server.borrowed is None and parked["pids"][0] not in server.pids()
        finally:
            server.stop()
    assert os.path.exists(parked["parked"]), "a start of another configuration took the parked server"
    assert parking.evict_all(str(tmp_path / "locks"), "the test") == 1
    assert _gone(parked["pids"]) == []


def test_a_start_that_finds_no_slot_evicts_another_configurations_parked_server(tmp_path, environ, pid_file):
    parked = _park_in_another_process(tmp_path, environ, pid_file, {}, slots_per_gpu=1)
    begin = time.monotonic()
    other = _server(tmp_path, environ, pid_file, slots_per_gpu=1, max_model_len=512)
    other.start()
    try:
        waited = time.monotonic() - begin
        assert other.borrowed is None and _gone(parked["pids"], 0) == []
        # Not before it waited parked for EVICT_AFTER_S: a claimant of its own key gets it first.
        assert waited >= parking.EVICT_AFTER_S - 0.5, waited
    finally:
        other.stop()


def test_a_parked_server_nobody_claims_stops_after_park_s_and_frees_its_slot(tmp_path, environ, pid_file):
    parked = _park_in_another_process(tmp_path, environ, pid_file, {}, park_s=1.0)
    assert _gone(parked["pids"] + [parked["supervisor"]]) == []  # the supervisor holds the slot to its end
    assert _free_slots(tmp_path) == 2, "the slot outlived the server"
    assert not os.path.exists(parked["parked"])


def _key_in(tmp_path, test: str, **change) -> str:
    """The key of a server of the test `test`, whose runfiles link the checkpoint's file."""
    runfiles = tmp_path / test / "runfiles"
    env = {
        "TEST_SRCDIR": str(runfiles),
        "TEST_TMPDIR": str(tmp_path / test / "tmp"),
        "TEST_TARGET": "//x:" + test,
        "PYTHONPATH": os.pathsep.join([str(runfiles), str(tmp_path / test / "tmp" / "site"), "/usr/lib/site"]),
        "VLLM_USE_V2_MODEL_RUNNER": "0",
    }
    env.update(change.pop("env", {}))
    cfg = testing.fast_config(tmp_path, model=str(runfiles / "ckpt"), log_dir=str(tmp_path / test / "logs"), **change)
    return parking.lending_key(cfg, cfg.model, env, "zygote-key")


def test_the_key_names_what_a_server_is_not_where_a_test_keeps_it(tmp_path):
    checkpoint = tmp_path / "build" / "config.json"
    checkpoint.parent.mkdir()
    checkpoint.write_text("{}")
    for test in ("cell_a", "cell_b"):
        (tmp_path / test / "runfiles" / "ckpt").mkdir(parents=True)
        os.symlink(checkpoint, tmp_path / test / "runfiles" / "ckpt" / "config.json")
    a, b = _key_in(tmp_path, "cell_a"), _key_in(tmp_path, "cell_b")
    assert a == b, "two tests' runfiles and logs made two keys"
    assert _key_in(tmp_path, "cell_b", env={"SLEEPWAKE_MUTANT": "alpha"}) != a, "a mutant shared the key"
    assert _key_in(tmp_path, "cell_b", max_model_len=512) != a, "another config shared the key"
    other = tmp_path / "build" / "other.json"
    other.write_text("{}")
    os.remove(tmp_path / "cell_b" / "runfiles" / "ckpt" / "config.json")
    os.symlink(other, tmp_path / "cell_b" / "runfiles" / "ckpt" / "config.json")
    assert _key_in(tmp_path, "cell_b") != a, "another checkpoint shared the key"


def test_a_taker_logging_where_the_giver_did_still_counts_its_serving(tmp_path, environ, pid_file):
    # Its share of the log would be the log itself, so none is written; the CPU it served with still counts.
    parked = _park_in_another_process(tmp_path, environ, pid_file, {})
    server = _server(tmp_path, environ, pid_file)  # the same log dir as the giver's
    server.start()
    try:
        assert server.borrowed == {} and os.path.dirname(server.log_path) == server.config.log_dir
    finally:
        server.stop()
    assert server.timings.cpu_by_thread, "the stop of a taken-over server counted no CPU"
    assert "this test process's share" not in open(server.log_path).read()
    assert _gone(parked["pids"] + [parked["supervisor"]]) == []


def test_a_parked_servers_stop_holds_the_release_phase_until_nvml_lists_none_of_its_tree(tmp_path):
    """The driver frees a dead process's device memory after the process is gone: a neighbour's EXCLUSIVE
    window must not open before NVML stops listing the tree (supervisor.stop_tree)."""
    from tools.launcher import supervisor

    lock = str(tmp_path / "gpu0.memory.lock")
    probe = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    release_held = []  # at each NVML reading: whether a neighbour sees the RELEASE phase held

    class LaggingNvml(FakeNvml):
        def processes(self):
            release_held.append(gpu_lease._held_by_others(probe, gpu_lease._INSIDE[gpu_lease.RELEASE]))
            if len(release_held) == 3:
                self.procs = {}  # the driver has freed the tree's memory
            return super().processes()

    parked = {"memory_lock": lock, "lease_timeout_s": 5.0, "release_timeout_s": 5.0}
    ended = {41: None, 42: None}  # as process_tree.terminate_tree answers: the PIDs it ended
    killed = supervisor.stop_tree(parked, lambda: ended, nvml_factory=lambda: LaggingNvml(procs={42: 3 << 30}))
    assert killed == ended
    assert release_held == [True, True, True], "NVML was read outside the release phase (or not at all)"
    assert not gpu_lease._held_by_others(probe, gpu_lease._INSIDE[gpu_lease.RELEASE]), "the phase outlived the stop"
    os.close(probe)
