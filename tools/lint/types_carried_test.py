"""types_test checks its runfiles, which hold what its data names, while mypy.ini names folders of the
checkout: a file mypy.ini names that types_test's data leaves out would go unchecked under Bazel, and
fail only a `mypy` run at the root. So this test lists, from the checkout, every file mypy.ini names (its
files, less what its exclude matches, as mypy reads them) and finds each in types_test's runfiles, which
are this test's (its data: //tools/lint:types_test)."""

import configparser
import glob
import os
import re

from tools.lint import checkout


def named_files(root: str) -> list[str]:
    """The files, relative to root, that root's mypy.ini has mypy check."""
    config = configparser.ConfigParser()
    config.read(os.path.join(root, "mypy.ini"))
    exclude = re.compile(config["mypy"].get("exclude", "(?!)"))
    named = []
    for entry in (e.strip() for e in config["mypy"]["files"].split(",")):
        if entry.endswith(".py"):
            named.append(entry)
        elif entry:
            found = glob.glob(os.path.join(root, entry, "**", "*.py"), recursive=True)
            named += sorted(os.path.relpath(path, root) for path in found)
    return [path for path in named if not exclude.search(path)]


def uncarried(root: str, runfiles: str) -> list[str]:
    return [path for path in named_files(root) if not os.path.exists(os.path.join(runfiles, path))]


def test_types_test_carries_every_file_mypy_ini_names():
    root = checkout.root("mypy.ini")
    missing = uncarried(root, os.getcwd())  # the runfiles' root: this test's, which hold types_test's
    assert not missing, (
        f"mypy.ini names {missing[:10]} but //tools/lint:types_test does not carry them: add their library"
        " (or the file, exported) to its data in tools/lint/BUILD.bazel"
    )


def test_a_file_the_runfiles_lack_is_named(tmp_path):
    # The check must be able to fail: a checkout whose mypy.ini names a file no runfiles hold.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "kept.py").write_text("")
    (tmp_path / "pkg" / "kept_test.py").write_text("")
    (tmp_path / "mypy.ini").write_text("[mypy]\nfiles =\n    pkg,\nexclude = _test\\.py$\n")
    assert uncarried(str(tmp_path), str(tmp_path / "runfiles")) == ["pkg/kept.py"]
