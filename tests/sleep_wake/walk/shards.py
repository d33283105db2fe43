"""Which shards of a walk cell make a terminal probe (plan.terminal_probes), and so end their servers.

A probe ends its server's usable life, so it never gives the server back (tests/core/server_reuse.py
ENDS_SERVER). The probes go to a cell's last shards, one each: where Bazel runs a cell's shards in their
order, the shards before them give their servers on, and each probe ends a server that served walks first.
"""

from __future__ import annotations

from tests.core.walk import plan


def probes_of(shard: int, shards: int, door: str) -> list:
    """The terminal probes shard `shard` of `shards` makes after its walks: one for each of the last shards."""
    probes = plan.terminal_probes(door)
    first = shards - len(probes)
    return probes[shard - first : shard - first + 1] if shard >= first else []


def ends_server(shard: int, shards: int, door: str) -> bool:
    return bool(probes_of(shard, shards, door))
