"""SleepWakeClient against FakeVllm, a local HTTP server with vLLM's sleep semantics (0.26.0's shapes)."""

import concurrent.futures
import contextlib
import socket
import time

import pytest
import requests

from tests.core import liveness, measure, metrics, oracle
from tests.core.background import CAUGHT, LOST, race_outcome
from tests.core.client import ServerResponseError, SleepWakeClient, parse_completion
from tests.core.prompts import GOLDEN_MAX_TOKENS, PROMPTS
from tests.core.pushes import LOAD_TENSORS
from tests.sleep_wake.fakes.fake_vllm import FakeVllm
from tools.launcher.gpu_lease import ALLOCATE, EXCLUSIVE, FREE, RELEASE


@pytest.fixture
def fake():
    with FakeVllm() as f:
        yield f


@pytest.fixture
def client(fake):
    return SleepWakeClient(fake.url, timeout_s=5)


def last(fake, path):
    return [r for r in fake.requests if r["path"] == path][-1]


def test_sleep_and_wake_build_query(client, fake):
    client.sleep(level=2, mode="wait")
    assert last(fake, "/sleep")["query"] == {"level": ["2"], "mode": ["wait"]}
    client.sleep()
    assert last(fake, "/sleep")["query"] == {"level": ["1"]}
    client.wake_up(["weights", "kv_cache"])
    assert last(fake, "/wake_up")["query"] == {"tags": ["weights", "kv_cache"]}
    client.wake_up()
    assert last(fake, "/wake_up")["query"] == {}


def test_a_proxy_in_the_environment_is_not_used_for_the_server(client, fake, monkeypatch):
    # Nothing listens on port 9: a call routed through this proxy would fail to connect.
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert client.health() and client.is_sleeping() is False
    assert last(fake, "/is_sleeping")


def test_flags_and_gauge(client):
    assert client.is_sleeping() is False and client.sleep_state() == metrics.GAUGE_AWAKE
    client.sleep(level=1)
    state = client.state()
    assert state.is_sleeping and state.gauge == metrics.GAUGE_LEVEL1
    client.wake_up()
    assert not client.is_sleeping()


def test_a_call_taken_and_never_answered_is_no_answer_not_an_oracle():
    # A server that accepts the connection and never answers (the dead engine behind vLLM's API server,
    # or a host too loaded to answer): no oracle's verdict, only the liveness oracle it stands for.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = SleepWakeClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.3)
        with pytest.raises(liveness.NoAnswer, match="no answer within 0.3 s") as e:
            client.sleep(level=1)
    assert e.value.liveness == "api.answers" and not isinstance(e.value, oracle.OracleFailure)
    # Nothing listening is no answer at all: the transport's own error, never an oracle.
    with pytest.raises(requests.ConnectionError):
        client.sleep(level=1)


def test_sleep_check_fails_the_status_oracle(client):
    with pytest.raises(oracle.OracleFailure, match="HTTP 400") as e:
        client.sleep(level="abc")
    assert e.value.oracle_id == "api.status" and e.value.measured.startswith("HTTP 400")
    assert client.sleep(level="abc", check=False).status_code == 400


def test_completion_request_and_parse(client, fake):
    c = client.complete(PROMPTS[0], logprobs=1)
    body = last(fake, "/v1/completions")["body"]
    assert body["return_token_ids"] is True and body["ignore_eos"] is True
    assert body["max_tokens"] == GOLDEN_MAX_TOKENS and body["temperature"] == 0.0
    assert body["logprobs"] == 1 and body["n"] == 1 and body["stream"] is False and "seed" not in body
    assert len(c.token_ids) == 1 and len(c.token_ids[0]) == GOLDEN_MAX_TOKENS
    assert len(c.logprobs[0]) == GOLDEN_MAX_TOKENS and c.finish_reasons == ["length"]
    assert c.cached_tokens == 0
    again = client.complete(PROMPTS[0])
    # Shorter than one KV block: never served from the prefix cache.
    assert again.token_ids == c.token_ids and again.logprobs is None and again.cached_tokens == 0
    long_prompt = " ".join(PROMPTS)
    assert client.complete(long_prompt).cached_tokens == 0
    assert client.complete(long_prompt).cached_tokens == 32  # its two full 16-token blocks


