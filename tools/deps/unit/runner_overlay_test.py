import importlib.metadata
import os
import subprocess
import sys

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools.deps import runner_overlay, wheelhouse

HERE = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SAMPLE = os.path.join(HERE, "testdata", "runner_overlay", "sample.lock")
LOCK = os.path.join(WORKSPACE, "third_party", "python", "requirements.lock")


def _sample():
    with open(SAMPLE, encoding="utf-8") as f:
        return runner_overlay.parse_lock(f.read())


def test_parses_pins_hashes_and_both_via_styles():
    pins = _sample()
    assert list(pins) == [
        "absl-py",
        "numpy",
        "packaging",
        "pluggy",
        "pytest",
        "torch",
        "transformers",
        "vllm",
        "uvicorn",
        "uvloop",
        "mypy",
        "librt",
    ]  # uvicorn[standard]==...: extras are not the name
    assert pins["absl-py"].lines == ["absl-py==2.5.1 \\", "    --hash=sha256:aaaa \\", "    --hash=sha256:bbbb"]
    assert pins["numpy"].via == ["-r third_party/python/requirements.in", "torch", "vllm"]
    assert pins["pluggy"].via == ["pytest"]


def test_overlay_leaves_everything_vllm_pulls_in_to_the_runner():
    names = [p.name for p in runner_overlay.overlay_pins(_sample())]
    # numpy is the suite's too, but vLLM needs it (directly and through torch): the runner's stays.
    # packaging is needed by pytest and by transformers (a vLLM dependency): the runner's stays.
    assert names == ["absl-py", "pluggy", "pytest"]


def test_overlay_leaves_out_the_source_checkers_and_what_only_they_need():
    # mypy (a CHECKERS root) and librt (pulled in by mypy alone) are never imported by a GPU cell.
    names = {p.name for p in runner_overlay.overlay_pins(_sample())}
    assert not names & {"mypy", "librt"}, names


def test_fallbacks_are_what_overlay_packages_need_that_the_lock_files_under_vllm():
    # packaging: pytest needs it, and the lock files it under transformers (vLLM's); a runner whose
    # vLLM came without it would not import pytest. numpy: no overlay package needs it.
    assert [p.name for p in runner_overlay.fallback_pins(_sample())] == ["packaging"]


def test_with_fallbacks_only_those_the_runner_lacks_are_added():
    text = open(SAMPLE, encoding="utf-8").read()
    names = lambda req: [line.split("==")[0] for line in req.splitlines() if "==" in line]  # noqa: E731
    assert names(runner_overlay.overlay_requirements(text)) == ["absl-py", "pluggy", "pytest"]
    assert names(runner_overlay.overlay_requirements(text, fallbacks=True, installed=lambda n: False)) == [
        "absl-py",
        "pluggy",
        "pytest",
        "packaging",
    ]
    assert names(runner_overlay.overlay_requirements(text, fallbacks=True, installed=lambda n: True)) == [
        "absl-py",
        "pluggy",
        "pytest",
    ]


def test_the_real_lock_falls_back_to_what_ray_needs():
    # A GPU runner's vLLM without mcp and mistral-common had no jsonschema, and ray did not import.
    with open(LOCK, encoding="utf-8") as f:
        pins = runner_overlay.parse_lock(f.read())
    names = {p.name for p in runner_overlay.fallback_pins(pins)}
    assert {"jsonschema", "referencing", "rpds-py", "jsonschema-specifications"} <= names, names
    assert not names & {"vllm", "torch", "numpy", "transformers"}, names


def test_every_overlay_and_fallback_package_needs_only_overlay_and_fallback_packages():
    """By the packages' own metadata (installed here from the same lock), not the lock's `via` lines: what
    each one requires on the runner's Python, markers evaluated there, is in the overlay or its fallbacks,
    so a runner whose vLLM brought none of it still imports them (ray needing jsonschema did not)."""
    with open(LOCK, encoding="utf-8") as f:
        pins = runner_overlay.parse_lock(f.read())
    packages = runner_overlay.overlay_pins(pins) + runner_overlay.fallback_pins(pins)
    carried = {canonicalize_name(p.name) for p in packages}
    env = default_environment() | {"python_version": wheelhouse.RUNNER_PYTHON, "extra": ""}
    outside = []
    for name in sorted(carried):
        for text in importlib.metadata.requires(name) or []:
            needed = Requirement(text)
            applies = needed.marker is None or needed.marker.evaluate(env)
            if applies and canonicalize_name(needed.name) not in carried:
                outside.append(f"{name} needs {text}")
    assert not outside, outside


def test_installed_here_reads_this_pythons_distributions():
    assert runner_overlay.installed_here("pytest") and runner_overlay.installed_here("PyTest")
    assert not runner_overlay.installed_here("no-such-distribution-sleepwake")


def test_a_lock_without_the_runner_package_is_refused():
    pins = _sample()
    del pins["vllm"]
    with pytest.raises(ValueError, match="pins no 'vllm'"):
        runner_overlay.overlay_pins(pins)


def test_the_real_lock_overlay_has_the_test_runner_and_not_vllm_or_torch():
    with open(LOCK, encoding="utf-8") as f:
        names = {p.name for p in runner_overlay.overlay_pins(runner_overlay.parse_lock(f.read()))}
    assert {"pytest", "absl-py"} <= names, names
    assert not names & {"vllm", "torch", "numpy", "requests", "transformers"}, names
    assert not names & {"ruff", "mypy", "ast-serialize", "librt", "pathspec", "mypy-extensions"}, names


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.deps.runner_overlay", *args], capture_output=True, text=True, cwd=WORKSPACE
    )


def test_cli_prints_hashed_requirements_and_rejects_bad_usage(tmp_path):
    out = _cli(SAMPLE).stdout
    assert "pytest==9.2.0 \\\n    --hash=sha256:ffff" in out and "vllm==" not in out
    assert "packaging==26.4" in _cli(SAMPLE, "--with_fallbacks").stdout and "packaging==" not in out
    wrong = _cli(SAMPLE, "--everything")
    assert wrong.returncode == 2 and "usage:" in wrong.stderr
    bad = _cli(str(tmp_path / "none"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "runner_overlay:" in bad.stderr
