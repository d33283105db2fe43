"""Server reuse changes no verdict (tests/core/server_reuse.py): the classes run in one pytest session against
the cell's servers, reuse off, reuse on, and reuse on in the reverse order, and every test ends alike (outcome and the
oracle ids that fired). On the fake tier a fourth run takes the fixtures' parked path (servers given back
and taken over as between cells, parked_fake.py); on a GPU (reuse_equivalence_gpu_test) the launcher parks
every given-back server itself, so the reuse runs take that path. The runs with reuse must have lent
servers, or they prove nothing; the classes declaring FRESH_SERVER never borrow. A class that leaves its
server with garbage weights runs first (testdata/): the next class must not inherit them.

Environment (set by the target, tests/sleep_wake/reuse_equivalence/BUILD.bazel): SLEEPWAKE_REUSE_CLASS_FILES, the class
files in their forward order, comma-separated; the fake cell's environment and both goldens;
SLEEPWAKE_REUSE_WALK_SHARDS="FIRST+LAST": of the state walk's shard classes, the first FIRST and the last LAST
only (shards that hand servers on, and shards that probe and end theirs): four runs of every shard grow
with the walk's pairs.
"""

import concurrent.futures
import json
import os
import subprocess
import sys

import pytest

from tests.core import cells, pushes, server_reuse, servers
from tools.matrix import shard_count
from tools.results.testlogs import parse_junit

FILES_ENV = "SLEEPWAKE_REUSE_CLASS_FILES"
WALK_SHARDS_ENV = "SLEEPWAKE_REUSE_WALK_SHARDS"
WALK_FILE = "test_state_walk.py"
PARKED_FAKE = "tests.sleep_wake.fakes.parked_fake"
# The inner runs' own bound: on the fake, about a minute each on a loaded 2-core machine, the fake walk's 31
# shards 197 s there (state_walk_fake_mrv1_eager alone, reuse on); on the H200 a fresh server per class of
# reuse_equivalence_gpu_test's order starts in 15-60 s (docs/design.md).
RUN_TIMEOUT_S = 600


def _files() -> list[str]:
    files = [f for f in os.environ.get(FILES_ENV, "").split(",") if f]
    if not files:
        pytest.fail(f"{FILES_ENV} is empty: run this through its Bazel target, which lists the class files")
    picked = os.environ.get(WALK_SHARDS_ENV)
    return [n for f in files for n in (walk_classes(f, picked) if picked and f.endswith(WALK_FILE) else [f])]


def walk_classes(path: str, picked: str) -> list[str]:
    """The node ids of the walk's first and last shard classes that picked ("FIRST+LAST") names, in order."""
    first, _, last = picked.partition("+")
    if not (first.isdigit() and last.isdigit()):
        pytest.fail(f"{WALK_SHARDS_ENV}={picked!r}: say FIRST+LAST, two counts of shards (e.g. 4+3)")
    cell = cells.cell_from_env()
    shards = shard_count("state_walk", cell.mode, cell.door)
    chosen = sorted(set(range(min(int(first), shards))) | set(range(max(0, shards - int(last)), shards)))
    return [f"{path}::TestStateWalkShard{i}" for i in chosen]


def _run(name: str, files: list[str], reuse_on: bool, server_module: str | None = None) -> tuple[dict, list[dict]]:
    """({test id: (outcome, oracle ids)}, the run's measurement records) of one inner pytest session;
    server_module: another SLEEPWAKE_SERVER_MODULE than the fake tier's."""
    outputs = os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", os.path.abspath("reuse-outputs")), name)
    os.makedirs(outputs, exist_ok=True)
    junit = os.path.join(outputs, "junit.xml")
    env = dict(os.environ, TEST_UNDECLARED_OUTPUTS_DIR=outputs, **{server_reuse.ENV: "1" if reuse_on else "0"})
    if server_module:
        env[servers.SERVER_MODULE_ENV] = server_module
    for key in ("PYTEST_ADDOPTS", "TESTBRIDGE_TEST_ONLY", "XML_OUTPUT_FILE", "TEST_PREMATURE_EXIT_FILE"):
        env.pop(key, None)
    tmp = os.environ.get("TEST_TMPDIR") or os.path.abspath("reuse-tmp")
    cmd = [sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", "-q", "-p", "no:randomly"]
    cmd += [f"--junitxml={junit}", "-o", "junit_family=xunit2", f"--rootdir={os.getcwd()}"]
    cmd += ["--basetemp=" + os.path.join(tmp, name)]
    # weight_sync's native push way needs a server started with vLLM's weight-transfer backend, which these
    # servers are not: its cases would be skipped in every run and compare nothing.
    cmd += ["-k", f"not {pushes.NATIVE}"]
    with open(os.path.join(outputs, "pytest.log"), "w", encoding="utf-8") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S, check=False)
    if not os.path.exists(junit):
        pytest.fail(f"run {name} wrote no JUnit report; see {outputs}/pytest.log")
    ends = {c.test_id: (c.outcome, tuple(c.oracles)) for c in parse_junit(junit)}
    records = []
    path = os.path.join(outputs, "measurements.jsonl")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
    return ends, records


