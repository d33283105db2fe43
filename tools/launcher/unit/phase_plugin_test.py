"""The memory-phase plugin on the CPU: it wraps the worker's start-up steps and its calls when their
module is imported, each step and each wake or reload runs inside the ALLOCATE phase (a neighbour's sleep
cannot land in it), each sleep inside FREE (a neighbour's allocation cannot land in it), a call the
server's client covers takes no lock, and each logs the MARK record the launcher reads."""

import json
import os
import subprocess
import sys
import textwrap

from tools.launcher import gpu_lease
from tools.launcher.phase_plugin import sleepwake_memory_phase as plugin
from tools.launcher.unit import testing

# A stand-in for vllm/v1/worker/gpu_worker.py: a Worker whose steps ask, from inside, whether a
# neighbour's sleep (FREE, on its own open file) could get in.
_WORKER_MODULE = textwrap.dedent(
    """
    import sys
    from tools.launcher import gpu_lease

    def _gets_in(self, kind):
        try:
            with gpu_lease.memory_phase_at(self.lock_path, kind, timeout_s=0.05):
                return True
        except gpu_lease.LeaseTimeoutError:
            return False

    def _neighbour_sleep_gets_in(self, *args, **kwargs):
        return _gets_in(self, gpu_lease.FREE)

    def _neighbour_allocation_gets_in(self, *args, **kwargs):
        return _gets_in(self, gpu_lease.ALLOCATE)

    class Worker:
        def __init__(self, lock_path):
            self.lock_path = lock_path
    for _step in %r:
        setattr(Worker, _step, _neighbour_sleep_gets_in)
    Worker.sleep = _neighbour_allocation_gets_in
    Worker.wake_up = Worker.reload_weights = _neighbour_sleep_gets_in
"""
    % (plugin.STEPS,)
)

_DRIVER = textwrap.dedent("""
    import json, os, sys
    import sleepwake_memory_phase as plugin
    from sleepwake_on_import import PatchOnImport
    plugin.register()
    plugin.register()  # vLLM loads its plugins in several places: once must be once
    assert "fake_gpu_worker" not in sys.modules  # nothing imported until the server imports the worker
    hook = [f for f in sys.meta_path if isinstance(f, PatchOnImport)]
    assert len(hook) == 1
    hook[0].module = "fake_gpu_worker"
    import fake_gpu_worker
    worker = fake_gpu_worker.Worker(os.environ[plugin.ENV_LOCK])
    print(json.dumps({step: getattr(worker, step)() for step in plugin.STEPS}))
""")


