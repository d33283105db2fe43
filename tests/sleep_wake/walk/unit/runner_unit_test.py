"""The GPU tier's judgement of a request that must end (an abort's, a wait drain's): a stream that went
silent past its own read timeout has not ended, which is the waiting oracle's verdict on a live server
and no verdict at all on a server that is not live."""

import concurrent.futures

import pytest

from tests.sleep_wake.lib import liveness, oracle
from tests.sleep_wake.lib.client import SleepWakeClient, StreamResult
from tests.sleep_wake.walk import runner

ENDS = "requests.ends_in_race"


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


def _tier(live: bool) -> runner.GpuTier:
    ctx = runner.Context(
        server=None,
        client=_Client(live),
        recorder=None,
        cell_id="unit",
        checkpoints={},
        goldens={},
        sizes=None,
        host_awake=0,
    )
    return runner.GpuTier(ctx)


def _open(result: StreamResult) -> runner.Open:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(result)
    return runner.Open(future=future, kind="held", op_name="generate_stream", prompt="p")


def _silent() -> StreamResult:
    return StreamResult(
        finish_reasons=[None],
        token_ids=[[7]],
        num_tokens=1,
        error="timeout after 60 s: read",
        timed_out=True,
        status=200,
    )


def test_a_stream_silent_past_its_timeout_on_a_live_server_fails_the_waiting_oracle():
    with pytest.raises(oracle.OracleFailure) as failure:
        _tier(live=True)._end_of(_open(_silent()), 5.0, "the drained request", ends_oracle=ENDS)
    assert failure.value.oracle_id == ENDS


def test_a_stream_silent_on_a_server_that_is_not_live_is_errored_not_a_verdict():
    with pytest.raises(liveness.NoAnswer):
        _tier(live=False)._end_of(_open(_silent()), 5.0, "the drained request", ends_oracle=ENDS)


def test_a_stream_that_ended_is_returned_for_its_own_oracles():
    ended = StreamResult(finish_reasons=["length"], token_ids=[[7, 8]], num_tokens=2, error=None, status=200)
    assert _tier(live=True)._end_of(_open(ended), 5.0, "the drained request", ends_oracle=ENDS) is ended
