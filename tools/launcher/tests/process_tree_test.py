"""process_tree.thread_cpu names its groups the way a run's CPU-by-thread line needs: vLLM's engine core
by the title it gives itself, each process's first thread as main, a thread by its kernel name."""

import subprocess
import time

from tools.launcher import process_tree


def _wait_for_exec(proc, argv0: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/cmdline") as f:
            if f.read().startswith(argv0):
                return
        time.sleep(0.01)
    raise AssertionError(f"{proc.pid} never ran as {argv0}")


def test_a_process_titled_by_vllm_is_named_by_its_title_and_its_first_thread_main():
    # `exec -a` sets argv[0], as setproctitle("VLLM::EngineCore") does in vLLM's engine core.
    proc = subprocess.Popen(["bash", "-c", 'exec -a "VLLM::EngineCore extra" sleep 30'])
    try:
        _wait_for_exec(proc, "VLLM::EngineCore")
        groups = process_tree.thread_cpu({proc.pid: process_tree.start_time(proc.pid)})
        assert set(groups) == {"VLLM::EngineCore/main"}, groups
        assert groups["VLLM::EngineCore/main"]["threads"] == 1
    finally:
        proc.kill()
        proc.wait()


def test_an_untitled_process_is_named_by_the_kernel_and_a_gone_one_counts_nothing():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        _wait_for_exec(proc, "sleep")
        snap = {proc.pid: process_tree.start_time(proc.pid)}
        assert set(process_tree.thread_cpu(snap)) == {"sleep/main"}
    finally:
        proc.kill()
        proc.wait()
    assert process_tree.thread_cpu(snap) == {}
