"""The GPU tier's judgement of a request that must end (an abort's, a wait drain's) or wait: a stream that
went silent past its own read timeout, or broke off, is no answer on any server, never an oracle's
verdict. And its close after a failed step: a request the failure left held ends at once, not at its
client timeout."""

import concurrent.futures
import contextlib
import dataclasses
import threading
import time
import types
from typing import Any

import pytest

from tests.core import liveness, metrics, oracle, thresholds
from tests.core.background import background
from tests.core.client import SleepWakeClient, StreamResult
from tests.core.walk import observations
from tests.sleep_wake.walk import gpu_walk

_AFTER_KEEP = gpu_walk.model.State(level=0, pause=gpu_walk.model.PAUSE_ALL, gauge_level=0)  # a level-0 keep


class _Client:
    """The client's own stream judgement (SleepWakeClient.check_stream) over a server whose liveness
    the test sets."""

    check_stream = SleepWakeClient.check_stream

    def __init__(self, live: bool):
        self.live = live

    def version(self) -> str:
        return "0.26.0"

    def confirm_live(self, what: str, dead_liveness: str = "server.healthy") -> None:
        if not self.live:
            raise liveness.NoAnswer(f"{what}: GET /health: no answer")


def _context(client: Any, server: Any = None, recorder: Any = None, goldens: dict | None = None) -> gpu_walk.Context:
    """A walk's context around the test's stand-ins, passed as Any: each answers only what the steps under
    test call (none is the whole SleepWakeClient, Recorder or Server), and what they leave alone is None."""
    unread: Any = None  # the server's sizes: no step under test reads them
    return gpu_walk.Context(
        server=server,
        client=client,
        recorder=recorder,
        cell_id="unit",
        checkpoints={},
        goldens=goldens or {},
        sizes=unread,
        host_awake=0,
    )


def _subject(live: bool, client=None) -> gpu_walk.GpuSubject:
    return gpu_walk.GpuSubject(_context(client or _Client(live)))


def _open(result: StreamResult) -> gpu_walk.Open:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(result)
    return gpu_walk.Open(future=future, kind="held", op_name="generate_stream", prompt="p")


def _silent() -> StreamResult:
    return StreamResult(
        finish_reasons=[None],
        token_ids=[[7]],
        num_tokens=1,
        error="timeout after 60 s: read",
        timed_out=True,
        status=200,
    )


def test_a_stream_silent_past_its_timeout_is_no_answer_even_on_a_live_server():
    """A timeout is never an oracle's verdict: it used to fail the waiting oracle (an abort's time, a
    drain's end), so a host too loaded to serve in time killed mutants."""
    with pytest.raises(liveness.NoAnswer, match="on a live server") as e:
        _subject(live=True)._end_of(_open(_silent()), "the drained request")
    assert e.value.liveness == "api.answers" and not isinstance(e.value, oracle.OracleFailure)


def test_a_stream_silent_on_a_server_that_is_not_live_is_errored_not_a_verdict():
    with pytest.raises(liveness.NoAnswer, match="GET /health: no answer"):
        _subject(live=False)._end_of(_open(_silent()), "the drained request")


def test_a_stream_that_ended_is_returned_for_its_own_oracles_with_the_seconds_it_took():
    ended = StreamResult(finish_reasons=["length"], token_ids=[[7, 8]], num_tokens=2, error=None, status=200)
    value, seconds = _subject(live=True)._end_of(_open(ended), "the drained request")
    assert value is ended and 0 <= seconds < 1


def test_a_held_request_that_broke_off_inside_the_window_is_errored_not_held():
    """_judge_held_open: a stream that ended by a broken connection is no answer of the server, so the held
    oracle must not fire on it (it did: only stream.done() was looked at)."""
    broken = StreamResult([None], [[]], 0, "transport error: ConnectionResetError", transport=True, status=200)
    with pytest.raises(liveness.Unreachable):
        _subject(live=True)._judge_held_open(_open(broken).future, _AFTER_KEEP, "the frozen request")
    answered = StreamResult(["length"], [[7]], 1, None, status=200)
    with pytest.raises(oracle.OracleFailure) as e:
        _subject(live=True)._judge_held_open(_open(answered).future, _AFTER_KEEP, "the frozen request")
    assert e.value.oracle_id == gpu_walk.model.held_oracle(_AFTER_KEEP)


# Longer than any close that wakes the engine first, far shorter than a client timeout.
HELD_WAIT_S = 10.0


