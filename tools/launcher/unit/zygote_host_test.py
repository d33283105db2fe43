"""The zygote host's own lifecycle: one host per lock dir, kept across runs, replaced when another
checkout's code left it (tools/run_matrix.sh starts it with --replace_other_code)."""

import os
import shutil
import subprocess
import sys
import time

from tools.launcher import zygote_host

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(os.path.dirname(_HERE))


def _host(pythonpath: str, lock_dir: str, *flags) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tools.launcher.zygote_host", "--lock_dir", lock_dir, "--idle_s", "0", *flags],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": pythonpath},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd="/",
    )


def _other_checkout(tmp_path) -> str:
    """The host's package as another checkout has it: the same files but for one line of zygote_host.py."""
    root = tmp_path / "other"
    (root / "tools" / "launcher").mkdir(parents=True)
    shutil.copy2(os.path.join(_ROOT, "tools", "__init__.py"), root / "tools")
    for name in ("__init__.py",) + zygote_host.HOST_SOURCES:
        shutil.copy2(os.path.join(_HERE, name), root / "tools" / "launcher")
    with open(root / "tools" / "launcher" / "zygote_host.py", "a") as f:
        f.write("# another version\n")
    return str(root)


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    return proc.communicate(timeout=30)[0]


def _first_answer(lock_dir: str, proc: subprocess.Popen) -> dict | None:
    for _ in range(200):  # polled: the socket appears when the host binds it, within ~0.1 s
        answer = zygote_host.ping(lock_dir)
        if answer is not None or proc.poll() is not None:
            return answer
        time.sleep(0.05)
    return None


def test_a_host_of_other_code_is_replaced_and_one_of_this_code_is_left_serving(tmp_path):
    lock_dir = str(tmp_path / "locks")
    old = _host(_other_checkout(tmp_path), lock_dir)
    procs = [old]
    try:
        answer = _first_answer(lock_dir, old)
        assert answer is not None and answer["pid"] == old.pid, _stop(old)
        assert answer["code"] != zygote_host.code_digest()
        # A host of this code with --replace_other_code stops the other one and serves in its place.
        new = _host(_ROOT, lock_dir, "--replace_other_code")
        procs.append(new)
        answer = zygote_host.await_host(lock_dir, 30)
        assert answer is not None and answer["pid"] == new.pid
        assert old.wait(timeout=30) == 0  # its SIGTERM: it stopped its zygotes (none) and exited
        # Another one finds a host of its own code serving and leaves it be.
        again = _host(_ROOT, lock_dir, "--replace_other_code")
        procs.append(again)
        assert again.wait(timeout=30) == 0 and "another host serves" in _stop(again)
        serving = zygote_host.ping(lock_dir)
        assert serving is not None and serving["pid"] == new.pid
        assert "with other code" in _stop(new)
    finally:
        for proc in procs:
            _stop(proc)


def test_await_host_waits_for_a_host_of_this_code_only(tmp_path):
    lock_dir = str(tmp_path / "locks")
    assert zygote_host.await_host(lock_dir, 0.2) is None  # none serves
    old = _host(_other_checkout(tmp_path), lock_dir)
    try:
        assert zygote_host.main(["--lock_dir", lock_dir, "--await_s", "0.5"]) == 1  # another code's only
    finally:
        _stop(old)


def _request(key, **env):
    return {
        "key": key,
        "python": "/usr/bin/python3",
        "modules": ["vllm.entrypoints.openai.api_server"],
        "preloads": [],
        "code_root": "/ws",
        "env": env,
    }


def test_key_differences_name_what_split_two_zygotes_of_one_module():
    first = _request("a", PATH="/bin", VLLM_LOGGING_LEVEL="INFO")
    second = _request("b", PATH="/usr/bin:/bin", VLLM_LOGGING_LEVEL="INFO", HF_HUB_OFFLINE="1")
    assert zygote_host.key_differences(second, first) == ["HF_HUB_OFFLINE", "PATH"]
    assert zygote_host.key_differences(dict(first, preloads=["x"]), first) == ["preloads"]
    assert zygote_host.key_differences(dict(first, key="c"), first) == ["the clients' code"]
    assert zygote_host.key_differences(dict(first, code_root="/other"), first) == ["the clients' code"], (
        "the code root is not part of the key"
    )


def test_a_second_zygote_of_a_module_says_what_its_key_differs_in(tmp_path):
    host = zygote_host.Host(str(tmp_path))
    first = _request("a", PATH="/bin")
    assert host.another_zygote_note(first) == ""
    host.requests["a"] = first
    assert host.another_zygote_note(first) == "", "its own key is no other zygote"
    note = host.another_zygote_note(_request("b", PATH="/usr/bin"))
    assert "key a" in note and note.endswith("differs in: PATH"), note
    other_module = dict(_request("c", PATH="/usr/bin"), modules=["tools.launcher.door_host"])
    assert host.another_zygote_note(other_module) == ""
    sharing = dict(_request("d", PATH="/usr/bin"), modules=["vllm.entrypoints.openai.api_server", "x"])
    assert host.another_zygote_note(sharing).endswith("differs in: modules, PATH"), "one module in common"