def test_completion_extra_and_sampling(client, fake):
    c = client.complete(PROMPTS[1], max_tokens=4, temperature=1.0, seed=7, n=2, top_p=0.9)
    body = last(fake, "/v1/completions")["body"]
    assert body["seed"] == 7 and body["n"] == 2 and body["top_p"] == 0.9
    assert len(c.token_ids) == 2 and all(len(t) == 4 for t in c.token_ids)


def test_completion_error_raises(client):
    with pytest.raises(oracle.OracleFailure, match="n must be 1") as e:
        client.complete(PROMPTS[0], n=2)
    assert e.value.oracle_id == "api.status"


def test_parse_completion_requires_token_ids():
    with pytest.raises(ServerResponseError, match="return_token_ids"):
        parse_completion({"choices": [{"index": 0, "text": "x"}]})
    with pytest.raises(ServerResponseError, match="malformed"):
        parse_completion({"no": "choices"})


def test_stream_matches_non_stream(client, fake):
    s = client.complete_stream(PROMPTS[2])
    assert s.error is None and not s.timed_out and s.status == 200
    assert s.finish_reasons == ["length"] and s.num_tokens == GOLDEN_MAX_TOKENS
    assert s.token_ids == client.complete(PROMPTS[2]).token_ids
    assert last(fake, "/v1/completions")["body"]["stream"] is False
    stream_body = [r for r in fake.requests if r["path"] == "/v1/completions"][0]["body"]
    assert stream_body["stream"] is True and stream_body["stream_options"] == {"include_usage": True}


def test_stream_reports_http_error(client):
    s = client.complete_stream(PROMPTS[0], n=2)
    assert s.status == 400 and "n must be 1" in s.error


def test_load_reload_reset_health(client, fake):
    assert client.load() == 0
    client.sleep(level=2)
    client.wake_up(["weights"])
    assert client.reload_weights() == {"results": [None]}
    assert last(fake, "/collective_rpc")["body"] == {"method": "reload_weights"}
    client.wake_up(["kv_cache"])
    assert client.reset_prefix_cache() is True
    assert client.health()


def test_worker_level_sleep_and_wake_through_collective_rpc(client, fake):
    assert client.worker_sleep(2) == [None]
    assert last(fake, "/collective_rpc")["body"] == {"method": "sleep", "kwargs": {"level": 2}}
    assert client.is_sleeping() is False and fake.engine.unmapped == {"weights", "kv_cache"}
    assert client.worker_wake_up(["weights"]) == [None]
    for tags in (["weights"], None):  # a pool named that is resident already: cuMemMap refuses, nothing mapped
        again = client.raw("POST", "/collective_rpc", json={"method": "wake_up", "kwargs": {"tags": tags}})
        assert again.status_code == 500 and "mapped already" in again.text
    assert fake.engine.unmapped == {"kv_cache"}
    client.worker_wake_up(["kv_cache"])
    assert fake.engine.unmapped == set()


def test_pause_resume_and_is_paused(client, fake):
    assert client.pause(mode="keep", clear_cache=False) == {"status": "paused"}
    assert last(fake, "/pause")["query"] == {"mode": ["keep"], "clear_cache": ["false"]}
    assert client.is_paused() is True and client.is_sleeping() is True
    assert client.resume() == {"status": "resumed"}
    assert client.is_paused() is False
    assert client.raw("POST", "/pause", params={"mode": "drop"}).status_code == 422  # FastAPI's Literal check
    assert client.raw("POST", "/pause", params={"clear_cache": "maybe"}).status_code == 422
    assert client.is_paused() is False
    reset = client.raw("POST", "/reset_prefix_cache", params={"reset_running_requests": "true"})
    assert reset.json() == {"success": True}


def test_health_false_when_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert SleepWakeClient(f"http://127.0.0.1:{port}", timeout_s=1).health() is False