def _count(records: list[dict], key: str, **match) -> int:
    return sum(r.get("key") == key and all(r.get(k) == v for k, v in match.items()) for r in records)


def _on_fake() -> bool:
    """Whether the cell's servers are the fake's: the launcher's own servers are parked by the launcher
    when given back (tools/launcher/parking.py), so on a GPU the reuse runs take over parked servers
    already, and only the fake needs parked_fake.py to play that path."""
    return os.environ.get(servers.SERVER_MODULE_ENV, servers.DEFAULT_SERVER_MODULE) != servers.DEFAULT_SERVER_MODULE


def _run_all(specs: list[tuple]) -> list[tuple[dict, list[dict]]]:
    """_run of each spec, in order. On the fake the runs share nothing (each its own servers, outputs and
    parked fakes), so they run side by side on the cores this test has; on a GPU one after another, since the
    launcher parks every given-back server for any later start, and one run would take over another's."""
    if not _on_fake():
        return [_run(*spec) for spec in specs]
    with concurrent.futures.ThreadPoolExecutor(min(len(specs), len(os.sched_getaffinity(0)))) as pool:
        return list(pool.map(lambda spec: _run(*spec), specs))


def test_reuse_in_either_order_ends_every_test_as_fresh_servers_do():
    files = _files()
    specs: list[tuple] = [
        ("fresh", files, False),
        ("reuse", files, True),
        ("reuse-reversed", list(reversed(files)), True),
    ]
    if _on_fake():
        # The fixtures' parked path, as between cells: servers given back with their readings as JSON and
        # taken over at a start (parked_fake.py plays the launcher's parking within the process).
        specs.append(("parked", files, True, PARKED_FAKE))
    ended: dict[str, tuple[dict, list[dict]]] = dict(zip([spec[0] for spec in specs], _run_all(specs)))
    alone, fresh_records = ended.pop("fresh")
    runs = [(name, ends, records) for name, (ends, records) in ended.items()]
    # On a GPU the launcher's parking itself, which the reuse runs take.
    parked_records = ended.get("parked", ended["reuse"])[1]
    assert alone and all(outcome == "passed" for outcome, _ in alone.values()), (
        f"with fresh servers some tests did not pass, so equal verdicts would prove little: {alone}"
    )
    for name, ends, _ in runs:
        differ = {t: (alone.get(t), ends.get(t)) for t in set(alone) | set(ends) if alone.get(t) != ends.get(t)}
        assert not differ, f"run {name}: tests that ended otherwise than on fresh servers: {differ}"
    assert _count(fresh_records, "server_reuse") == 0
    taken_over = _count(parked_records, "server_reuse", lent=True, source="another test process")
    assert taken_over >= 2, f"the parked path took over {taken_over} given-back servers: it proves nothing"
    assert _count(parked_records, "server_timings", given_back=True) >= taken_over
    for name, _, records in runs:
        lent = _count(records, "server_reuse", lent=True)
        starts = _count(records, "server_start_s")
        assert lent >= 2, f"run {name} lent {lent} servers: reuse did not happen, so this run proves nothing"
        assert starts < _count(fresh_records, "server_start_s"), f"run {name}: {starts} starts, no fewer than fresh"
