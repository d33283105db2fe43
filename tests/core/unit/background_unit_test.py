"""background(): a block that fails wakes a sleeping engine and joins the requests the wake freed, so the
next test starts on a quiet server; where the wake failed or a stop was asked for, it leaves them to end
with the server instead of waiting out their client timeout. A block that passes joins its requests."""

import threading
import time

import pytest

from tests.core.background import CAUGHT, LOST, UNSURE, background, race_outcome
from tests.core.client import StreamResult

# Far longer than a block that does not wait may take to leave, far shorter than a client timeout.
HELD_S = 10.0
LEAVE_S_MAX = 2.0
DECODE_S = 0.3  # what a freed request still takes to end: a join waits for it, a block that leaves does not


class _Client:
    """A live server asleep that holds a request until a wake; its wake may fail (a defect in the wake)."""

    def __init__(self, wake_fails: bool = False):
        self.wake_fails = wake_fails
        self.wakes = 0
        self.released = threading.Event()  # the held request's end

    def health(self) -> bool:
        return True

    def is_sleeping(self) -> bool:
        return True

    def wake_everything(self) -> None:
        self.wakes += 1
        if self.wake_fails:
            raise RuntimeError("POST /wake_up answered HTTP 500")
        self.released.set()


def _held_request(client: _Client) -> bool:
    """A request the sleeping engine holds: it decodes for DECODE_S once freed; False if never freed."""
    if not client.released.wait(HELD_S):
        return False
    time.sleep(DECODE_S)  # the request's own work after its release, not a wait for a condition
    return True


def _fail_with(client: _Client, failure: BaseException):
    """The block raises `failure` with one held request open: (the future, seconds until background left)."""
    begin = time.monotonic()
    with pytest.raises(type(failure)):
        with background(client) as pool:
            held = pool.submit(_held_request, client)
            raise failure
    return held, time.monotonic() - begin


def test_a_failed_block_wakes_the_engine_and_joins_the_requests_the_wake_freed():
    client = _Client()
    held, _ = _fail_with(client, RuntimeError("a step failed"))
    assert client.wakes == 1 and held.done() and held.result() is True


def test_a_failed_block_whose_wake_failed_does_not_wait_out_the_held_request():
    client = _Client(wake_fails=True)
    held, left_after = _fail_with(client, RuntimeError("a step failed"))
    client.released.set()  # the server's stop, which ends the held request
    assert client.wakes == 1 and left_after < LEAVE_S_MAX, left_after
    assert held.result(timeout=HELD_S) is True


class _WakeFreesNothing(_Client):
    def wake_everything(self) -> None:
        pass  # a wake that frees nothing in time


def test_a_stop_asked_for_does_not_wait_for_the_requests():
    client = _WakeFreesNothing()
    held, left_after = _fail_with(client, KeyboardInterrupt())
    client.released.set()
    assert left_after < LEAVE_S_MAX, left_after
    assert held.result(timeout=HELD_S) is True


def test_a_block_that_passes_joins_its_requests():
    client = _Client()
    with background(client) as pool:
        held = pool.submit(_held_request, client)
        threading.Timer(0.2, client.released.set).start()
    assert held.done() and client.wakes == 0


def _ended(reasons, tokens, arrivals, error=None) -> StreamResult:
    return StreamResult(reasons, [list(range(n)) for n in tokens], sum(tokens), error, status=200, arrivals=arrivals)


SENT = 100.0  # when /sleep was sent (perf_counter)


@pytest.mark.parametrize(
    "result, drains, outcome",
    [
        (_ended(["length"], [8], [SENT - 2, SENT - 1]), False, LOST),  # every token before: it finished first
        (_ended(["length"], [8], [SENT - 2, SENT - 1]), True, LOST),
        (_ended(["length"], [8], [SENT - 1, SENT + 1]), False, UNSURE),  # the last came after, none stopped
        (_ended(["length"], [8], [SENT - 1, SENT + 1]), True, CAUGHT),  # a drain: that is how it ends
        (_ended(["abort"], [3], [SENT - 1]), False, CAUGHT),  # only the sleep gives it
        (_ended([None], [3], [SENT - 1]), False, CAUGHT),  # cut short
        (_ended(["length", "length"], [8, 5], [SENT - 1]), False, CAUGHT),  # a choice short of its tokens
        (_ended([None], [3], [SENT - 1], error="error event: aborted"), False, CAUGHT),
    ],
)
def test_a_stream_raced_against_a_sleep_is_caught_unless_it_finished_first(result, drains, outcome):
    assert race_outcome(result, SENT, 8, drains=drains)[0] == outcome
