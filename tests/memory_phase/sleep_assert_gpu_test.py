"""vLLM's own sleep check on a shared GPU, broken on purpose and kept by the memory-phase rule bytes.

vLLM 0.26.0's Worker.sleep (vllm/v1/worker/gpu_worker.py, line 220) asserts that device-wide free memory
did not shrink across the sleep ("Memory usage increased after sleeping."). A neighbour process
(neighbour.py) allocates while the server's sleep holds the GPU's FREE phase, once the sleep has begun
freeing (after vLLM read its baseline):
  * ignoring the phases, more bytes than the server holds awake (so more than any sleep of it frees):
    the sleep fails vLLM's check: /sleep answers 5xx, and the server's worker marks the call with vLLM's
    message (phase_plugin VLLM_ASSERT_KEY), which the launcher counts (timings.sleep_asserts);
  * under the rule, declaring that size: it is refused while the sleep runs and lands after it;
  * under the rule, declaring a quarter of the sleep's allowance: it is admitted inside the sleep's window,
    and the sleep still passes vLLM's check.
The sizes: the server's own bytes as NVML reads them before the sleep, and the allowance from the suite's
data (tests/core/memory_budget.py). GPU only (tags gpu, manual), run alone on its GPU:
    bazel test --config=gpu //tests/memory_phase:sleep_assert_gpu_test
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile

import pytest

from tests.core import cells, memory_budget
from tests.core.client import SleepWakeClient
from tools.launcher import gpu_lease, memory_claims
from tools.launcher.phase_plugin import sleepwake_memory_phase as phase_plugin
from tools.launcher.server import VllmServer, read_log


@pytest.fixture(scope="module")
def server():
    cell = memory_budget.budgeted(cells.cell_from_env())
    # Two slots on the GPU: the lease is shared, so the server's worker brackets its calls itself, in a
    # lock dir of this test's own, away from any other run's servers.
    config = dataclasses.replace(
        cell.server_config(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp()),
        slots_per_gpu=2,
        lock_dir=tempfile.mkdtemp(prefix="sleepwake-memphase-"),
        memory_phase_rule=memory_claims.BYTES,
        memory_phase_scope="steps",
    )
    with VllmServer(config, lease=True) as s:
        assert s.brackets_calls, "the server's worker does not bracket its calls: no shared lease"
        yield s


def _neighbour(server, size: int, rule: str) -> subprocess.Popen:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=server.lease.gpu, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    args = ["--lock", gpu_lease.memory_lock_path(server.lease), "--bytes", str(size), "--rule", rule]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.memory_phase.neighbour", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise RuntimeError("the neighbour did not get its CUDA context: %r (exit %s)" % (line, proc.wait()))
    return proc


def _sleep_beside(server, size: int, rule: str) -> tuple:
    """A level-1 sleep of the server with the neighbour allocating size bytes meanwhile: (the /sleep
    answer, the neighbour's report, the server's calls logged since)."""
    client = SleepWakeClient(server.url, timeout_s=120, phases_in_server=True)
    offset = len(read_log(server.log_path))
    neighbour = _neighbour(server, size, rule)
    try:
        answer = client.sleep(1, check=False)
        assert neighbour.stdout is not None
        report = json.loads(neighbour.stdout.readline())
    finally:
        neighbour.communicate("", timeout=60)  # frees its block
    if "error" in report:
        raise RuntimeError("the neighbour saw no sleep: %s" % report["error"])
    return answer, report, phase_plugin.read_calls(read_log(server.log_path)[offset:])


def _wake(server):
    SleepWakeClient(server.url, timeout_s=120, phases_in_server=True).wake_up()


def test_an_allocation_below_the_allowance_lands_inside_the_sleep_and_vllms_check_holds(server):
    small = server.config.sleep_frees_bytes * server.config.memory_phase_margin // 4
    answer, report, calls = _sleep_beside(server, int(small), memory_claims.BYTES)
    # The rule let it in at its first attempt, inside the sleep's window, and it landed there.
    assert not report["refused"] and report["began_inside"] and report["landed_inside"], report
    assert answer.status_code == 200, answer.text
    assert [c.get(phase_plugin.VLLM_ASSERT_KEY) for c in calls if c["call"] == "sleep"] == [None]
    _wake(server)


def _larger_than_the_sleep(server) -> int:
    """Twice the server's device bytes: more than any sleep of it can free, by a margin that what NVML's
    per-process figure leaves out (the CUDA context, pools it does not see) cannot make up."""
    return 2 * server.gpu_bytes()


def test_an_allocation_larger_than_the_sleep_waits_for_it_under_the_rule(server):
    answer, report, calls = _sleep_beside(server, _larger_than_the_sleep(server), memory_claims.BYTES)
    # Refused inside the sleep's window, let in once the sleep had left.
    assert report["refused"] and not report["began_inside"], report
    assert answer.status_code == 200, answer.text
    assert [c.get(phase_plugin.VLLM_ASSERT_KEY) for c in calls if c["call"] == "sleep"] == [None]
    _wake(server)


def test_the_same_allocation_ignoring_the_phases_trips_vllms_assert(server):
    """Last: the failed sleep leaves the engine inconsistent (the reason the phases exist)."""
    answer, report, calls = _sleep_beside(server, _larger_than_the_sleep(server), "none")
    assert report["began_inside"] and report["landed_inside"], report
    assert answer.status_code >= 500, (answer.status_code, answer.text)
    sleeps = [c for c in calls if c["call"] == "sleep"]
    assert [c.get(phase_plugin.VLLM_ASSERT_KEY) for c in sleeps] == [phase_plugin.VLLM_SLEEP_ASSERT], calls
    assert "AssertionError: " + phase_plugin.VLLM_SLEEP_ASSERT in read_log(server.log_path)
    server.stop()
    assert server.timings.sleep_asserts == 1