def test_hung_server_times_out_as_no_answer(fake):
    fake.hang_paths.add("/is_sleeping")
    client = SleepWakeClient(fake.url, timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(liveness.NoAnswer) as e:
        client.is_sleeping()
    assert e.value.liveness == "api.answers" and time.monotonic() - start < 3


def test_hung_stream_reports_timeout(fake):
    fake.hang_paths.add("/v1/completions")
    s = SleepWakeClient(fake.url, timeout_s=0.3).complete_stream(PROMPTS[0])
    assert s.timed_out and "timeout" in (s.error or "")


def test_raw_passes_through(client):
    resp = client.raw("POST", "/collective_rpc", json={})
    assert resp.status_code == 400
    assert client.raw("GET", "/no_such_path").status_code == 404


def test_stream_aborted_by_sleep_reports_abort(fake, client):
    fake.engine.token_delay_s = 0.01
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream = pool.submit(client.complete_stream, PROMPTS[0], max_tokens=500)
        measure.wait_until(lambda: fake.engine.generated_tokens > 0, 5, what="decode to start")
        client.sleep(level=1)
        result = stream.result(timeout=10)
    assert result.error is None and result.finish_reasons == ["abort"]
    assert 0 < result.num_tokens < 500


def test_a_calls_own_seconds_leave_out_its_wait_for_the_memory_phase(fake):
    """The latency oracles read last_call_s: what the server took, not the queue behind GPU neighbours."""
    wait_s = 0.3

    @contextlib.contextmanager
    def slow_phase(kind, what):
        time.sleep(wait_s)  # stands in for neighbours holding the other kind
        yield wait_s

    client = SleepWakeClient(fake.url, timeout_s=5, memory_phase=slow_phase)
    for call in (lambda: client.sleep(level=1), client.wake_up):
        _, total_s = measure.timed(call)
        call_s = client.last_call_s
        assert call_s is not None and total_s >= wait_s and 0 < call_s < wait_s
        assert call_s <= total_s - wait_s


@pytest.mark.parametrize("seen,expected", [((False, False), False), ((True, False), True), ((False, True), True)])
def test_a_call_is_beside_a_start_step_when_one_was_inside_as_it_began_or_ended(fake, seen, expected):
    """Start steps last seconds against a call's fraction of one: looking at both ends catches one that
    began during the call and one that ended during it."""
    answers = iter(seen * 2)
    client = SleepWakeClient(fake.url, timeout_s=5, start_step_beside=lambda: next(answers))
    client.sleep(level=1)
    assert client.last_call_beside_start is expected
    client.wake_up()
    assert client.last_call_beside_start is expected


def test_a_client_of_a_server_without_neighbours_is_never_beside_a_start_step(fake):
    client = SleepWakeClient(fake.url, timeout_s=5)
    client.wake_up()
    assert client.last_call_beside_start is False


def test_each_call_takes_the_memory_phase_of_what_it_does_to_device_memory(fake):
    """Sleeps that unmap only free (FREE), wakes and reloads allocate (ALLOCATE), a level-0 pause and a
    sleep that moves nothing take none; a window holds its kind once for everything inside it, and
    refuses an allocation inside a FREE one (it could land in a neighbour's sleep)."""
    taken, whats = [], []

    @contextlib.contextmanager
    def phase(kind, what):
        taken.append(kind)
        whats.append(what)  # the call's name in the GPU's phase trace
        yield 0.0

    client = SleepWakeClient(fake.url, timeout_s=5, memory_phase=phase)
    client.sleep(level=0)
    client.wake_up()
    client.sleep(level=1)
    client.sleep(level=1, memory_moves=False)
    client.wake_up(["weights"])
    client.wake_up(["kv_cache"])
    client.reload_weights()
    client.wake_up(["weights"], memory_moves=False)
    assert taken == [ALLOCATE, FREE, ALLOCATE, ALLOCATE, ALLOCATE]
    assert whats == ["wake", "sleep", "wake", "wake", "reload"]
    taken.clear()
    with client.sleep_window():
        client.sleep(level=1)
        with pytest.raises(RuntimeError, match="inside a free sleep_window: use sleep_window"):
            client.wake_up()
        with pytest.raises(RuntimeError, match="an exclusive sleep_window inside a FREE one"):
            with client.sleep_window(exclusive=True):
                pass
    assert taken == [FREE]
    with client.sleep_window(exclusive=True):
        client.wake_up()
        client.sleep(level=1)
        client.wake_up()
    assert taken == [FREE, EXCLUSIVE] and whats[-2:] == ["window", "window"]


def test_a_server_that_brackets_its_calls_leaves_the_client_only_its_exclusive_windows(fake):
    """The worker takes each call's phase itself (VllmServer.brackets_calls): a call and a FREE window take
    none here, so a sleep lands at once and no neighbour waits for a drain; an exclusive window is still
    this client's, and covers the calls inside it."""
    taken = []

    @contextlib.contextmanager
    def phase(kind, what):
        taken.append(kind)
        yield 0.0

    client = SleepWakeClient(fake.url, timeout_s=5, memory_phase=phase, phases_in_server=True)
    client.sleep(level=1)
    client.wake_up()
    client.reload_weights()
    with client.sleep_window():
        client.sleep(level=1)
        client.wake_up()  # harmless: the window holds nothing here
    assert taken == []
    with client.sleep_window(exclusive=True):
        client.sleep(level=1)
        client.wake_up()
    assert taken == [EXCLUSIVE]


def test_memory_the_servers_bracket_does_not_see_is_phased_by_the_client(fake):
    """A trainer's tensors, their freeing at its exit and a push into the weights move device memory outside
    the worker's sleeps, wakes and reloads, all that a server's bracket covers (phase_plugin CALLS): the
    client phases them even where the server brackets its calls, or a GPU neighbour's sleep or exclusive
    window meets them unannounced (on a GPU: a trainer's exit read as memory an immediacy sleep freed)."""
    taken = []

    @contextlib.contextmanager
    def phase(kind, what):
        taken.append((kind, what))
        yield 0.0

    client = SleepWakeClient(fake.url, timeout_s=5, memory_phase=phase, phases_in_server=True)
    with client.allocation("trainer"):
        pass
    with pytest.raises(oracle.OracleFailure, match="not an absolute checkpoint"):  # this fake serves none
        client.collective_rpc(LOAD_TENSORS, {"checkpoint": fake.engine.checkpoint.path})
    client.collective_rpc("reload_weights")  # the server brackets these three
    client.worker_sleep(1)
    client.worker_wake_up()
    with client.release("trainer"):
        pass
    assert taken == [(ALLOCATE, "trainer"), (ALLOCATE, "rpc " + LOAD_TENSORS), (RELEASE, "trainer")]


def test_a_stream_records_when_each_of_its_token_events_came(fake, client):
    fake.engine.token_delay_s = 0.002
    begin = time.perf_counter()
    s = client.complete_stream(PROMPTS[0], max_tokens=20)
    assert s.num_tokens == 20 and len(s.arrivals) == 20  # one event a token on the fake, as on vLLM
    assert begin < s.arrivals[0] <= s.arrivals[-1] <= time.perf_counter()
    assert s.arrivals == sorted(s.arrivals)


def test_a_stream_that_finished_before_the_sleep_was_sent_lost_its_race(fake, client):
    """The fake decoding at no delay finishes the stream before /sleep leaves: the sleep met no request in
    flight; one decoding slowly is caught by the abort."""
    fake.engine.token_delay_s = 0.0
    first = client.complete_stream(PROMPTS[0], max_tokens=64)
    sent = time.perf_counter()
    client.sleep(level=1, mode="abort")
    assert race_outcome(first, sent, 64)[0] == LOST
    client.wake_up()
    fake.engine.token_delay_s = 0.01
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream = pool.submit(client.complete_stream, PROMPTS[0], max_tokens=500)
        measure.wait_until(lambda: fake.engine.generated_tokens > 0, 5, what="decode to start")
        sent = time.perf_counter()
        client.sleep(level=1, mode="abort")
        assert race_outcome(stream.result(timeout=10), sent, 500)[0] == CAUGHT


def test_a_waiting_stream_whose_client_goes_away_is_aborted_and_never_runs(client, fake):
    """vLLM's server aborts a request whose client went away while it waited (operations.CANCEL_QUEUED):
    /load lets go of it, the scheduler's queue no longer holds it, and the wake runs nothing of it."""
    client.sleep(level=0, mode="keep")
    body = client.completion_body(PROMPTS[0], GOLDEN_MAX_TOKENS, 0.0, True, None, None, 1, stream=True)
    with client.raw("POST", "/v1/completions", json=body, stream=True) as response:
        assert response.status_code == 200
        measure.wait_until(lambda: client.load() == 1, 5, what="the stream accepted")
    measure.wait_until(lambda: client.load() == 0 and not fake.engine.waiting, 5, what="the stream let go")
    client.wake_up()
    assert fake.engine.generated_tokens == 0 and fake.engine.running == 0
