"""A burst of streaming requests mid-decode when /sleep?mode=abort lands: every request ends (done or
aborted), none hangs, and the engine is alive and golden afterwards; requests sent while asleep are
accepted (/load) and held, none answered before wake_up is sent, then served golden. #45520 killed the
engine behind a 200; #45326 left requests hanging forever."""

import concurrent.futures

from tests.sleep_wake.lib import measure, metrics, oracles, thresholds
from tests.sleep_wake.lib.background import background, generated_tokens, wait_decoding
from tests.sleep_wake.lib.prompts import PROMPTS

ISSUE = "#45326/#45520 generate/sleep race"
HELD = "#45326 requests sent while asleep are held"
BURST = 8
# Far longer than the time /sleep takes to land, so the burst is mid-decode (max_model_len is 1024).
RACE_MAX_TOKENS = 768


def ended(future, bound_s: float, what: str):
    """The future's result, or an AssertionError naming the hang."""
    try:
        return future.result(timeout=bound_s)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"[{ISSUE}] {what} did not end within {bound_s:g} s: a hang") from None


def _outcome(future) -> str:
    """How a finished background request ended, for a message."""
    try:
        return f"finish_reasons {future.result().finish_reasons}"
    except Exception as e:  # the server's answer or a transport failure
        return f"failed: {e}"


def _expect_ended_cleanly(result, i: int) -> str:
    """'length' (full length), 'abort', 'aborted before its first token' or 'error event'."""
    assert not result.timed_out, (
        f"[{ISSUE}] request {i}: expected it to end (length or abort), seen a hang: {result.error} "
        f"after {result.seconds:.1f} s with {result.num_tokens} tokens")
    if result.error is not None:
        # An error event or HTTP error is an acceptable way to be aborted; a dropped connection or a
        # stream without [DONE] is not (the server died, #45520).
        assert result.error.startswith(("error event", "HTTP")), (
            f"[{ISSUE}] request {i}: expected a clean end or an error event, seen {result.error}")
        return "error event"
    reason = result.finish_reasons[0]
    if reason == "length":
        assert len(result.token_ids[0]) == RACE_MAX_TOKENS, (
            f"[{ISSUE}] request {i}: finish_reason length after {len(result.token_ids[0])} tokens, "
            f"expected {RACE_MAX_TOKENS}")
        return "length"
    if reason is None and result.num_tokens == 0:
        # vLLM 0.26.0 streams nothing for a choice aborted before its first token
        # (completion/serving.py skips empty chunks), then [DONE].
        return "aborted before its first token"
    assert reason == "abort", (
        f"[{ISSUE}] request {i}: expected finish_reason length or abort, seen {reason!r} after "
        f"{result.num_tokens} tokens")
    return "abort"


class TestConcurrentRace:
    def test_sleep_during_streaming_burst(self, client, golden, recorder, cell):
        bound = thresholds.get("race_timeout_s")
        with background(client, BURST + len(PROMPTS)) as pool:
            with client.sleep_window():  # the sleep must land while the burst decodes
                since = generated_tokens(client)
                burst = [pool.submit(client.complete_stream, PROMPTS[i % len(PROMPTS)], RACE_MAX_TOKENS,
                                     timeout_s=bound) for i in range(BURST)]
                wait_decoding(client, burst, BURST, since, BURST)
                _, sleep_s = measure.timed(client.sleep, level=1, mode="abort")
            oracles.expect_state(client, sleeping=True, gauge=metrics.GAUGE_LEVEL1,
                                 step="sleep level 1 (mode abort) during the burst", issue=ISSUE)
            outcomes = [_expect_ended_cleanly(ended(f, bound, f"streaming request {i}"), i)
                        for i, f in enumerate(burst)]
            measure.wait_until(lambda: client.load() == 0, thresholds.get("request_completion_s_max"),
                               what=f"[{ISSUE}] /load back to 0 once the aborted burst ended")
            # Requests arriving while asleep are held until the wake, then served (#45326: they hung).
            late = [pool.submit(client.complete, p, timeout_s=bound) for p in PROMPTS]
            measure.wait_until(lambda: client.load() >= len(late) or any(f.done() for f in late),
                               thresholds.get("request_completion_s_max"),
                               what="the requests sent while asleep to be accepted (/load)")
            ended_early = {p: _outcome(f) for p, f in zip(PROMPTS, late) if f.done()}
            assert not ended_early, (
                f"[{HELD}] requests sent while asleep ended before wake_up was sent: {ended_early}")
            measure.assert_holds(lambda: not any(f.done() for f in late) and client.is_sleeping(),
                                 thresholds.get("held_request_window_s"),
                                 what=f"[{HELD}] the {len(late)} accepted requests pending and is_sleeping "
                                      "true until wake_up is sent")
            _, wake_s = measure.timed(client.wake_up)
            for p, f in zip(PROMPTS, late):
                oracles.expect_tokens(ended(f, bound, f"request {p!r} sent while asleep"), golden[p],
                                      prompt=p, step="a request held by the sleep, after wake",
                                      issue="#45326")
        counts = {o: outcomes.count(o) for o in set(outcomes)}
        test = measure.current_test()
        recorder.record(test, "race_sleep_s", sleep_s, "s")
        recorder.record(test, "race_wake_s", wake_s, "s")
        recorder.record(test, "race_outcomes", counts, "requests")
        assert len(outcomes) - counts.get("length", 0) >= 1, (
            f"[{ISSUE}] expected /sleep?mode=abort to abort at least one of the {BURST} requests "
            f"in flight, seen outcomes {counts}")
        assert client.health(), f"[{ISSUE}] /health failed after the race (engine dead behind a 200?)"
        measure.wait_until(lambda: client.load() == 0, thresholds.get("request_completion_s_max"),
                           what="/load back to 0 after the race")
        oracles.expect_awake(client, step="the race and a full wake", issue=ISSUE)
        oracles.expect_golden(client, golden, step="the generate/sleep race", issue=ISSUE)
