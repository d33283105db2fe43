"""`ruff format --check` over the checkout with its ruff.toml (tools/lint/checkout.py says why the
checkout)."""

import sys

from tools.lint import checkout

RUFF = [sys.executable, "-m", "ruff"]  # from the hashed lock, in the toolchain's interpreter


def test_ruff_format_leaves_the_tree_as_it_is():
    root = checkout.root("ruff.toml")
    result = checkout.run(RUFF + ["format", "--check", "--no-cache", "--output-format", "concise", "."], cwd=root)
    assert result.returncode == 0, (
        f"ruff format --check in {root}: run `ruff format` there:\n{result.stdout}{result.stderr}"
    )


def test_ruff_format_check_fails_on_a_planted_file(tmp_path):
    # The check must be able to fail: a file the formatter would change, with the tree's config.
    root = checkout.root("ruff.toml")
    planted = tmp_path / "planted.py"
    planted.write_text("x  =  {'a':1}\n")
    result = checkout.run(
        RUFF + ["format", "--check", "--no-cache", "--config", f"{root}/ruff.toml", str(planted)], cwd=str(tmp_path)
    )
    assert result.returncode == 1 and "planted.py" in result.stdout, result.stdout + result.stderr
