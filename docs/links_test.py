"""Every relative link in README.md and docs/ resolves to a file of the checkout: pages move (the
README's dated tables went to docs/), and a link written relative to the wrong directory 404s on GitHub."""

import glob
import os
import re

import pytest

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _pages():
    root = os.environ.get("TEST_SRCDIR")
    base = os.path.join(root, os.environ["TEST_WORKSPACE"]) if root else os.path.dirname(os.path.dirname(__file__))
    pages = [os.path.join(base, "README.md")] + sorted(glob.glob(os.path.join(base, "docs", "**", "*.md"),
                                                                 recursive=True))
    return base, pages


def broken_links(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [t for t in LINK.findall(text) if "://" not in t and not t.startswith("mailto:")
            and not os.path.exists(os.path.join(os.path.dirname(path), t))]


BASE, PAGES = _pages()


@pytest.mark.parametrize("page", PAGES, ids=[os.path.relpath(p, BASE) for p in PAGES])
def test_relative_links_resolve(page):
    assert broken_links(page) == [], f"{os.path.relpath(page, BASE)} links to files that do not exist"


def test_the_pages_were_found():
    assert len(PAGES) >= 10 and os.path.basename(PAGES[0]) == "README.md"


def test_a_link_relative_to_the_wrong_directory_is_broken(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bench.md").write_text("x")
    page = tmp_path / "docs" / "speed.md"
    page.write_text("[a](bench.md) [b](docs/bench.md) [c](https://example.com/x) [d](bench.md#top)")
    assert broken_links(str(page)) == ["docs/bench.md"]
