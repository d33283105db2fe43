"""The memory-phase plugin on the CPU: it wraps the worker's start-up steps when their module is
imported, each step runs inside the ALLOCATE phase (a neighbour's sleep cannot land in it), and each
logs the MARK record the launcher checks."""

import json
import os
import subprocess
import sys
import textwrap

from tools.launcher import gpu_lease
from tools.launcher.phase_plugin import sleepwake_memory_phase as plugin
from tools.launcher.tests import testing

# A stand-in for vllm/v1/worker/gpu_worker.py: a Worker whose steps ask, from inside, whether a
# neighbour's sleep (FREE, on its own open file) could get in.
_WORKER_MODULE = textwrap.dedent('''
    import sys
    from tools.launcher import gpu_lease

    def _neighbour_sleep_gets_in(self):
        try:
            with gpu_lease.memory_phase_at(self.lock_path, gpu_lease.FREE, timeout_s=0.05):
                return True
        except gpu_lease.LeaseTimeoutError:
            return False

    class Worker:
        def __init__(self, lock_path):
            self.lock_path = lock_path
    for _step in %r:
        setattr(Worker, _step, _neighbour_sleep_gets_in)
''' % (plugin.STEPS,))

_DRIVER = textwrap.dedent('''
    import json, os, sys
    import sleepwake_memory_phase as plugin
    plugin.register()
    plugin.register()  # vLLM loads its plugins in several places: once must be once
    assert "fake_gpu_worker" not in sys.modules  # nothing imported until the server imports the worker
    hook = [f for f in sys.meta_path if isinstance(f, plugin._PatchOnImport)]
    assert len(hook) == 1
    hook[0].module = "fake_gpu_worker"
    import fake_gpu_worker
    worker = fake_gpu_worker.Worker(os.environ[plugin.ENV_LOCK])
    print(json.dumps({step: getattr(worker, step)() for step in plugin.STEPS}))
''')


def test_each_start_step_runs_inside_the_allocate_phase(tmp_path):
    (tmp_path / "fake_gpu_worker.py").write_text(_WORKER_MODULE)
    lock = str(tmp_path / "gpu0.memory.lock")
    root = testing.ROOT
    env = dict(os.environ, **{plugin.ENV_LOCK: lock, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(plugin.__file__), str(tmp_path), root])})
    run = subprocess.run([sys.executable, "-c", _DRIVER], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    # The steps returned whether a sleep got in while they ran: never; and each logged its record.
    assert json.loads(run.stdout.splitlines()[-1]) == {step: False for step in plugin.STEPS}
    records = plugin.read_steps(run.stderr)
    assert [r["step"] for r in records] == list(plugin.STEPS)
    assert all(r["pid"] == records[0]["pid"] and r["waited_s"] >= 0 for r in records)
    # And between steps, and after, the phase is free.
    with gpu_lease.memory_phase_at(lock, gpu_lease.FREE, timeout_s=1) as waited:
        assert waited < 1


def test_without_a_shared_lease_the_plugin_does_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != plugin.ENV_LOCK}
    env["PYTHONPATH"] = os.path.dirname(plugin.__file__)
    code = ("import sys, sleepwake_memory_phase as p; p.register(); "
            "print(any(isinstance(f, p._PatchOnImport) for f in sys.meta_path))")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "False", run.stderr


def test_records_are_read_behind_the_prefix_vllm_puts_on_its_engine_cores_lines():
    # What the H200 logs show: vLLM prefixes every line its engine-core process writes.
    log = ("INFO 12-01 11:41:11 [core.py:100] Initializing a V1 LLM engine\n"
           '(EngineCore pid=11413) sleepwake-memory-phase {"step": "init_device", "waited_s": 1.69, '
           '"held_s": 0.97, "pid": 11413, "process_bytes": 715128832}\n'
           "sleepwake-memory-phase nvml unavailable: no driver\n"
           'sleepwake-memory-phase {"step": "load_model", "waited_s": 0, "held_s": 1.7, "pid": 1, "process_bytes": 2}\n')
    assert [r["step"] for r in plugin.read_steps(log)] == ["init_device", "load_model"]
    assert plugin.read_steps(log)[0]["process_bytes"] == 715128832
