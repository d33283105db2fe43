"""vLLM's own /sleep, /wake_up and /is_sleeping routes, over HTTP, against the real engine core.

The routes come from vllm/entrypoints/serve/dev/sleep/api_router.py (what VLLM_SERVER_DEV_MODE=1
mounts), on lib/engine_server.py's EngineServer: app.state.engine_client is a QueueEngineClient,
standing for AsyncLLM's sleep/wake_up/is_sleeping; the engine is an EngineCoreProc whose real busy
loop runs in a thread.
Tags travel as repeated query parameters (?tags=weights&tags=kv_cache), as RL frameworks send them.
"""

import dataclasses

import pytest

from tests.engine.lib.engine_server import EngineServer
from tests.engine.lib.requests import send
from vllm.v1.engine import FinishReason


@dataclasses.dataclass
class Server:
    """lib/engine_server.py's EngineServer, with calls that must answer 200."""
    engine: EngineServer

    @property
    def http(self):
        return self.engine.http

    @property
    def client(self):
        return self.engine.client

    @property
    def built(self):
        return self.engine.built

    def is_sleeping(self) -> bool:
        response = self.http.get("/is_sleeping")
        assert response.status_code == 200, response.text
        return response.json()["is_sleeping"]

    def post(self, path: str, **params) -> None:
        response = self.http.post(path, params=params)
        assert response.status_code == 200, f"POST {path} {params}: {response.status_code} {response.text}"

    def settle(self) -> None:
        self.engine.settle()


@pytest.fixture
def server(model_dir):
    engine = EngineServer(model_dir)
    try:
        yield Server(engine)
    finally:
        engine.close()


def test_sleep_and_wake_round_trip_over_http(server):
    assert server.is_sleeping() is False
    server.post("/sleep", level=1)
    assert server.is_sleeping() is True
    assert server.built.worker.resident == {"weights": False, "kv_cache": False}
    server.post("/wake_up")
    assert server.is_sleeping() is False
    send(server.built.engine, "after_wake")
    assert server.client.wait_finished("after_wake").finish_reason == FinishReason.LENGTH
    assert [e.kind for e in server.built.timeline.events if e.kind != "output"][:2] == ["sleep", "wake_up"]


def test_partial_wake_over_http_holds_the_request(server):
    server.post("/sleep", level=1)
    server.post("/wake_up", tags="weights")
    # Through HTTP alone the gate is invisible: /is_sleeping reads true with or without #44483.
    assert server.is_sleeping() is True
    send(server.built.engine, "held")
    server.settle()
    assert not server.built.timeline.forwarded("held"), (
        f"the request ran after a weights-only wake (#44483): {server.built.timeline}")
    assert server.client.finished("held") is None
    server.post("/wake_up", tags="kv_cache")
    assert server.client.wait_finished("held").finish_reason == FinishReason.LENGTH
    assert server.is_sleeping() is False


def test_level0_over_http_leaves_memory_resident(server):
    server.post("/sleep", level=0)
    assert server.is_sleeping() is True
    send(server.built.engine, "held")
    server.settle()
    assert server.built.timeline.events == [], f"level 0 reached the worker: {server.built.timeline}"
    server.post("/wake_up", tags="scheduling")
    assert server.client.wait_finished("held").finish_reason == FinishReason.LENGTH
    assert server.is_sleeping() is False
    assert server.built.timeline.of("sleep") == [] and server.built.timeline.of("wake_up") == []


def test_failed_worker_sleep_is_a_500_and_leaves_the_engine_paused(server):
    server.built.worker.fail_next_sleep = "Memory usage increased after sleeping."
    response = server.http.post("/sleep", params={"level": 1})
    assert response.status_code == 500, response.text
    # The route returned an error, but the scheduler stays paused (see test_bookkeeping.py).
    assert server.is_sleeping() is True
    assert server.client.call("is_scheduler_paused") is True
