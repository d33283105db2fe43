"""pytest plugins mapping Bazel's test selection onto collected tests: --test_filter and sharding.

tools/pytest_bridge/pytest_session.py registers one FilterPlugin and one ShardPlugin per run and records their
counts, from which tools/pytest_bridge/pytest_main.py tells a legitimately empty selection from a target without tests.
"""

from __future__ import annotations

import re
import sys

import pytest


def assign_groups(sizes: list[int], total: int) -> list[int]:
    """Returns a shard index for each group, giving each group in turn to the currently smallest shard.

    Ties go to the lowest index, so the result depends only on the sizes and their order.
    """
    loads = [0] * total
    shards = []
    for size in sizes:
        shard = loads.index(min(loads))
        loads[shard] += size
        shards.append(shard)
    return shards


def natural_key(node_id: str) -> list:
    """A node id's sort key with its numbers read as numbers: a split class's parts (the walk's
    TestStateWalkShard<k>) then come in their own order, k = 2 before k = 10, so the shards that run a
    split class take its parts in the order the class numbers them (a mutant's inner shard i runs part i)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", node_id)]


def group_of(item: pytest.Item) -> str:
    """The node id of the unit a shard must keep whole: the item's outermost class, else its module."""
    # Class-scoped fixtures (a vLLM server) must start in one shard only; the outermost class because
    # fixtures of an outer class may serve its nested classes. Module-level tests stay with their
    # module for the same reason (module-scoped fixtures).
    for node in item.listchain():
        if isinstance(node, pytest.Class):
            return node.nodeid
    return item.nodeid.split("::", 1)[0]


def id_names(item: pytest.Item) -> list[str]:
    """The names a -k filter is matched against: the test id's classes, function and parameters.

    pytest's own -k also matches every directory, package and module name above the test, so
    `--test_filter=sleep` selected every test under tests/sleep_wake/. A filter names tests, not paths.
    """
    # An item's name carries its parameters (test_x[MRV1-eager]); -k matches substrings of names.
    return [node.name for node in item.listchain() if isinstance(node, (pytest.Class, pytest.Item))]


def _keyword_matcher(text: str):
    """Returns item -> bool evaluating `text` as a -k expression over id_names, or None if it is not one.

    Uses pytest's own -k parser so the filter's grammar is exactly -k's (and, or, not, parentheses,
    case-insensitive substrings). Those names are private (stable since pytest 6); if they move, the
    filter still works as a substring of the test id.
    """
    try:
        from _pytest.mark.expression import Expression  # type: ignore[import-not-found]  # pytest is untyped here
    except ImportError:
        print(
            "pytest_bazel_plugin: this pytest has no _pytest.mark.expression; the test filter is"
            " matched as a substring of test ids only",
            file=sys.stderr,
        )
        return None
    try:
        expression = Expression.compile(text)
    except Exception:  # ParseError or SyntaxError, depending on the pytest version
        return None

    def matches(item: pytest.Item) -> bool:
        names = [name.lower() for name in id_names(item)]

        def matcher(subname: str, /, **kwargs) -> bool:
            # `name(arg=1)` is -m syntax; as a test filter it matches nothing.
            return not kwargs and any(subname.lower() in name for name in names)

        return expression.evaluate(matcher)

    return matches


def short_id(item: pytest.Item) -> str:
    """The node id without its file: `TestGate::test_x[MRV1-eager]`, or `test_a` for a module's test."""
    return item.nodeid.split("::", 1)[-1]


def _keep_only(config: pytest.Config, items: list[pytest.Item], kept: list[pytest.Item]) -> None:
    kept_ids = {id(item) for item in kept}
    dropped = [item for item in items if id(item) not in kept_ids]
    if dropped:
        config.hook.pytest_deselected(items=dropped)  # so the summary says "N deselected"
        items[:] = kept


class FilterPlugin:
    """Applies Bazel's --test_filter, and counts what the target collected before any selection.

    -k alone cannot take a pytest id fragment such as `TestGate::test_x[MRV1-eager]`, so a test is
    kept if the filter is a substring of its test id (its node id with the file too when the filter
    holds `::`, as in `sample.py::TestX`) or if the filter, read as a -k expression over the test id's
    names (id_names), matches it. Directory and module names alone never select a test.
    """

    def __init__(self, text: str):
        self.text = text
        self.is_expression = False  # whether the filter parsed as a -k expression
        self.collected = 0
        self.selected = 0

    @pytest.hookimpl(tryfirst=True)  # see every collected test, before -k/-m given as extra args
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.collected = len(items)
        if self.text:
            matcher = _keyword_matcher(self.text)
            self.is_expression = matcher is not None
            kept = [
                item
                for item in items
                if self.text in (item.nodeid if "::" in self.text else short_id(item))
                or (matcher is not None and matcher(item))
            ]
            _keep_only(config, items, kept)
        self.selected = len(items)


class ShardPlugin:
    """Keeps this shard's test groups (see group_of) of whatever the other selections left."""

    def __init__(self, index: int, total: int):
        self.index = index
        self.total = total
        self.offered = 0
        self.kept = 0

    @pytest.hookimpl(trylast=True)  # after every other selection, so the shards partition what is left
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.offered = len(items)
        if self.total > 1:
            groups: dict[str, list[str]] = {}  # group -> node ids, in collection order
            for item in items:
                groups.setdefault(group_of(item), []).append(item.nodeid)
            ordered = sorted(groups, key=lambda group: natural_key(groups[group][0]))
            shards = assign_groups([len(groups[group]) for group in ordered], self.total)
            mine = {group for group, shard in zip(ordered, shards) if shard == self.index}
            _keep_only(config, items, [item for item in items if group_of(item) in mine])
        self.kept = len(items)

    def pytest_report_collectionfinish(self, items: list[pytest.Item]) -> list[str]:
        if self.total <= 1:
            return []
        return [
            f"pytest_bazel_plugin: shard index {self.index} of {self.total} shards runs"
            f" {self.kept} of {self.offered} selected tests"
        ]
