"""The Python files of a package, for the type check (//tools/lint:types_test carries each package's)."""

def python_files(name = "python_files"):
    """A filegroup: every .py file of the calling package, its testdata's included.

    A glob, so a file added to the package is checked without a BUILD edit (a new package needs one
    line: this macro, and its target in types_test's data; types_carried_test fails until both are there).

    Args:
      name: the filegroup's name; types_test's data names each package's by the default.
    """
    native.filegroup(
        name = name,
        srcs = native.glob(["**/*.py"]),
        visibility = ["//tools/lint:__pkg__"],
    )
