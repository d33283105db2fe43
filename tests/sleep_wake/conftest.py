"""Fixtures of the sleep/wake suite: the matrix cell, one vLLM server per test class, its golden output.

The cell is read from the environment once per test process (tests/core/cells.py: the launcher's own
ServerConfig.from_env), and every server of the cell starts from a copy of that configuration.
The server class comes from the module named by SLEEPWAKE_SERVER_MODULE (default tools.launcher.server,
tests/core/servers.py): the fake tier names tests.sleep_wake.fakes.fake_server there; both implement the
interface the fixtures use (tools/launcher/interface.py). The launcher's server is imported only when
a server starts, so the CPU unit tests in this package never need vLLM's.
"""

import functools
import os
import re
import time
from collections.abc import Iterator

import pytest
import requests

from tests.core import (
    cells,
    expect,
    liveness,
    measure,
    memory_budget,
    metrics,
    oracle,
    releases,
    server_reuse,
    servers,
    thresholds,
    trainer,
)
from tests.core.client import SleepWakeClient, client_of
from tests.core.oracle import pytest_runtest_makereport  # noqa: F401  oracle ids -> JUnit properties
from tests.core.prompts import PROMPTS
from tools.launcher.config import resolve_model
from tools.launcher.errors import ConfigError
from tools.launcher.interface import Server


@functools.lru_cache(maxsize=1)
def _cell() -> cells.CellSpec | str:
    """The cell of this test process, or why the environment configures none. Its servers declare their
    memory phases from the suite's data (tests/core/memory_budget.py)."""
    try:
        return memory_budget.budgeted(cells.cell_from_env())
    except ConfigError as e:
        return str(e)


def pytest_generate_tests(metafunc):
    """Every test needing the cell (directly or through `server`) gets the id suffix [MRV1-eager]."""
    if "cell" not in metafunc.fixturenames:
        return
    cell = _cell()
    # Collection still works unconfigured; every test of the cell then fails with the reason.
    ident = "unconfigured" if isinstance(cell, str) else cell.id
    metafunc.parametrize("cell", [cell], ids=[ident], indirect=True, scope="session")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "door_needs(capability): the test needs what an in-process door may lack (tools/launcher/door_host.py"
        " CANNOT); on a door that declares it cannot, the test is skipped with the door's reason",
    )
    config.addinivalue_line(
        "markers",
        "through_door(*doors): the test reproduces a framework that holds one of these front doors (tools/matrix.bzl"
        " FRONT_DOORS); it runs in their cells only and is deselected in every other cell",
    )


def pytest_collection_modifyitems(config, items):
    """A test that needs what the cell's front door declares it cannot do is skipped, and says why: the
    report shows it per door, and the door's other tests still run. A test of another door's framework
    (through_door) is deselected: it is that door's cells' to run, not a skip of this one."""
    cell = _cell()
    if isinstance(cell, str):
        return
    elsewhere = [i for i in items if any(cell.door not in m.args for m in i.iter_markers("through_door"))]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [i for i in items if i not in elsewhere]
    for item in items:
        for mark in item.iter_markers("door_needs"):
            why = cells.door_cannot(cell, *mark.args)
            if why:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def cell(request) -> cells.CellSpec:
    if isinstance(request.param, str):
        pytest.fail(request.param)
    return request.param


@pytest.fixture(scope="session")
def recorder() -> measure.Recorder:
    cell = _cell()
    return measure.Recorder(cell_id=None if isinstance(cell, str) else cell.id)


def _log_dir(name: str) -> str:
    path = os.path.join(measure.outputs_dir(), re.sub(r"[^A-Za-z0-9_.-]+", "_", name))
    os.makedirs(path, exist_ok=True)
    return path


def _server_class():
    try:
        return servers.server_class()
    except servers.ServerModuleError as e:
        pytest.fail(str(e), pytrace=False)


