"""background(): a block that fails wakes a sleeping engine and leaves the requests the wake could not free
to end with the server, instead of waiting out their client timeout; a block that passes joins them."""

import threading
import time

import pytest

from tests.sleep_wake.lib.background import background

# Far longer than a failed block may take to leave, far shorter than a client timeout.
HELD_S = 10.0
LEAVE_S_MAX = 2.0


class _Client:
    """A live server asleep whose wake fails (a defect in the wake): its held request stays held."""

    def __init__(self):
        self.wakes = 0

    def health(self) -> bool:
        return True

    def is_sleeping(self) -> bool:
        return True

    def wake_everything(self) -> None:
        self.wakes += 1
        raise RuntimeError("POST /wake_up answered HTTP 500")


def test_a_failed_block_wakes_the_engine_and_does_not_wait_for_a_request_it_could_not_free():
    client, released = _Client(), threading.Event()
    begin = time.monotonic()
    with pytest.raises(KeyboardInterrupt):  # the mutant runner's stop of a sibling shard
        with background(client) as pool:
            held = pool.submit(released.wait, HELD_S)
            raise KeyboardInterrupt
    left_after = time.monotonic() - begin
    released.set()  # the server's stop, which ends the held request
    assert client.wakes == 1 and left_after < LEAVE_S_MAX, left_after
    assert held.result(timeout=HELD_S) is True


def test_a_block_that_passes_joins_its_requests():
    client, released = _Client(), threading.Event()
    with background(client) as pool:
        held = pool.submit(released.wait, HELD_S)
        threading.Timer(0.2, released.set).start()
    assert held.done() and client.wakes == 0
