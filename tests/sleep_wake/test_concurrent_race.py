"""A burst of streaming requests mid-decode when /sleep?mode=abort lands: every request ends (done or
aborted), none hangs, and the engine is alive and golden afterwards; requests sent while asleep are
accepted (/load) and held, none answered before wake_up is sent, then served golden. #45520 killed the
engine behind a 200; #45326 left requests hanging forever."""

import time

from tests.core import expect, measure, oracle, thresholds
from tests.core.background import LOST, background, generated_tokens, race_outcome, wait_decoding
from tests.core.prompts import PROMPTS

ISSUE = "#45326/#45520 generate/sleep race"
HELD = "#45326 requests sent while asleep are held"
BURST = 8
# Far longer than the time /sleep takes to land, so the burst is mid-decode (max_model_len is 1024).
RACE_MAX_TOKENS = 768


def ended(client, future, bound_s: float, what: str):
    """The future's result once it ended; one still open past the bound is no answer (a hang, or a host
    too loaded: measure.wait_for_server), never an oracle."""
    measure.wait_for_server(future.done, bound_s, f"[{ISSUE}] {what} to end", client.confirm_live)
    return future.result()


def _ended_cleanly(client, result, i: int) -> str:
    """'length' (full length), 'abort', 'aborted before its first token' or 'error event'; anything else
    a live server sends fails the oracle requests.clean_end (a cut stream, #45520). A broken connection,
    a stream silent past its timeout, or one cut on a server no longer live raises (client.check_stream):
    no verdict."""
    what = f"[{ISSUE}] how streaming request {i} ended"
    client.check_stream(result, what)
    if result.error is not None:
        # An error event or an HTTP error answer is an acceptable way to be aborted; a stream that closed
        # without [DONE] is not (#45520).
        oracle.holds(
            "requests.clean_end",
            result.error.startswith(("error event", "HTTP")),
            what,
            result.error,
            "finish reason or error event",
        )
        return "error event"
    reason = result.finish_reasons[0]
    if reason == "length":
        oracle.equal(
            "requests.clean_end",
            len(result.token_ids[0]),
            RACE_MAX_TOKENS,
            f"{what}: tokens of a request that ended by length",
        )
        return "length"
    if reason is None and result.num_tokens == 0:
        # vLLM 0.26.0 streams nothing for a choice aborted before its first token
        # (completion/serving.py skips empty chunks), then [DONE].
        return "aborted before its first token"
    oracle.equal("requests.clean_end", reason, "abort", f"{what}: finish_reason after {result.num_tokens} tokens")
    return "abort"


class TestConcurrentRace:
    def test_sleep_during_streaming_burst(self, client, golden, recorder, cell):
        bound = thresholds.get("race_timeout_s")
        with background(client, BURST + len(PROMPTS)) as pool:
            with client.sleep_window():  # the sleep must land while the burst decodes
                since = generated_tokens(client)
                burst = [
                    pool.submit(client.complete_stream, PROMPTS[i % len(PROMPTS)], RACE_MAX_TOKENS, timeout_s=bound)
                    for i in range(BURST)
                ]
                wait_decoding(client, burst, BURST, since, BURST)
                sent = time.perf_counter()
                _, sleep_s = measure.timed(client.sleep, level=1, mode="abort")
            expect.asleep(client, 1, step="sleep level 1 (mode abort) during the burst", issue=ISSUE)
            results = [ended(client, f, bound, f"streaming request {i}") for i, f in enumerate(burst)]
            outcomes = [_ended_cleanly(client, result, i) for i, result in enumerate(results)]
            expect.load_drains(client, "once the aborted burst ended")
            # Requests arriving while asleep are held until the wake, then served (#45326: they hung).
            late = [pool.submit(client.complete, p, timeout_s=bound) for p in PROMPTS]
            expect.accepted(client, late, len(late), "the requests sent while asleep accepted (/load)")
            expect.held(
                "requests.held_while_asleep",
                client,
                late,
                thresholds.get("held_request_window_s"),
                f"[{HELD}] the {len(late)} requests sent while asleep, until wake_up is sent",
            )
            _, wake_s = measure.timed(client.wake_up)
            for p, f in zip(PROMPTS, late):
                expect.tokens(
                    expect.result(f, bound, client=client, step=f"request {p!r} sent while asleep", issue=HELD),
                    golden[p],
                    prompt=p,
                    step="a request held by the sleep, after wake",
                    issue="#45326",
                )
        counts = {o: outcomes.count(o) for o in set(outcomes)}
        test = measure.current_test()
        recorder.record(test, "race_sleep_s", sleep_s, "s")
        recorder.record(test, "race_wake_s", wake_s, "s")
        recorder.record(test, "race_outcomes", counts, "requests")
        races = [race_outcome(result, sent, RACE_MAX_TOKENS) for result in results]
        if all(race == LOST for race, _ in races):
            # No request was in flight when /sleep landed: nothing was there to abort. A longer request does not
            # fit max_model_len, so the race is not run again.
            raise oracle.Precondition(
                f"[{ISSUE}] every request of the burst finished before /sleep was sent ({races[0][1]}), so the "
                "abort met no request in flight: a host this loaded cannot run the race; run the cell on a quieter one"
            )
        oracle.holds(
            "requests.abort_aborts",
            len(outcomes) - counts.get("length", 0) >= 1,
            f"[{ISSUE}] /sleep?mode=abort with {BURST} requests in flight",
            counts,
            "at least one aborted",
        )
        expect.healthy(client, "the race (engine dead behind a 200?)")
        expect.load_drains(client, "after the race")
        expect.awake(client, step="the race and a full wake", issue=ISSUE)
        expect.golden(client, golden, step="the generate/sleep race", issue=ISSUE)
