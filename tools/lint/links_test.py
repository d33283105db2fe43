"""Every relative link in README.md and docs/ resolves to a file of the checkout: pages move, and a link
written relative to the wrong directory 404s on GitHub.

docs/ stays a handful of pages for users: no dated file names (a run's record is a line of
tools/bench/runs.jsonl, not a page), and at most DOCS_FILES_MAX files.

And every reference to a README section by its heading, `README "Section"` (or `README's "Section"`),
in the code and the docs names a heading README.md has: sections get renamed and merged, and a comment
sending the reader to one that is gone sends them nowhere. The references are read from the checkout
itself (tools/lint/checkout.py says why), so a file a BUILD file does not list is read too."""

import glob
import os
import re

import pytest

from tools.lint import checkout

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# README, README.md or README's, then the quoted heading, perhaps after a comment's line break.
SECTION_REF = re.compile(r"\bREADME(?:\.md)?(?:'s)?(?:\s|#|//)+\"([A-Z][^\"\n]*)\"")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
# What the walk of the checkout skips: VCS and tool caches, Bazel's output links, binary and lock files.
SKIP_DIRS = {".git", ".ruff_cache", ".mypy_cache", ".pytest_cache", "__pycache__", "node_modules"}
TEXT_SUFFIXES = (
    ".py",
    ".sh",
    ".bzl",
    ".bazel",
    ".md",
    ".toml",
    ".ini",
    ".in",
    ".yml",
    ".yaml",
    ".cfg",
    ".bazelrc",
    ".json",
    ".txt",
)
TEXT_NAMES = {"WORKSPACE", "BUILD", "run"}
# docs/'s files, generated pages and pictures included: install, architecture, classes, the walk, oracles,
# extending, configuration, remote execution, tiers, the design choices, and what is generated.
DOCS_FILES_MAX = 15
DATED = re.compile(r"(?<!\d)(20\d\d-[01]\d(-[0-3]\d)?|20\d\d[01]\d[0-3]\d)(?!\d)")


def _pages():
    root = os.environ.get("TEST_SRCDIR")
    here = os.path.dirname(os.path.abspath(__file__))
    base = os.path.join(root, os.environ["TEST_WORKSPACE"]) if root else os.path.dirname(os.path.dirname(here))
    pages = [os.path.join(base, "README.md")] + sorted(
        glob.glob(os.path.join(base, "docs", "**", "*.md"), recursive=True)
    )
    return base, pages


def broken_links(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [
        t
        for t in LINK.findall(text)
        if "://" not in t and not t.startswith("mailto:") and not os.path.exists(os.path.join(os.path.dirname(path), t))
    ]


def headings(readme_text: str) -> set[str]:
    """The README's headings, each also without a trailing parenthesis ("Configurations (`.bazelrc`)")."""
    found = set()
    for heading in HEADING.findall(readme_text):
        found.add(heading)
        found.add(re.sub(r"\s*\(.*\)$", "", heading))
    return found


def _text_files(root: str):
    this = os.path.realpath(__file__)  # its own examples are no references
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("bazel-"))
        for name in sorted(files):
            path = os.path.join(folder, name)
            if (name.endswith(TEXT_SUFFIXES) or name in TEXT_NAMES) and os.path.realpath(path) != this:
                yield path


def missing_sections(root: str) -> list[str]:
    """`path:line: README "X"` for every reference under root to a heading README.md does not have."""
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        known = headings(f.read())
    missing = []
    for path in _text_files(root):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for ref in SECTION_REF.finditer(text):
            if ref.group(1) not in known:
                line = text.count("\n", 0, ref.start()) + 1
                missing.append(f'{os.path.relpath(path, root)}:{line}: README "{ref.group(1)}"')
    return missing


def docs_problems(root: str) -> list[str]:
    """What keeps root/docs from being pages for users: a dated file name, more than DOCS_FILES_MAX files."""
    files = sorted(
        os.path.relpath(os.path.join(folder, name), root)
        for folder, _, names in os.walk(os.path.join(root, "docs"))
        for name in names
    )
    problems = [f"{f}: a dated name (a run's record goes in tools/bench/runs.jsonl)" for f in files if DATED.search(f)]
    if len(files) > DOCS_FILES_MAX:
        problems.append(f"docs/ holds {len(files)} files, more than {DOCS_FILES_MAX}: merge pages")
    return problems


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


def test_docs_are_pages_for_users():
    problems = docs_problems(checkout.root("README.md"))
    assert not problems, "docs/:\n  " + "\n  ".join(problems)


def test_a_dated_page_and_too_many_pages_are_found(tmp_path):
    (tmp_path / "docs" / "walk").mkdir(parents=True)
    (tmp_path / "docs" / "install.md").write_text("x")
    (tmp_path / "docs" / "walk" / "runs-2026-12-05.md").write_text("x")
    (tmp_path / "docs" / "h200-20261205.json").write_text("x")
    assert docs_problems(str(tmp_path)) == [
        "docs/h200-20261205.json: a dated name (a run's record goes in tools/bench/runs.jsonl)",
        "docs/walk/runs-2026-12-05.md: a dated name (a run's record goes in tools/bench/runs.jsonl)",
    ]
    for i in range(DOCS_FILES_MAX):
        (tmp_path / "docs" / f"page{i}.md").write_text("x")
    too_many = f"docs/ holds {DOCS_FILES_MAX + 3} files, more than {DOCS_FILES_MAX}: merge pages"
    assert docs_problems(str(tmp_path))[-1] == too_many


def test_every_readme_section_the_code_and_docs_name_is_a_heading_of_the_readme():
    missing = missing_sections(checkout.root("README.md"))
    assert not missing, "references to README sections it does not have (point them at a heading or a doc):\n  " + (
        "\n  ".join(missing)
    )


def test_a_reference_to_a_section_the_readme_lacks_is_found(tmp_path):
    (tmp_path / "README.md").write_text("# sleepwake\n\n## Two commands\n\n## Configurations (`.bazelrc`)\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "a.sh").write_text(
        '# see README "Two commands" and README "Configurations"\n'
        '# and the README\'s "Speed", README.md "Remote execution" and README\n'
        '# "Bounds" across a line break\n'
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text('The README "Two commands" and README "Gone".\n')
    (tmp_path / "bazel-out").mkdir()  # Bazel's output links are not the checkout's
    (tmp_path / "bazel-out" / "c.py").write_text('README "Elsewhere"\n')
    (tmp_path / "tools" / "d.py").write_text('open(os.path.join(root, "README.md"))  # "Not a reference"\n')
    assert missing_sections(str(tmp_path)) == [
        'docs/b.md:1: README "Gone"',
        'tools/a.sh:2: README "Speed"',
        'tools/a.sh:2: README "Remote execution"',
        'tools/a.sh:2: README "Bounds"',
    ]