class _AsleepClient(_Client):
    """A live server asleep until the test's wake_everything, which ends the request it holds."""

    def __init__(self):
        super().__init__(live=True)
        self.wakes = 0
        self.ended = threading.Event()  # the held request's end

    def health(self) -> bool:
        return True

    def is_sleeping(self) -> bool:
        return self.wakes == 0

    def wake_everything(self) -> None:
        self.wakes += 1
        self.ended.set()


def _held(subject: gpu_walk.GpuSubject, client: _AsleepClient) -> concurrent.futures.Future:
    """A request a keep froze, as the tier keeps it open: on a pool of its own that outlives its step."""
    stack = contextlib.ExitStack()
    pool = stack.enter_context(background(client, workers=1))
    future = pool.submit(client.ended.wait, HELD_WAIT_S)
    subject.open.append(gpu_walk.Open(future, "held", "generate_stream", "p", pool=stack))
    return future


def test_a_close_while_a_step_failure_propagates_wakes_the_engine_so_the_held_request_ends_now():
    client = _AsleepClient()
    subject = _subject(live=True, client=client)
    held = _held(subject, client)
    with pytest.raises(oracle.OracleFailure):
        try:
            oracle.fail("requests.held_until_resident", "a step", 1, 0, "==")
        finally:
            subject.close()
    assert client.wakes == 1 and held.result(timeout=HELD_WAIT_S) is True  # ended by the wake, not its wait


def test_a_close_after_walks_that_passed_wakes_nothing():
    client = _AsleepClient()
    subject = _subject(live=True, client=client)
    held = _held(subject, client)
    threading.Timer(0.2, client.ended.set).start()  # the request ends on its own
    subject.close()
    assert held.result(timeout=0) is True and client.wakes == 0


class _ReloadAsleepClient(_Client):
    """A live server answering a reload while the weights sleep as vLLM does (500, asleep, /health 200, a
    request held), its gauge what the test sets."""

    def __init__(self, gauge: dict):
        super().__init__(live=True)
        self.gauge = gauge

    def raw(self, method, path, **kw):
        return types.SimpleNamespace(status_code=500, text="CUDA error: invalid argument")

    def is_sleeping(self) -> bool:
        return True

    def sleep_state(self) -> dict:
        return self.gauge

    def health_status(self) -> int:
        return 200

    def complete_stream(self, prompt, max_tokens, timeout_s):
        return StreamResult([None], [[]], 0, f"timeout after {timeout_s:g} s", timed_out=True, status=200)


_LEVEL1 = gpu_walk.model.State(
    level=1, asleep_tags=frozenset(gpu_walk.model.TAGS), pause=gpu_walk.model.PAUSE_ALL, gauge_level=1
)
_RELOAD = types.SimpleNamespace(name="reload", params=(None,))


def _probe(subject: gpu_walk.GpuSubject, op, state, pin) -> None:
    """A terminal probe as the driver makes it: the subject observes, the core judges (observations.check_terminal)."""
    observations.check_terminal(
        subject.terminal(op, state, pin, "probe"), pin, state, subject.version, "probe", subject.judged
    )


def test_the_reload_probe_checks_the_gauge_is_the_state_s_before_it():
    """A failed reload writes no gauge: the pin's "unchanged" is the gauge of the state probed (it was left
    out of the pin, so a reload that wrote the gauge passed the probe)."""
    pin = thresholds.divergence("reload_while_weights_asleep", "0.26.0")
    level1 = metrics.GAUGE_BY_LEVEL[1]
    _probe(_subject(live=True, client=_ReloadAsleepClient(dict(level1))), _RELOAD, _LEVEL1, pin)
    with pytest.raises(oracle.OracleFailure) as e:
        wrote = _ReloadAsleepClient(dict(metrics.GAUGE_AWAKE))
        _probe(_subject(live=True, client=wrote), _RELOAD, _LEVEL1, pin)
    assert e.value.oracle_id == "api.reload_while_weights_asleep" and "gauge" in str(e.value)


def test_every_terminal_pin_observes_the_whole_state():
    """After a probe the answer, both flags, /health and a request's outcome are all checked: a key left out
    of a pin is a check the probe silently skips (observations.check_terminal compares the keys observed,
    which are the pin's)."""
    whole = {"status", "is_sleeping", "gauge", "health", "request"}
    for name in gpu_walk.ops.TERMINAL_ORACLES:
        observed = thresholds.KNOWN_DIVERGENCES[name].observed
        assert isinstance(observed, dict), f"{name}: its observed pin is {observed!r}, not a state's keys"
        assert whole <= set(observed), f"{name}: its observed pin checks {sorted(observed)}, not all of {sorted(whole)}"
    # a /resume's pin also reads the pause it lifted
    resumed = thresholds.KNOWN_DIVERGENCES[gpu_walk.ops.RESUME_ASLEEP].observed
    assert isinstance(resumed, dict) and "is_paused" in resumed


