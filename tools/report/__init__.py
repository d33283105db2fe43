"""The HTML report of a matrix run: `bazel run //tools/report` or `python3 -m tools.report` (cli.py)."""
