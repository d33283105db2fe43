"""The walk shards the engine catalogue names for its walk mutants (read from whole walks under each mutant) each
reach the mutant's patch in the engine walk's plan (tests/core/walk/patch_reach.py): a plan that changes so that
a named shard no longer reaches it fails here, not as a mutant that survives its shards."""

import ast
import os
import re

from tests.core.walk import patch_reach, plan
from tests.engine.mutants import catalogue

WALK_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test_state_walk.py")
SHARD = re.compile(r"test_state_walk\.py::test_walk_visits_every_pair_of_its_shard\[shard(\d+)\]$")


def _engine_shards() -> int:
    """The engine walk's SHARDS, read from its file (importing it would need the engine tier's vLLM)."""
    with open(WALK_FILE, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SHARDS"]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{WALK_FILE} defines no SHARDS")


def named_shards() -> dict[str, list[int]]:
    """{mutant: the walk shards its catalogue entry names} for the engine catalogue's walk mutants."""
    out = {}
    for name, mutant in catalogue.MUTANTS.items():
        shards = [int(m.group(1)) for m in map(SHARD.search, mutant.kills) if m]
        if shards:
            out[name] = shards
    return out


def test_every_named_shard_reaches_its_mutants_patch():
    named = named_shards()
    assert named, "the engine catalogue names no walk shard: the pattern no longer matches its kills' keys"
    walks = plan.cell_walks(plan.SEED, _engine_shards())
    missing = [name for name in named if name not in patch_reach.REACHES]
    assert not missing, f"walk mutants without the steps their patch departs in (patch_reach.REACHES): {missing}"
    astray = {name: [s for s in shards if s not in patch_reach.reaching(name, walks)] for name, shards in named.items()}
    astray = {name: shards for name, shards in astray.items() if shards}
    assert not astray, (
        f"shards the engine catalogue names that no longer reach their mutant's patch: {astray}; read the killing "
        "shards anew from a whole engine walk under each mutant (tests/engine/mutants/catalogue.py)"
    )