# --- a request in flight at a sleep: judged only where the sleep caught it --------------------------------
class _RaceClient(_Client):
    """A live, awake server whose request in flight, for each race in turn, ends as `ends` says once /sleep
    is sent, before the sleep lands: "first": every token came before /sleep was sent (the race lost);
    "on its way": every token, the last ones after /sleep was sent (a race the client cannot tell from a
    sleep that let the request run on); "abort": aborted by the sleep; "late abort": aborted LATE_S after."""

    def __init__(self, ends: list[str]):
        super().__init__(live=True)
        self.ends = list(ends)
        self.asked: list[int] = []  # max_tokens of each request in flight
        self.calls: list[str] = []  # the sleep-API calls, in order
        self.generated = 0
        self.decoding_at = 0.0  # when /load last saw the request decoding: before /sleep was sent
        self.sent = threading.Event()  # /sleep sent: the request in flight may end
        self.ended = threading.Event()  # it ended
        self.open = 0

    def health(self) -> bool:
        return True

    def is_sleeping(self) -> bool:
        return False

    def wake_everything(self) -> None:
        self.calls.append("wake_everything")

    def sleep_window(self):
        return contextlib.nullcontext()

    def metrics_text(self) -> str:
        self.generated += 4
        return f"vllm:generation_tokens_total {self.generated}\n"

    def load(self) -> int:
        self.decoding_at = time.perf_counter()
        return self.open

    def complete_stream(self, prompt, max_tokens, timeout_s=None):
        self.asked.append(max_tokens)
        self.open += 1
        self.sent.wait(HELD_WAIT_S)
        end = self.ends.pop(0)
        if end == "late abort":
            time.sleep(LATE_S)  # the abort's own lateness, not a wait for a condition
        now = time.perf_counter()
        if end in ("abort", "late abort"):
            result = StreamResult(["abort"], [list(range(10))], 10, None, status=200, arrivals=[self.decoding_at, now])
        else:
            at = self.decoding_at if end == "first" else now
            result = StreamResult(["length"], [list(range(max_tokens))], max_tokens, None, status=200, arrivals=[at])
        self.open -= 1
        self.ended.set()
        return result

    def sleep(self, level, mode=None, memory_moves=None):
        self.calls.append(f"sleep:{level}:{mode}")
        self.sent.set()
        self.ended.wait(HELD_WAIT_S)  # the request ends before the sleep lands
        self.sent.clear()
        self.ended.clear()

    def wake_up(self, tags=None, memory_moves=True):
        self.calls.append(f"wake:{tags}")


class _Recorder:
    def __init__(self):
        self.rows: list[dict] = []

    def record(self, test, key, value, unit, **extra) -> None:
        self.rows.append({"key": key, "value": value, **extra})


class _StatesAsked(gpu_walk.GpuSubject):
    """The walk's subject, its check_state recording the states it was asked for: the server's bytes are
    not this test's."""

    def __init__(self, ctx: gpu_walk.Context):
        super().__init__(ctx)
        self.checked: list = []

    def check_state(self, s, where: str) -> None:
        self.checked.append(s)


RACE = gpu_walk.race_tokens(1)  # the tokens of a race's request, as the walk sizes it


def _race_subject(ends: list[str], max_model_len: int = 1024):
    """(subject, client, the states check_state was asked for) of a walk racing a request against a sleep."""
    client = _RaceClient(ends)
    ctx = _context(
        client,
        server=types.SimpleNamespace(config=types.SimpleNamespace(max_model_len=max_model_len)),
        recorder=_Recorder(),
        goldens={"A": gpu_walk.Goldens({}, [], list(range(gpu_walk.STREAM_TOKENS)))},
    )
    subject = _StatesAsked(ctx)
    return subject, client, subject.checked


def _sleep_racing(subject, mode: str = "abort", level: int = 0):
    op = gpu_walk.ops.sleep(level, mode, 1)
    before = gpu_walk.model.INITIAL
    try:
        subject.sleep(op, before, op.apply(before), "step 0")
    finally:
        subject.close()


