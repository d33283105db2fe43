"""The remote-cache round trip, end to end, on loopback.

Starts Debian's nginx as a WebDAV cache (nginx.conf.in, the config docs/remote.md documents), runs a
probe workspace's tests through it with a nested Bazel, expunges every local state, runs them again,
and requires every test result to come back from the remote cache. This is what makes "share results
through a remote cache in CI" a tested claim rather than a config line.
"""

import os
import pathlib
import pwd
import re
import shutil
import socket
import subprocess
import time

import pytest

from tools.nested_bazel import fill, free_port, run_bazel, stub_repositories

# Not resolved: the runfiles tree holds the stub repositories beside this file (data deps).
HERE = pathlib.Path(__file__).absolute().parent
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
PROBE_TESTS = ["//:probe_a_test", "//:probe_b_test"]


@pytest.fixture
def cache_url(tmp_path):
    if not os.path.exists(NGINX):
        pytest.fail(f"nginx not found at {NGINX}: install Debian's nginx (tools/setup.sh does)")
    prefix, root = tmp_path / "nginx", tmp_path / "cache"
    prefix.mkdir()
    root.mkdir()
    port = free_port()
    conf = prefix / "nginx.conf"
    # The worker writes under tmp_path, which only this user can reach; run it as this user.
    user = pwd.getpwuid(os.geteuid()).pw_name
    conf.write_text(fill(HERE.parent / "nginx.conf.in", ROOT=root, PORT=port, PREFIX=prefix, USER=user))
    proc = subprocess.Popen(
        [NGINX, "-c", str(conf), "-p", str(prefix)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.communicate()[0].decode(errors="replace")
                pytest.fail(
                    f"nginx did not start on 127.0.0.1:{port}: {out}\n"
                    f"{(prefix / 'error.log').read_text() if (prefix / 'error.log').exists() else ''}"
                )
            time.sleep(0.1)  # polling the port above: nginx has no readiness signal
    yield f"http://127.0.0.1:{port}", prefix / "access.log"
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture
def probe_workspace(tmp_path):
    ws = tmp_path / "ws"
    src = HERE / "testdata" / "workspace"
    ws.mkdir()
    (ws / "WORKSPACE").write_text(fill(src / "WORKSPACE.in", STUBS=stub_repositories(HERE.parent.parent.parent)))
    (ws / "BUILD").write_text((src / "BUILD.in").read_text())
    for name in ("probe_a_test.py", "probe_b_test.py"):
        shutil.copy(src / name, ws / name)
    (ws / ".bazelversion").write_text("4\n")
    return ws


def test_results_come_back_from_remote_cache_after_expunge(cache_url, probe_workspace, tmp_path):
    url, access_log = cache_url
    root = tmp_path / "bazel_root"
    flags = [
        "--remote_cache=" + url,
        "--remote_upload_local_results=true",
        "--incompatible_strict_action_env",
        "--spawn_strategy=local",
        "--nosandbox_debug",
        "--color=no",
        "--curses=no",
        "--test_output=errors",
    ]
    try:
        first = run_bazel(probe_workspace, root, "test", *flags, *PROBE_TESTS)
        assert first.returncode == 0, f"first run failed:\n{first.stdout[-4000:]}"
        puts = [line for line in access_log.read_text().splitlines() if '"PUT /ac/' in line]
        assert puts, f"the first run uploaded no action result to {url}:\n{first.stdout[-2000:]}"

        expunge = run_bazel(probe_workspace, root, "clean", "--expunge")
        assert expunge.returncode == 0, expunge.stdout[-2000:]

        second = run_bazel(probe_workspace, root, "test", *flags, *PROBE_TESTS)
        assert second.returncode == 0, f"second run failed:\n{second.stdout[-4000:]}"
        for target in PROBE_TESTS:
            assert re.search(re.escape(target) + r"\s+\(cached\) PASSED", second.stdout), (
                f"{target} was not served from the remote cache after expunge:\n{second.stdout[-4000:]}"
            )
        hits = re.search(r"(\d+) remote cache hit", second.stdout)
        assert hits and int(hits.group(1)) >= len(PROBE_TESTS), (
            f"expected >= {len(PROBE_TESTS)} remote cache hits:\n{second.stdout[-4000:]}"
        )
    finally:
        run_bazel(probe_workspace, root, "shutdown")