def test_each_start_step_runs_inside_the_allocate_phase(tmp_path):
    (tmp_path / "fake_gpu_worker.py").write_text(_WORKER_MODULE)
    lock = str(tmp_path / "gpu0.memory.lock")
    root = testing.ROOT
    env = dict(
        os.environ,
        **{
            plugin.ENV_LOCK: lock,
            "PYTHONPATH": os.pathsep.join([os.path.dirname(plugin.__file__), str(tmp_path), root]),
        },
    )
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
    code = (
        "import sys, sleepwake_memory_phase as p; from sleepwake_on_import import PatchOnImport; p.register(); "
        "print(any(isinstance(f, PatchOnImport) for f in sys.meta_path))"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "False", run.stderr


def test_records_are_read_behind_the_prefix_vllm_puts_on_its_engine_cores_lines():
    # What the H200 logs show: vLLM prefixes every line its engine-core process writes.
    log = (
        "INFO 12-01 11:41:11 [core.py:100] Initializing a V1 LLM engine\n"
        '(EngineCore pid=11413) sleepwake-memory-phase {"step": "init_device", "waited_s": 1.69, '
        '"held_s": 0.97, "pid": 11413, "process_bytes": 715128832}\n'
        "sleepwake-memory-phase nvml unavailable: no driver\n"
        'sleepwake-memory-phase {"step": "load_model", "waited_s": 0, "held_s": 1.7, "pid": 1,'
        ' "process_bytes": 2}\n'
    )
    assert [r["step"] for r in plugin.read_steps(log)] == ["init_device", "load_model"]
    assert plugin.read_steps(log)[0]["process_bytes"] == 715128832


# Each call as a running server makes it, after a plugin loaded later (a mutant) wrapped wake_up over ours
# with an allocation of its own (here: whether a neighbour's sleep could get in while it allocates).
_CALLS_DRIVER = textwrap.dedent("""
    import functools, json, os, sys
    import sleepwake_memory_phase as plugin
    from sleepwake_on_import import PatchOnImport
    plugin.register()
    [hook] = [f for f in sys.meta_path if isinstance(f, PatchOnImport)]
    hook.module = "fake_gpu_worker"
    import fake_gpu_worker
    Worker = fake_gpu_worker.Worker
    inner_wake = Worker.wake_up
    seen = {}
    @functools.wraps(inner_wake)
    def mutant_wake(self, *args, **kwargs):
        seen["mutant_allocation_sleep_gets_in"] = fake_gpu_worker._neighbour_sleep_gets_in(self)
        return inner_wake(self, *args, **kwargs)
    Worker.wake_up = mutant_wake
    worker = Worker(os.environ[plugin.ENV_LOCK])
    worker.init_device()  # the start step wraps the calls again: ours outermost
    seen.update({name: getattr(worker, name)() for name in ("sleep", "wake_up", "reload_weights")})
    print(json.dumps(seen))
""")


def _driver(tmp_path, code, lock, cover=None):
    """Runs code beside the stand-in worker module with the plugin's environment (the cover file if any)."""
    (tmp_path / "fake_gpu_worker.py").write_text(_WORKER_MODULE)
    env = dict(
        os.environ,
        **{
            plugin.ENV_LOCK: lock,
            "PYTHONPATH": os.pathsep.join([os.path.dirname(plugin.__file__), str(tmp_path), testing.ROOT]),
        },
    )
    env.pop(plugin.ENV_COVER, None)
    if cover:
        env[plugin.ENV_COVER] = cover
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def _run_calls(tmp_path, cover=None):
    return _driver(tmp_path, _CALLS_DRIVER, str(tmp_path / "gpu0.memory.lock"), cover)


def test_a_running_servers_calls_run_inside_their_phases_even_under_a_later_plugin(tmp_path):
    run = _run_calls(tmp_path, cover=str(tmp_path / "cover.lock"))
    assert run.returncode == 0, run.stderr
    # Nothing of the other kind got in: not into the sleep, the wake (the mutant's allocation included),
    # the reload; and the wrapper under the mutant's did not take the phase a second time.
    assert json.loads(run.stdout.splitlines()[-1]) == {
        "mutant_allocation_sleep_gets_in": False,
        "sleep": False,
        "wake_up": False,
        "reload_weights": False,
    }
    calls = plugin.read_calls(run.stderr)
    assert [(c["call"], c["covered"]) for c in calls] == [("sleep", False), ("wake", False), ("reload", False)]
    assert [r["step"] for r in plugin.read_steps(run.stderr)] == ["init_device"]


def _bare_calls(tmp_path, lock, cover, timeout_s):
    """Runs sleep, wake_up and reload_weights of the stand-in worker bracketed by bracket_calls alone (no
    start step, which would wait for a window like any allocation)."""
    return _driver(
        tmp_path,
        "import json, os, sleepwake_memory_phase as p, fake_gpu_worker as m\n"
        "p.bracket_calls(m.Worker, os.environ[p.ENV_LOCK], %s, os.environ.get(p.ENV_COVER))\n"
        "w = m.Worker(os.environ[p.ENV_LOCK])\n"
        "print(json.dumps([w.sleep(), w.wake_up(), w.reload_weights()]))" % timeout_s,
        lock,
        cover,
    )


def test_a_call_the_client_covers_takes_no_lock(tmp_path):
    # The client holds an exclusive window over the calls (the immediacy oracle's): the worker's own lock
    # would wait for the window, which waits for the call.
    lock, cover = str(tmp_path / "gpu0.memory.lock"), str(tmp_path / "cover.lock")
    with (
        gpu_lease.memory_phase_at(lock, gpu_lease.EXCLUSIVE, timeout_s=1),
        gpu_lease.covering(cover, gpu_lease.EXCLUSIVE),
    ):
        run = _bare_calls(tmp_path, lock, cover, 3.0)
        uncovered = _bare_calls(tmp_path, lock, None, 1.0)
    assert run.returncode == 0, run.stderr
    assert [c["covered"] for c in plugin.read_calls(run.stderr)] == [True, True, True]
    # Uncovered, the sleep waits for the window and gives up.
    assert uncovered.returncode != 0 and "no free phase within 1 s" in uncovered.stderr, uncovered.stderr


class _FakeCuda:
    """torch.cuda as the plugin reads it: the caching allocator's reserved bytes."""

    def __init__(self):
        self.reserved = 1 << 30

    def is_initialized(self):
        return True

    def memory_reserved(self):
        return self.reserved


def test_each_call_records_how_much_more_torchs_allocator_holds_after_it(tmp_path, monkeypatch, capsys):
    cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", type("FakeTorch", (), {"cuda": cuda}))

    class Worker:
        def sleep(self, level=1):
            pass  # a sleep unmaps CuMemAllocator's pools, not the caching allocator's segments

        def wake_up(self, tags=None):
            pass

        def reload_weights(self):
            cuda.reserved += 64 << 20  # the loader's staging tensors stay in torch's cache

    plugin.bracket_calls(Worker, str(tmp_path / "gpu0.memory.lock"), 1.0)
    w = Worker()
    w.sleep()
    w.wake_up()
    w.reload_weights()
    calls = plugin.read_calls(capsys.readouterr().err)
    assert [(c["call"], c["reserved_delta"]) for c in calls] == [("sleep", 0), ("wake", 0), ("reload", 64 << 20)]
    monkeypatch.delitem(sys.modules, "torch")  # the API server's process: no torch, no figure
    w.reload_weights()
    assert plugin.read_calls(capsys.readouterr().err)[0]["reserved_delta"] is None


def test_reserved_growth_is_kept_by_what_the_call_was():
    from tools.launcher.timings import ServerTimings

    t = ServerTimings()
    for what, delta in (("reload", 0), ("reload", 2048), ("reload", 0), ("sleep", 0), ("sleep", -4096)):
        t.add_reserved_delta(what, delta)
    t.add_reserved_delta("reload", 1024, declared=1024)  # as much as it declared: not over
    t.add_reserved_delta("reload", 1025, declared=1024)
    assert t.as_record()["reserved_growth_by"] == {
        "reload": {"n": 5, "grew": 3, "max": 2048, "over": 1},
        "sleep": {"n": 2, "grew": 0, "max": 0, "over": 0},
    }