def test_a_request_that_finished_before_the_sleep_was_sent_is_errored_not_killed():
    """A lost race is no kill: the abort met no request in flight, so requests.abort_aborts must not judge it
    (it did: a loaded host's stream that ended first failed a healthy server). It runs once more, from the
    state before, with a request twice as long, then is a Precondition."""
    subject, client, checked = _race_subject(["first", "first"])
    with pytest.raises(oracle.Precondition, match="finished before /sleep was sent, twice") as e:
        _sleep_racing(subject)
    assert not isinstance(e.value, oracle.OracleFailure)
    assert client.asked == [RACE, 2 * RACE]
    assert client.calls == ["sleep:0:abort", "wake:None", "sleep:0:abort"]  # the way back is a full wake
    met_none = gpu_walk.ops.sleep(0, "abort").apply(gpu_walk.model.INITIAL)
    assert checked == [met_none, gpu_walk.model.INITIAL]


def test_a_keep_whose_request_finished_first_is_errored_not_a_held_request_that_ran():
    subject, client, _ = _race_subject(["first", "first"])
    with pytest.raises(oracle.Precondition, match="finished before /sleep was sent, twice"):
        _sleep_racing(subject, mode="keep")


def test_a_race_lost_once_runs_again_longer_and_is_judged_on_the_second():
    subject, client, _ = _race_subject(["first", "abort"])
    _sleep_racing(subject)  # the second request was aborted: the abort judged, and it passed
    assert client.asked == [RACE, 2 * RACE]


def test_tokens_after_the_sleep_was_sent_still_prove_a_sleep_that_let_the_request_run():
    """A sleep that lets its request run to the end shows tokens after /sleep was sent, twice: the kill
    stands after the race ran again."""
    subject, client, _ = _race_subject(["on its way", "on its way"])
    with pytest.raises(oracle.OracleFailure) as e:
        _sleep_racing(subject)
    assert e.value.oracle_id == "requests.abort_aborts" and len(client.asked) == 2


def test_a_lost_race_with_no_room_for_a_longer_request_is_errored_at_once():
    subject, client, _ = _race_subject(["first"], max_model_len=RACE + 20)
    with pytest.raises(oracle.Precondition, match=f"cannot run again: a request of {2 * RACE} tokens"):
        _sleep_racing(subject)
    assert client.asked == [RACE]


def test_a_race_is_shorter_than_the_golden_and_runs_again_at_most_its_length():
    """The race's request is sized from its record (thresholds race_tokens), below the golden's stream, so a
    held request's tokens are the golden's first ones and a race run again is still within the golden; a
    late arrival's drain keeps the golden's length."""
    assert 0 < RACE < 2 * RACE <= gpu_walk.STREAM_TOKENS
    assert gpu_walk.race_tokens(2) == gpu_walk.STREAM_TOKENS


LATE_S = 0.3  # how late a "late abort" ends its request: past the abort_s_max these tests set


class _Stalled(gpu_walk.stalls.Sampler):
    """The clock's readings of a host that stalled the test's process in every window."""

    def longest_gap(self, start: float, end: float) -> float:
        return 2 * thresholds.get("host_stall_s")


@pytest.fixture
def late_bound(monkeypatch):
    """abort_s_max below LATE_S, and an abort waited for long past it (a late end is measured, not given up)."""
    t = thresholds.TABLE["abort_s_max"]
    monkeypatch.setitem(thresholds.TABLE, "abort_s_max", dataclasses.replace(t, value=LATE_S / 3))
    monkeypatch.setattr(gpu_walk, "abort_give_up_s", lambda: HELD_WAIT_S)


def test_an_abort_timed_across_a_host_stall_is_left_out_and_counted_not_judged(monkeypatch, late_bound):
    """requests.abort_time failed a healthy server when the host stalled the test between /sleep and the
    request's end: such a sample is recorded (stalled_sample, with the gap) and left out."""
    monkeypatch.setattr(gpu_walk.stalls, "Sampler", _Stalled)
    subject, _, _ = _race_subject(["late abort"])
    _sleep_racing(subject)
    [left_out] = [r for r in subject.ctx.recorder.rows if r["key"] == gpu_walk.stalls.STALLED_KEY]
    assert left_out["oracle"] == "requests.abort_time" and left_out["value"] >= LATE_S
    assert not [r for r in subject.ctx.recorder.rows if r["key"] == "abort_s_max"]  # nothing judged


def test_a_late_abort_on_a_host_that_did_not_stall_is_killed(late_bound):
    subject, _, _ = _race_subject(["late abort"])
    with pytest.raises(oracle.OracleFailure) as e:
        _sleep_racing(subject)
    assert e.value.oracle_id == "requests.abort_time"
