"""The client against each supported vLLM release's response bodies (release_responses.py), replayed by
a local HTTP server: shape differences are read alike, behaviour differences stay errors. Also: the
fake serves the same shapes as the release it claims to be."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.core import metrics, oracle
from tests.core.background import generated_tokens
from tests.core.client import ServerResponseError, SleepWakeClient, parse_completion
from tests.sleep_wake.fakes.fake_vllm import FakeVllm
from tests.sleep_wake.fakes.unit import release_responses as rr


class Replay:
    """Answers each (method, path) with a fixed (status, body, content type)."""

    def __init__(self, routes: dict):
        routes = dict(routes)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, method):
                status, body, content_type = routes[(method, self.path.split("?")[0])]
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.client = SleepWakeClient("http://127.0.0.1:%d" % self.httpd.server_address[1], timeout_s=5)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def replay():
    servers = []

    def make(routes):
        servers.append(
            Replay(
                {
                    k: (
                        v[0],
                        v[1] if isinstance(v[1], bytes) else v[1].encode(),
                        v[2] if len(v) > 2 else "application/json",
                    )
                    for k, v in routes.items()
                }
            )
        )
        return servers[-1].client

    yield make
    for s in servers:
        s.close()


# --- shape differences: read alike -------------------------------------------------------------


@pytest.mark.parametrize("version", rr.RELEASES)
def test_reset_prefix_cache_success_or_unreported(replay, version):
    client = replay({("POST", "/reset_prefix_cache"): (200, rr.RESET_PREFIX_CACHE[version])})
    assert client.reset_prefix_cache() is (None if version in ("0.24.0", "0.25.0") else True)


@pytest.mark.parametrize("version", rr.RELEASES)
def test_completion_reads_the_same_in_every_release(replay, version):
    client = replay({("POST", "/v1/completions"): (200, json.dumps(rr.COMPLETION[version]))})
    c = client.complete("twenty words", max_tokens=2, logprobs=1)
    assert c.token_ids == [[11, 11]] and c.logprobs == [[-0.25, -0.5]]
    assert c.finish_reasons == ["length"] and c.cached_tokens == 16


def test_cached_tokens_absent_is_none_and_zero_is_zero():
    assert parse_completion(rr.COMPLETION_WITHOUT_DETAILS).cached_tokens is None
    zero = json.loads(json.dumps(rr.COMPLETION["0.26.0"]))
    zero["usage"]["prompt_tokens_details"]["cached_tokens"] = 0
    assert parse_completion(zero).cached_tokens == 0
    del zero["usage"]
    assert parse_completion(zero).cached_tokens is None


def test_stream_reads_token_ids_and_finish(replay):
    client = replay({("POST", "/v1/completions"): (200, rr.STREAM, "text/event-stream")})
    s = client.complete_stream("twenty words", max_tokens=2)
    assert s.error is None and s.token_ids == [[11, 11]] and s.finish_reasons == ["length"]


@pytest.mark.parametrize("version", rr.RELEASES)
def test_identical_endpoints(replay, version):
    client = replay(
        {
            ("GET", "/is_sleeping"): (200, rr.IS_SLEEPING),
            ("POST", "/collective_rpc"): (200, rr.COLLECTIVE_RPC_RELOAD),
            ("GET", "/load"): (200, rr.LOAD),
            ("GET", "/version"): (200, rr.VERSION[version]),
            ("GET", "/metrics"): (200, rr.METRICS, "text/plain; version=0.0.4; charset=utf-8"),
            ("POST", "/sleep"): (200, b""),
            ("POST", "/wake_up"): (200, b""),
            ("GET", "/health"): (200, b""),
        }
    )
    assert client.is_sleeping() is True and client.load() == 1 and client.version() == version
    assert client.reload_weights() == {"results": [None]}
    assert client.sleep_state() == metrics.GAUGE_LEVEL1 and generated_tokens(client) == 4096.0
    assert client.sleep(level=1).status_code == 200 and client.wake_up().status_code == 200
    assert client.health()


def test_collective_rpc_empty_body_is_no_results(replay):
    client = replay({("POST", "/collective_rpc"): (200, b"")})
    assert client.reload_weights() == {}


def test_invalid_level_is_400(replay):
    # A live server (GET /health 200): its error answer is the oracle's to judge (tests/core/liveness.py).
    client = replay({("POST", "/sleep"): (400, rr.SLEEP_LEVEL_NOT_INTEGER), ("GET", "/health"): (200, b"")})
    with pytest.raises(oracle.OracleFailure, match="HTTP 400.*invalid literal") as e:
        client.sleep(level="abc")
    assert e.value.oracle_id == "api.status"


# --- behaviour differences: errors whatever the release -----------------------------------------


def test_reset_prefix_cache_refused_fails_its_oracle(replay):
    client = replay({("POST", "/reset_prefix_cache"): (200, rr.RESET_PREFIX_CACHE_BUSY_0_26_0)})
    with pytest.raises(oracle.OracleFailure) as e:
        client.reset_prefix_cache()
    assert e.value.oracle_id == "api.reset_prefix_cache_result" and e.value.measured is False


@pytest.mark.parametrize(
    "body,match",
    [
        (b"{}", "expected"),
        (b'{"success":"yes"}', "expected"),
        (b"OK", "not JSON"),
    ],
)
def test_reset_prefix_cache_failures(replay, body, match):
    client = replay({("POST", "/reset_prefix_cache"): (200, body)})
    with pytest.raises(ServerResponseError, match=match):
        client.reset_prefix_cache()


@pytest.mark.parametrize("body", [b'{"is_sleeping":"true"}', b'{"sleeping":true}', b"", b"[true]"])
def test_is_sleeping_must_be_a_bool(replay, body):
    client = replay({("GET", "/is_sleeping"): (200, body)})
    with pytest.raises(ServerResponseError):
        client.is_sleeping()


def test_missing_sleep_gauge_is_an_error(replay):
    without = "\n".join(line for line in rr.METRICS.splitlines() if "engine_sleep_state" not in line)
    client = replay({("GET", "/metrics"): (200, without, "text/plain")})
    with pytest.raises(ValueError, match="vllm:engine_sleep_state not found"):
        client.sleep_state()


def test_completion_without_token_ids_is_an_error():
    body = json.loads(json.dumps(rr.COMPLETION["0.24.0"]))
    del body["choices"][0]["token_ids"]
    with pytest.raises(ServerResponseError, match="return_token_ids"):
        parse_completion(body)


def test_stream_chunk_without_token_ids_is_an_error(replay):
    client = replay(
        {("POST", "/v1/completions"): (200, rr.STREAM.replace(',"token_ids":[11]', ""), "text/event-stream")}
    )
    assert "without token_ids" in client.complete_stream("twenty words", max_tokens=2).error


@pytest.mark.parametrize("body", [b"", b'{"version":null}', b'{"v":"0.26.0"}'])
def test_version_must_be_a_string(replay, body):
    client = replay({("GET", "/version"): (200, body)})
    with pytest.raises(ServerResponseError):
        client.version()


# --- the fake serves the shapes of the release it claims ------------------------------------------


def _shape(value):
    """Keys all the way down (list items by their first element), values dropped; top_logprobs maps
    token text, which differs by model, to a logprob."""
    if isinstance(value, dict):
        return {k: "token -> logprob" if k == "top_logprobs" else _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__ if value is None else "value"


@pytest.mark.parametrize("version", rr.RELEASES)
def test_the_fake_serves_the_releases_shapes(version):
    with FakeVllm(version=version) as fake:
        client = SleepWakeClient(fake.url, timeout_s=5)
        assert client.version() == version
        raw = client.raw("POST", "/v1/completions", json=client.completion_body("a b", 2, logprobs=1)).json()
        assert _shape(raw) == _shape(rr.COMPLETION[version])
        assert client.raw("POST", "/reset_prefix_cache").content.replace(b" ", b"") == rr.RESET_PREFIX_CACHE[version]
