"""docs/architecture.md's picture is the one the imports draw (tools/lint/architecture.py), read from the
checkout (tools/lint/checkout.py says why the checkout)."""

import os

from tools.lint import architecture, checkout

PAGE = os.path.join("docs", "architecture.md")


def test_the_pages_picture_is_what_the_imports_draw():
    root = checkout.root("mypy.ini")
    with open(os.path.join(root, PAGE), encoding="utf-8") as f:
        drawn = architecture.picture_in(f.read())
    assert drawn == architecture.render(root), (
        f"{PAGE}'s picture is stale: run `python3 -m tools.lint.architecture --write {PAGE}` at the checkout's root"
    )


def test_the_core_is_a_layer_of_its_own_under_every_tier():
    arrows = architecture.arrows(checkout.root("mypy.ini"))
    assert all((tier, "core") in arrows for tier in ("gpu", "fake", "engine", "mutant")), arrows
    assert not [a for a in arrows if a[0] == "core" and a[1] not in ("tools", "catalogue")], arrows


def test_a_new_import_changes_the_picture(tmp_path):
    for path, text in {
        "tests/core/oracle.py": "",
        "tests/engine/lib.py": "from tests.core import oracle\n",
        "tools/x.py": "",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    before = architecture.render(str(tmp_path))
    assert "engine --> core" in before and "engine --> tools" not in before
    (tmp_path / "tests/engine/lib.py").write_text("from tests.core import oracle\nfrom tools import x\n")
    assert "engine --> tools" in architecture.render(str(tmp_path))
