"""buildifier's lint of every BUILD, .bzl and WORKSPACE file of the checkout, with .buildifier.json's
warnings: every default one but native-* (the tree calls Bazel's native rules on purpose: Debian's
Bazel 4.2.3 offline, no rules_python; third_party's rules_cc and rules_java are stubs that wrap them)."""

from tools.lint import buildifier, checkout

# (file, warning) that other changes of issue 39 are rewriting now; these go once they land.
EXEMPT = {("tests/mutants/defs.bzl", "function-docstring-args")}


def _warnings(files: list[dict]) -> list[str]:
    return [
        f"{f['filename']}:{w['start']['line']}: {w['category']}: {w['message'].splitlines()[0]}"
        for f in files
        for w in f["warnings"]
        if (f["filename"], w["category"]) not in EXEMPT
    ]


def test_no_file_has_a_lint_warning():
    root = checkout.root(buildifier.CONFIG)
    files = buildifier.report(root)
    assert files and all(f["valid"] for f in files), [f["filename"] for f in files if not f["valid"]]
    assert not _warnings(files), "\n".join(_warnings(files))


def test_the_lint_fails_on_a_planted_warning(tmp_path):
    # The check must be able to fail: a load whose symbol is unused, with the tree's config.
    root = checkout.root(buildifier.CONFIG)
    (tmp_path / "BUILD.bazel").write_text('load(":defs.bzl", "unused")\n')
    files = buildifier.report(root, str(tmp_path / "BUILD.bazel"))
    assert [w.split(": ")[1] for w in _warnings(files)] == ["load"], files
