"""A pytest plugin for mutant_test.py's inner runs: keep one shard (SLEEPWAKE_MUTANT_SHARD="i/n") of the
classes, split exactly as pytest_main splits a matrix cell's (ShardPlugin), so that a mutant's walk
shards run side by side as the matrix runs them instead of one after another (eight servers in turn
made one walk mutant that survived, or its control, take longer than the rest of the mutants together)."""

import os

from tools.pytest_bridge.pytest_bazel_plugin import ShardPlugin

ENV = "SLEEPWAKE_MUTANT_SHARD"


def parse(value: str) -> tuple[int, int]:
    """ "i/n" -> (i, n); raises ValueError saying what is wrong."""
    try:
        index, total = (int(x) for x in value.split("/"))
    except ValueError:
        raise ValueError(f"{ENV}={value!r} is not INDEX/TOTAL (e.g. 3/8)") from None
    if not 0 <= index < total:
        raise ValueError(f"{ENV}={value!r}: the index must be in 0..TOTAL-1")
    return index, total


def pytest_configure(config):
    value = os.environ.get(ENV, "")
    if value:
        config.pluginmanager.register(ShardPlugin(*parse(value)), "sleepwake-mutant-shard")