def _start_server(name: str, cell: cells.CellSpec, recorder, nodeid: str, claim: bool = False) -> tuple[Server, Server]:
    """A started server's context (caller exits it) and the server, with its start-up time recorded;
    with claim, one another test process gave back, when one of this configuration waits parked
    (server.borrowed then says so, and the caller judges its reset)."""
    VllmServer = _server_class()
    config = cell.server_config(_log_dir(name))
    config.health_poll_s = thresholds.get("health_poll_s")
    config.claim = claim
    context = VllmServer(config, lease=True)
    start, start_cpu = time.monotonic(), time.process_time()
    server = context.__enter__()
    seconds = time.monotonic() - start
    _LAUNCHER_CPU_S.append(time.process_time() - start_cpu)
    identity = servers.identity()
    try:
        served = SleepWakeClient(server.url, timeout_s=thresholds.get("request_completion_s_max")).version()
        releases.check_served(served, identity)
    except BaseException:
        context.__exit__(None, None, None)
        raise
    # Whether it is still live decides, after an oracle fails, if that failure is a verdict (oracle's hook).
    liveness.watch(server.url, thresholds.get("request_completion_s_max"))
    if server.borrowed is not None:
        return context, server  # no start: _judged records how it was taken over
    # Includes waiting for the GPU lease; the server log has the engine's own timings.
    recorder.record(
        nodeid,
        "server_start_s",
        seconds,
        "s",
        url=server.url,
        command=list(server.command or ()),
        log=server.log_path,
        vllm_identity=identity,
        vllm_version=served,
        start_mode=server.start_mode,
        launcher_cpu_s=round(_LAUNCHER_CPU_S[-1], 3),
    )
    return context, server


# The test process's CPU seconds in each of its servers' starts (the launcher's lease, zygote request and
# /health polls), for test_process_cpu.
_LAUNCHER_CPU_S: list[float] = []


@pytest.fixture(scope="session", autouse=True)
def test_process_cpu(recorder):
    """Records, at the session's end of a cell that started a server, the CPU seconds of this test
    process (imports and collection included) and of its children (its reaped ones, and the trainer image
    with the trainers it forked: tests/core/trainer.py): the tests' own processes
    took a large share of a GPU matrix's host CPU (docs/design.md), and
    tools/bench/bazel_runs says by class where."""
    yield
    if _LAUNCHER_CPU_S:
        t = os.times()
        recorder.record(
            "",
            "test_process_cpu",
            round(t.user + t.system, 3),
            "s",
            children_cpu_s=round(t.children_user + t.children_system + trainer.image_cpu_s(), 3),
            launcher_cpu_s=round(sum(_LAUNCHER_CPU_S), 3),
            servers=len(_LAUNCHER_CPU_S),
        )


def _stop_server(context, server, recorder, nodeid: str) -> None:
    """Stops a server of _start_server and records where its time went (tools/bench splits a slow
    matrix with these), also when the stop itself fails."""
    liveness.unwatch(server.url)
    try:
        context.__exit__(None, None, None)
    finally:
        _record_timings(server, recorder, nodeid)


def _record_timings(server, recorder, nodeid: str, **extra) -> None:
    """Where this test process's time with the server went (at its stop, or when it was given back)."""
    timings = server.timings.as_record()
    recorder.record(
        nodeid,
        "server_timings",
        round(sum(v for k, v in timings.items() if k.endswith("_s")), 3),
        "s",
        start_mode=server.start_mode,
        **extra,
        **timings,
    )


@pytest.fixture(scope="session")
def pool(recorder):
    """The servers classes gave back (tests/core/server_reuse.py; SLEEPWAKE_REUSE_SERVERS=1), stopped at the
    session's end."""
    try:
        lender = server_reuse.Pool(server_reuse.enabled())
    except ValueError as e:
        pytest.fail(str(e), pytrace=False)
    yield lender
    for idle in lender.drain():
        _stop_server(idle.context, idle.server, recorder, "")


def _borrow(request, cell, recorder, pool, key: str) -> server_reuse.Lent | None:
    """An idle server of this configuration, reset and checked (tests/core/server_reuse.py), or None: none idle, or the
    check refused it (then stopped; the class gets a fresh one)."""
    lent = pool.take(key)
    return None if lent is None else _judged(request, cell, recorder, lent, "this test process")


def _judged(request, cell, recorder, lent: server_reuse.Lent, source: str) -> server_reuse.Lent | None:
    """lent once its reset passed the check, the borrowing class's own (LEND_CHECK) included, else None
    (the server stopped)."""
    begin = time.monotonic()
    why = server_reuse.lend(cell, lent, client_of(lent.server), recorder, getattr(request.cls, "LEND_CHECK", None))
    recorder.record(
        request.node.nodeid,
        "server_reuse",
        round(time.monotonic() - begin, 3),
        "s",
        lent=why is None,
        refused=why,
        served=list(lent.classes),
        source=source,
        initial=None if lent.initial is None else str(lent.initial),
    )
    if why is None:
        return lent
    _stop_server(lent.context, lent.server, recorder, request.node.nodeid)
    return None


