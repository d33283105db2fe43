import os
import subprocess

from tools.deps import runner_overlay, wheelhouse

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "testdata", "runner_overlay", "sample.lock")


def _sample_text():
    with open(SAMPLE, encoding="utf-8") as f:
        return f.read()


def test_requirements_are_the_overlays_pins_with_their_hashes():
    text = runner_overlay.overlay_requirements(_sample_text())
    names = [line.split("==")[0] for line in text.splitlines() if "==" in line]
    expected = [pin.name for pin in runner_overlay.overlay_pins(runner_overlay.parse_lock(_sample_text()))]
    assert names == expected and names, text
    assert "vllm" not in names and "torch" not in names, "the runner's own packages stay the runner's"
    assert text.count("--hash=sha256:") >= len(names), "every pin keeps its hashes"


def test_download_is_hash_checked_binary_only_and_for_the_runners_python():
    command = wheelhouse.download_command("req.txt", "dest", "3.12")
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:"):
        assert flag in command
    assert command[command.index("--python-version") + 1] == "3.12"
    assert command[command.index("-d") + 1] == "dest"
    assert command[command.index("-r") + 1] == "req.txt"
    assert "any" in command and "manylinux2014_x86_64" in command


def test_main_downloads_into_dest_and_fails_when_pip_does(tmp_path, monkeypatch):
    lock = tmp_path / "requirements.lock"
    lock.write_text(_sample_text())
    seen = []

    def fake_run(command, check):
        with open(command[command.index("-r") + 1], encoding="utf-8") as f:
            seen.append(f.read())
        dest = command[command.index("-d") + 1]
        open(os.path.join(dest, "pytest-0-py3-none-any.whl"), "w").close()
        return subprocess.CompletedProcess(command, 0 if len(seen) == 1 else 1)

    monkeypatch.setattr(wheelhouse.subprocess, "run", fake_run)
    dest = tmp_path / "wheels"
    assert wheelhouse.main([str(dest), "--lock", str(lock)]) == 0
    assert seen[0] == runner_overlay.overlay_requirements(_sample_text(), fallbacks=True)
    assert "packaging==" in seen[0], "a fallback (pytest needs it, the lock files it under vLLM) is downloaded"
    assert os.listdir(dest) == ["pytest-0-py3-none-any.whl"]
    assert wheelhouse.main([str(dest), "--lock", str(lock)]) == 1


def test_main_says_what_is_wrong_with_a_lock_it_cannot_read(tmp_path, capsys):
    assert wheelhouse.main([str(tmp_path / "w"), "--lock", str(tmp_path / "missing.lock")]) == 2
    assert "cannot derive the overlay" in capsys.readouterr().err
