"""A Bazel inside a test: the offline stub repositories, template filling, a scratch port, the command.

For tests that assemble a probe workspace and run a second Bazel on it (the remote-cache and
remote-execution round trips). The nested Bazel has its own output root under the test's TEST_TMPDIR
and reads no home rc; the system rc stays, since Debian's points Bazel at its install base and JDK.
"""

from __future__ import annotations

import pathlib
import shutil
import socket
import subprocess

BAZEL = shutil.which("bazel") or "/usr/bin/bazel"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill(template: pathlib.Path, **values) -> str:
    """The template's text with every @KEY@ replaced by values[KEY]."""
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    return text


def stub_repositories(source_root: pathlib.Path) -> pathlib.Path:
    """The directory holding rules_cc/, rules_java/ and remote_coverage_tools/.

    Under Bazel they are runfiles of their own repositories, beside this workspace's directory (data
    //third_party:stub_repositories); run by hand from the source tree, they are under third_party/.
    """
    for parent in (pathlib.Path.cwd().parent, source_root / "third_party"):
        if (parent / "rules_cc" / "WORKSPACE").exists():
            return parent
    raise FileNotFoundError(
        "stub repositories not found: run through Bazel (data //third_party:stub_repositories) or from the source tree"
    )


def bazel_command(output_user_root: pathlib.Path, *args: str) -> list[str]:
    # The nested server is a daemon outside the test's process group: if the test is killed before its
    # `bazel shutdown`, the server still exits once idle.
    return [
        BAZEL,
        f"--output_user_root={output_user_root}",
        "--host_jvm_args=-Xmx1g",
        "--nohome_rc",
        "--max_idle_secs=120",
        *args,
    ]


def run_bazel(
    workspace: pathlib.Path, output_user_root: pathlib.Path, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Runs `bazel ARGS` in workspace; stdout and stderr together in .stdout, as text."""
    return subprocess.run(
        bazel_command(output_user_root, *args),
        cwd=workspace,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