def _fresh_or_borrowed(request, cell, recorder, lends: bool) -> server_reuse.Lent:
    """With lends, a server another test process gave back (tools/launcher/parking.py) once its reset
    passed the check, else a started one with its fresh readings; without, a started one."""
    nodeid = request.node.nodeid
    context, srv = _start_server(request.node.name, cell, recorder, nodeid, claim=lends)
    if srv.borrowed is not None:
        note = srv.borrowed
        lent = server_reuse.Lent(
            context, srv, server_reuse.Fresh.from_record(note.get("fresh")), list(note.get("classes", ()))
        )
        judged = _judged(request, cell, recorder, lent, "another test process")
        if judged is not None:
            return judged
        context, srv = _start_server(request.node.name, cell, recorder, nodeid)
    fresh = None
    if lends:
        try:
            fresh = server_reuse.read_fresh(cell, srv, client_of(srv), resolve_model(srv.config.model), recorder)
        except BaseException:
            _stop_server(context, srv, recorder, nodeid)
            raise
    return server_reuse.Lent(context, srv, fresh)


def _give_back(request, recorder, pool, key: str, lent: server_reuse.Lent) -> None:
    """To the next test process that asks (parked by the launcher), else to this process's pool."""
    nodeid = request.node.nodeid
    note = {"fresh": lent.fresh.as_record(), "classes": lent.classes} if lent.fresh else None
    liveness.unwatch(lent.server.url)
    if note is not None and lent.server.park(note):
        _record_timings(lent.server, recorder, nodeid, given_back=True)
        return
    liveness.watch(lent.server.url, thresholds.get("request_completion_s_max"))
    displaced = pool.keep(key, lent)
    if displaced is not None:
        _stop_server(displaced.context, displaced.server, recorder, nodeid)


@pytest.fixture(scope="class")
def lent(request, cell, recorder, pool) -> Iterator[server_reuse.Lent]:
    """One vLLM server for the test class, its log under TEST_UNDECLARED_OUTPUTS_DIR/<class>/, with its fresh
    readings when reuse is on; with reuse on, the server a passing class of the same configuration gave
    back, once its reset is checked (the class's own LEND_CHECK too). Given back when every test of the
    class passed, unless the class declares FRESH_SERVER or ENDS_SERVER (tests/core/server_reuse.py)."""
    lends = pool.on and not getattr(request.cls, "FRESH_SERVER", None)
    gives_back = lends and not getattr(request.cls, "ENDS_SERVER", None)
    key = server_reuse.key_of(cell.config)
    taken = _borrow(request, cell, recorder, pool, key) if lends else None
    if taken is None:
        taken = _fresh_or_borrowed(request, cell, recorder, lends)
    taken.classes.append(request.node.name)
    failed_before = request.session.testsfailed
    try:
        yield taken
    finally:
        # Given back only by a class all of whose tests passed: a failure may have left anything behind.
        if gives_back and request.session.testsfailed == failed_before and client_of(taken.server).health():
            taken.initial = None  # the next borrower's check finds its own
            _give_back(request, recorder, pool, key, taken)
        else:
            _stop_server(taken.context, taken.server, recorder, request.node.nodeid)


@pytest.fixture(scope="class")
def server(lent) -> Server:
    return lent.server


@pytest.fixture(scope="class")
def client(server) -> SleepWakeClient:
    return client_of(server)


@pytest.fixture(scope="class")
def golden(client) -> dict:
    """prompt -> Completion (greedy, ignore_eos, GOLDEN_MAX_TOKENS, logprobs=1), taken right after start."""
    return expect.take_golden(client, PROMPTS)


@pytest.fixture(autouse=True)
def awake(request):
    """For tests on the class server: awake and healthy before; if a test leaves it asleep, woken
    fully and its weights reloaded, so one failing test does not cascade. A passing level-2 test does
    its own recovery (wake weights, reload, wake kv_cache): that is what it tests."""
    if "server" not in request.fixturenames:
        yield None
        return
    client = request.getfixturevalue("client")
    if not client.health():
        raise oracle.Precondition(f"server {client.url} is not healthy before the test (see its log)")
    state = client.state()
    if state.is_sleeping or state.gauge != metrics.GAUGE_AWAKE:
        raise oracle.Precondition(
            f"server must be awake before the test: is_sleeping={state.is_sleeping} gauge={state.gauge}"
        )
    yield client
    try:
        if client.health() and client.is_sleeping():
            # The test failed mid-way. Reload too: after level 2 a plain wake leaves garbage weights
            # (#29341), which would fail every later golden check for the wrong reason.
            client.wake_everything()
            client.reload_weights()
    except (oracle.OracleFailure, liveness.Errored, requests.RequestException):
        # The test has failed already (its own oracle is its verdict); a server this broken fails the
        # next test's precondition above, not this test's teardown.
        pass
