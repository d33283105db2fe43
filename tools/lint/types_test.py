"""The type check: mypy, configured by the checkout's mypy.ini, over what that file names: every Python
file of the tree (the suite's server interface, tools/launcher/interface.py, and its two implementations
among the rest).

It runs on this target's runfiles, which hold exactly the sources the check reads, so Bazel reruns it
when one of them changes. The interpreter is the toolchain's: mypy comes from the hashed lock.
"""

import os
import subprocess
import sys

CONFIG = "mypy.ini"
FAKE_SERVER = "tests/sleep_wake/fakes/fake_server.py"


def mypy(tmp_path, *files: str) -> subprocess.CompletedProcess:
    """mypy with the checkout's config, its cache in this test's temp dir; files replace the config's."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", CONFIG, "--cache-dir", str(tmp_path / "mypy-cache"), *files],
        capture_output=True,
        text=True,
        timeout=600,
        # A planted file outside the tree still resolves the tree's modules.
        env=dict(os.environ, MYPYPATH=os.getcwd()),
    )


def test_the_configured_files_type_check(tmp_path):
    result = mypy(tmp_path)
    assert result.returncode == 0, (
        f"mypy found errors (fix them, or see mypy.ini for what it checks):\n{result.stdout}{result.stderr}"
    )


def test_a_fake_server_lacking_a_member_of_the_interface_fails(tmp_path):
    # The check must be able to fail: the fake with gpu_bytes renamed no longer implements Server.
    with open(FAKE_SERVER, encoding="utf-8") as f:
        source = f.read()
    assert "    def gpu_bytes(self) -> int:" in source
    planted = tmp_path / "planted" / "fake_server_without_gpu_bytes.py"
    planted.parent.mkdir()
    planted.write_text(source.replace("    def gpu_bytes(self) -> int:", "    def gpu_bytez(self) -> int:"))
    result = mypy(tmp_path, str(planted))
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert '"VllmServer" is missing following "Server" protocol member' in output and "gpu_bytes" in output, output
    assert "import-not-found" not in output, output  # failed for the member, not for a path
