"""vLLM's own /sleep, /wake_up and /is_sleeping routes, over HTTP, against the real engine core.

The routes come from vllm/entrypoints/serve/dev/sleep/api_router.py (what VLLM_SERVER_DEV_MODE=1
mounts), on lib/engine_server.py's EngineServer: app.state.engine_client is a QueueEngineClient,
standing for AsyncLLM's sleep/wake_up/is_sleeping; the engine is an EngineCoreProc whose real busy
loop runs in a thread.
Tags travel as repeated query parameters (?tags=weights&tags=kv_cache), as RL frameworks send them.
"""

import dataclasses

import pytest

from tests.engine.lib import checks
from tests.engine.lib.engine_server import EngineServer
from tests.engine.lib.engine_requests import send
from tests.core import oracle
from vllm.v1.engine import FinishReason


@dataclasses.dataclass
class Server:
    """lib/engine_server.py's EngineServer, with calls that must answer 200."""

    engine: EngineServer

    @property
    def client(self):
        return self.engine.client

    @property
    def built(self):
        return self.engine.built

    def is_sleeping(self) -> bool:
        response = self.engine.get("/is_sleeping")  # an engine call never answered: liveness.NoAnswer
        oracle.equal("api.status", response.status_code, 200, f"GET /is_sleeping: {response.text[:300]}")
        return response.json()["is_sleeping"]

    def post(self, path: str, **params) -> None:
        response = self.engine.post(path, params=params)  # an engine call never answered: liveness.NoAnswer
        oracle.equal("api.status", response.status_code, 200, f"POST {path} {params}: {response.text[:300]}")

    def settle(self) -> None:
        self.engine.settle()

    def request_state(self, request_id: str) -> tuple:
        """(forward passes, finish reason, the engine's fatal error): what a client and the worker saw of
        a request. settle() returns also when the engine died, so its death is part of the reading."""
        return self.engine.forwards(request_id), self.engine.record.end(request_id), repr(self.engine.alive())


@pytest.fixture
def server(model_dir):
    engine = EngineServer(model_dir)
    try:
        yield Server(engine)
    finally:
        engine.close()


def test_sleep_and_wake_round_trip_over_http(server):
    oracle.equal("flags.is_sleeping", server.is_sleeping(), False, "GET /is_sleeping at start")
    server.post("/sleep", level=1)
    oracle.equal("flags.is_sleeping", server.is_sleeping(), True, "GET /is_sleeping after /sleep?level=1")
    checks.resident(server.built.worker, {"weights", "kv_cache"}, "after /sleep?level=1")
    server.post("/wake_up")
    oracle.equal("flags.is_sleeping", server.is_sleeping(), False, "GET /is_sleeping after /wake_up")
    send(server.built.engine, "after_wake")
    oracle.equal(
        "output.finish_length",
        server.client.wait_finished("after_wake").finish_reason,
        FinishReason.LENGTH,
        "a request after the wake",
    )
    oracle.equal(
        "executor.worker_calls",
        [e.kind for e in server.built.timeline.events if e.kind != "output"][:2],
        ["sleep", "wake_up"],
        f"the worker's first calls; timeline: {server.built.timeline}",
    )


def test_partial_wake_over_http_holds_the_request(server):
    server.post("/sleep", level=1)
    server.post("/wake_up", tags="weights")
    # Through HTTP alone the gate is invisible: /is_sleeping reads true with or without #44483.
    oracle.equal("flags.is_sleeping", server.is_sleeping(), True, "GET /is_sleeping after a weights-only wake")
    send(server.built.engine, "held")
    server.settle()
    # Read at once, with the engine's death in the reading: the fake worker records a forward pass before
    # it raises on the released KV cache, so a scheduled request shows as a pass, whether or not the
    # engine died of it.
    oracle.equal(
        "requests.held_until_resident",
        server.request_state("held"),
        (0, None, "None"),
        f"the request sent after a weights-only wake (#44483): (forward passes, finish reason, engine "
        f"error); timeline: {server.built.timeline}",
    )
    server.post("/wake_up", tags="kv_cache")
    oracle.equal(
        "requests.completes",
        server.client.wait_finished("held").finish_reason,
        FinishReason.LENGTH,
        "the held request after the kv_cache wake",
    )
    # The same reading sees the pass once it ran: the check above could have seen one.
    forwards, _, error = server.request_state("held")
    oracle.equal(
        "requests.completes",
        (forwards > 0, error),
        (True, "None"),
        "the held request after the kv_cache wake: (a forward pass recorded, engine error)",
    )
    oracle.equal("flags.is_sleeping", server.is_sleeping(), False, "GET /is_sleeping after both wakes")


def test_level0_over_http_leaves_memory_resident(server):
    server.post("/sleep", level=0)
    oracle.equal("flags.is_sleeping", server.is_sleeping(), True, "GET /is_sleeping at level 0")
    send(server.built.engine, "held")
    server.settle()
    oracle.equal(
        "requests.held_while_paused",
        server.request_state("held"),
        (0, None, "None"),
        "a request sent at level 0: (forward passes, finish reason, engine error)",
    )
    oracle.equal(
        "executor.worker_calls",
        server.built.timeline.events,
        [],
        f"level 0 reached the worker: {server.built.timeline}",
    )
    server.post("/wake_up", tags="scheduling")
    oracle.equal(
        "requests.completes",
        server.client.wait_finished("held").finish_reason,
        FinishReason.LENGTH,
        "the request held by level 0, after the wake",
    )
    oracle.equal("flags.is_sleeping", server.is_sleeping(), False, "GET /is_sleeping after the level-0 wake")
    checks.worker_calls(server.built.timeline, "sleep", [], "level 0 and its wake")
    checks.worker_calls(server.built.timeline, "wake_up", [], "level 0 and its wake")


def test_failed_worker_sleep_is_a_500_and_leaves_the_engine_paused(server):
    server.built.worker.fail_next_sleep = "Memory usage increased after sleeping."
    response = server.engine.post("/sleep", params={"level": 1})
    oracle.equal("api.status", response.status_code, 500, f"/sleep whose worker fails: {response.text[:300]}")
    # The route returned an error, but the scheduler stays paused (see test_bookkeeping.py).
    oracle.equal(
        "engine.failed_sleep_state",
        (server.is_sleeping(), server.client.call("is_scheduler_paused")),
        (True, True),
        "after the failed sleep: (GET /is_sleeping, scheduler paused)",
    )
