"""`ruff check` over the checkout with its ruff.toml (tools/lint/checkout.py says why the checkout)."""

import sys

from tools.lint import checkout

RUFF = [sys.executable, "-m", "ruff"]  # from the hashed lock, in the toolchain's interpreter


def test_ruff_check_passes():
    root = checkout.root("ruff.toml")
    result = checkout.run(RUFF + ["check", "--no-cache", "--output-format", "concise", "."], cwd=root)
    assert result.returncode == 0, (
        f"ruff check in {root} (fix what it names; `ruff check --fix` fixes some):\n{result.stdout}{result.stderr}"
    )


def test_ruff_check_fails_on_a_planted_violation(tmp_path):
    # The check must be able to fail: an unused import, with the tree's config.
    root = checkout.root("ruff.toml")
    planted = tmp_path / "planted.py"
    planted.write_text("import os\n")
    result = checkout.run(
        RUFF + ["check", "--no-cache", "--config", f"{root}/ruff.toml", str(planted)], cwd=str(tmp_path)
    )
    assert result.returncode == 1 and "F401" in result.stdout, result.stdout + result.stderr
