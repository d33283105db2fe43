"""process_tree: its snapshots find a whole tree from the kernel's children files as psutil would; thread_cpu
names its groups the way a run's CPU-by-thread line needs: vLLM's engine core
by the title it gives itself, each process's first thread as main, a thread by its kernel name."""

import os
import signal
import subprocess
import sys
import time

import psutil

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


def _kill(snap) -> None:
    for pid in snap:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _names(snap) -> list:
    names = []
    for pid in snap:
        try:
            names.append(psutil.Process(pid).name())
        except psutil.NoSuchProcess:
            pass
    return sorted(names)


def test_a_snapshot_finds_the_whole_tree_from_the_proc_children_files_as_psutil_does(monkeypatch):
    # A child, started by a second thread of the root, and its two children.
    # The thread stays alive: the kernel lists the child under that thread's children file, not the main
    # thread's (a thread that exits hands its children to another of the process).
    script = (
        "import subprocess, threading, time\n"
        "def spawn():\n"
        "    subprocess.Popen(['bash', '-c', 'sleep 30 & sleep 30; wait'])\n"
        "    time.sleep(30)\n"
        "threading.Thread(target=spawn, daemon=True).start(); time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-S", "-E", "-c", script])
    try:
        deadline = time.monotonic() + 10
        while _names(process_tree.snapshot(proc.pid)).count("sleep") < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert process_tree.PROC_CHILDREN, "this kernel has no /proc/<pid>/task/<tid>/children"
        fast = process_tree.snapshot(proc.pid)
        assert len(fast) == 4 and _names(fast).count("sleep") == 2, _names(fast)
        monkeypatch.setattr(process_tree, "PROC_CHILDREN", False)
        assert process_tree.descendant_pids(proc.pid) is None
        assert process_tree.snapshot(proc.pid) == fast
        monkeypatch.setattr(process_tree, "PROC_CHILDREN", True)
        descendants = process_tree.descendant_pids(proc.pid)
        assert descendants is not None and sorted(descendants) == sorted(set(fast) - {proc.pid})
        assert process_tree.snapshot(proc.pid, include_root=False) == {p: t for p, t in fast.items() if p != proc.pid}
    finally:
        _kill(process_tree.snapshot(proc.pid))
        proc.wait()
    assert process_tree.snapshot(proc.pid) == {}


def test_direct_children_come_from_the_children_files_as_from_psutil(monkeypatch):
    proc = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30; wait"])
    try:
        deadline = time.monotonic() + 10
        while _names(process_tree.children(proc.pid)) != ["sleep", "sleep"] and time.monotonic() < deadline:
            time.sleep(0.02)
        fast = process_tree.children(proc.pid)
        assert len(fast) == 2 and _names(fast) == ["sleep", "sleep"]
        monkeypatch.setattr(process_tree, "PROC_CHILDREN", False)
        assert process_tree.children(proc.pid) == fast
    finally:
        _kill(process_tree.snapshot(proc.pid))
        proc.wait()
    monkeypatch.setattr(process_tree, "PROC_CHILDREN", True)
    assert process_tree.children(proc.pid) == set()
