import subprocess
import sys

from tools.bench import host_cpu


def _proc(root, processes, busy=(100, 0, 50, 1000, 10)):
    """A fake /proc: {pid: (ppid, ticks, start, argv)} and /proc/stat's first cpu values."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text("cpu  " + " ".join(map(str, busy)) + " 0 0 0 0 0\n")
    for pid, (ppid, ticks, start, argv) in processes.items():
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        fields = ["S", ppid] + [0] * 9 + [ticks, 0] + [0] * 6 + [start, 0]
        (d / "stat").write_text(f"{pid} (a name) with) {' '.join(map(str, fields))}\n")
        (d / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")


TREE = {
    1: (0, 500, 1, ["/sbin/init"]),
    10: (1, 40, 2, ["/usr/lib/jvm/bin/java", "-jar", "A-server.jar"]),
    11: (10, 1, 3, ["process-wrapper"]),
    12: (11, 30, 4, ["python3", "-m", "pytest"]),
    20: (1, 7, 5, ["python3", "-m", "tools.launcher.zygote_host", "--lock_dir", "x"]),
    21: (20, 100, 6, ["python3", "-m", "vllm.entrypoints.openai.api_server"]),
}


def _sampled(tmp_path, *states) -> host_cpu.Sampler:
    """A Sampler after one sample of each state of a fake /proc, in order."""
    proc = tmp_path / "proc"
    sampler = host_cpu.Sampler(str(proc))
    for state in states:
        _proc(proc, state)
        sampler.sample()
    return sampler


def test_processes_count_from_the_first_sample_by_the_kind_of_their_ancestors(tmp_path):
    later = dict(TREE)
    later[1] = (0, 510, 1, TREE[1][3])
    later[10] = (1, 44, 2, TREE[10][3])
    later[12] = (11, 50, 4, TREE[12][3])
    later[13] = (12, 6, 9, ["bash", "-c", "x"])  # new since the first sample: all of it counts
    later[21] = (20, 160, 6, TREE[21][3])
    later[22] = (21, 3, 9, ["python3", "engine core"])
    sampler = _sampled(tmp_path, TREE, later)
    (tmp_path / "proc" / "21" / "stat").unlink()  # the server is gone: its last sample stands
    sampler.sample()
    assert sampler.totals() == {"servers": 60 + 3, "bazel": 4, "tests": 20 + 6, "other": 10}


def test_a_reused_pid_is_another_process(tmp_path):
    reused = dict(TREE)
    reused[12] = (20, 8, 99, ["python3", "-m", "vllm.entrypoints.openai.api_server"])  # pid 12, a new start
    sampler = _sampled(tmp_path, TREE, reused)
    assert sampler.totals()["servers"] == 8 and sampler.totals()["tests"] == 0


def test_the_summary_line_and_the_command_line(tmp_path):
    assert host_cpu.summary({"servers": 300, "bazel": 0, "tests": 100, "other": 0}, 500, 10.0, 4, 100) == (
        "host CPU-s over 10 s on 4 cores: busy 5 (12%); servers 3, bazel 0, tests 1, other 0; unsampled 1"
    )
    proc = tmp_path / "proc"
    _proc(proc, TREE)
    out = subprocess.run(
        [sys.executable, "-m", "tools.bench.host_cpu", "--proc", str(proc), "--samples", "2", "--interval_s", "0.01"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith("host CPU-s over 0 s on ") and "servers 0, bazel 0, tests 0, other 0" in out, out
    bad = subprocess.run(
        [sys.executable, "-m", "tools.bench.host_cpu", "--interval_s", "0"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--interval_s=0.0 must be > 0" in bad.stderr
