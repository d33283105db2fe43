"""No tier imports another (tools/lint/tiers.py: the layers and MAY_IMPORT), read from every .py file of
the checkout with ast (tools/lint/checkout.py says why the checkout)."""

import os

from tools.lint import checkout, tiers


def test_every_python_file_has_a_layer():
    root = checkout.root("mypy.ini")
    files = tiers.python_files(root)
    assert len(files) > 200, f"found only {len(files)} Python files under {root}"
    unplaced = [f for f in files if tiers.layer_of_file(f) is None]
    assert not unplaced, f"files in no layer (give their folder one in tools/lint/tiers.py LAYER_OF_FOLDER): {unplaced}"


def test_no_layer_imports_what_it_may_not():
    bad = tiers.forbidden(checkout.root("mypy.ini"))
    assert not bad, (
        "imports across tiers (move what both need into tests/core, or a tier-neutral place, instead; "
        "tools/lint/tiers.py MAY_IMPORT):\n" + "\n".join(bad)
    )


def _tree(tmp_path, files: dict) -> str:
    for path, text in files.items():
        os.makedirs(os.path.dirname(tmp_path / path), exist_ok=True)
        (tmp_path / path).write_text(text)
    return str(tmp_path)


def test_a_tier_importing_another_is_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tests/__init__.py": "",
            "tests/core/__init__.py": "",
            "tests/core/oracle.py": "",
            "tests/sleep_wake/__init__.py": "",
            "tests/sleep_wake/fakes/__init__.py": "",
            "tests/sleep_wake/fakes/fake_defects.py": "from ...core import oracle\n",
            "tests/sleep_wake/test_x.py": "from .fakes import fake_defects\n",
            "tests/engine/lib.py": "import sleepwake_mutants\nfrom tests.core import oracle\n",
            "tests/mutants/walk_reach.py": "from tests.sleep_wake.fakes.fake_defects import X\n",
            "tools/report.py": "import tests.core.oracle\n",
        },
    )
    assert tiers.forbidden(root) == [
        "tests/mutants/walk_reach.py:1: mutant imports tests.sleep_wake.fakes.fake_defects (fake)",
        "tests/sleep_wake/test_x.py:1: gpu imports tests.sleep_wake.fakes.fake_defects (fake)",
        "tools/report.py:1: tools imports tests.core.oracle (core)",
    ]


def test_every_layer_has_its_rule():
    layers = set(tiers.LAYER_OF_FOLDER.values()) | set(tiers.LAYER_OF_PACKAGE.values())
    assert layers == set(tiers.MAY_IMPORT), "tools/lint/tiers.py: each layer needs a MAY_IMPORT entry"
    assert all(not (tiers.MAY_IMPORT[t] & set(tiers.TIERS)) for t in tiers.MAY_IMPORT), "a layer may import a tier"
