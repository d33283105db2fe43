"""buildifier's format of every BUILD, .bzl and WORKSPACE file of the checkout."""

from tools.lint import buildifier, checkout


def test_every_file_is_formatted():
    root = checkout.root(buildifier.CONFIG)
    unformatted = [f["filename"] for f in buildifier.report(root) if not f["formatted"]]
    assert not unformatted, f"buildifier would reformat these (run `buildifier -r .` in {root}): {unformatted}"


def test_the_check_fails_on_a_planted_file(tmp_path):
    # The check must be able to fail: a BUILD file buildifier would reformat.
    root = checkout.root(buildifier.CONFIG)
    (tmp_path / "BUILD.bazel").write_text('py_library(name="a")\n')
    assert [f["formatted"] for f in buildifier.report(root, str(tmp_path / "BUILD.bazel"))] == [False]
