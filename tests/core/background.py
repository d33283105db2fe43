"""Requests sent from background threads, for tests that hold requests behind a sleeping engine or
race them against /sleep."""

import concurrent.futures
import contextlib
import time

from tests.core import measure, metrics, oracle, thresholds

GENERATION_TOKENS = "vllm:generation_tokens_total"


@contextlib.contextmanager
def background(client, workers: int = 1):
    """A thread pool for requests. If the block fails while the engine sleeps, wake it (fully), so held
    requests end now instead of at their client timeout, and join them: the next test starts on a quiet
    server. Where the wake failed (a defect in the wake) or a stop was asked for (KeyboardInterrupt: the
    mutant runner stopping a shard), do not wait for them: they end when the server stops."""
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="held-request")
    try:
        yield pool
    except BaseException as failure:
        woken = False
        try:
            if client.health() and client.is_sleeping():
                client.wake_everything()
            woken = True
        except Exception:  # noqa: BLE001  the block's own failure is the verdict: never mask it
            pass
        finally:
            pool.shutdown(wait=woken and not isinstance(failure, KeyboardInterrupt), cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def generated_tokens(client) -> float:
    """vLLM's count of generated tokens (/metrics): proof that requests are decoding, not queued."""
    samples = [s.value for s in metrics.parse_prometheus(client.metrics_text(), [GENERATION_TOKENS])]
    if not samples:
        raise oracle.Precondition(f"{GENERATION_TOKENS} not in /metrics: the server must run with stats on")
    return sum(samples)


def wait_decoding(client, futures, requests: int, tokens_since: float, tokens: int) -> None:
    """Wait until `requests` are in flight (/load) and `tokens` more were generated; fail if one of
    the futures ended first (the race would not be exercised)."""
    measure.wait_until(
        lambda: (
            any(f.done() for f in futures)
            or (client.load() >= requests and generated_tokens(client) >= tokens_since + tokens)
        ),
        thresholds.get("request_completion_s_max"),
        what=f"{requests} requests in flight and {tokens} tokens generated",
    )
    done = [f.result() for f in futures if f.done()]
    if done:
        raise oracle.Precondition(
            f"a request ended before /sleep was sent ({done[0]!r}), so the race was not exercised: raise its max_tokens"
        )


# How a stream that raced a /sleep ended, as its client saw it (race_outcome): the sleep caught it in
# flight, the client cannot tell, or it lost the race (it finished first).
CAUGHT, UNSURE, LOST = "caught", "unsure", "lost"


def race_outcome(result, sent: float, max_tokens: int, drains: bool = False) -> tuple[str, str]:
    """(CAUGHT, UNSURE or LOST, what shows it) for a stream that raced a /sleep sent at perf_counter
    `sent` and has ended (one still open when /sleep answered was in flight: the caller knows that).

    CAUGHT: it ended otherwise than a request that ran to its end (a finish reason abort, cut short, an
    error: the caller's oracles and liveness checks judge how), or the sleep drains (mode wait) and tokens
    still came after /sleep was sent. LOST: every choice ended by length with all its tokens, none of them after
    /sleep was sent: it finished before /sleep left, so the sleep met no request in flight and no oracle
    of what a sleep does to one may judge it. UNSURE: the same ends, but tokens came after /sleep was
    sent, under a sleep that must stop them (abort, keep): a stream whose last tokens came while /sleep
    was on its way and a sleep that let the stream run to its end look alike to the client, which never
    sees when /sleep landed."""
    reasons = result.finish_reasons
    if result.error is not None or any(r != "length" for r in reasons):
        return CAUGHT, f"it ended with finish reasons {reasons} (error {result.error!r})"
    short = [len(t) for t in result.token_ids if len(t) < max_tokens]
    if short:
        return CAUGHT, f"choices ended by length after {short} of {max_tokens} tokens"
    after = sum(t > sent for t in result.arrivals)
    if not after:
        return LOST, f"all {max_tokens} tokens of each choice came before /sleep was sent"
    what = f"{after} of its {len(result.arrivals)} token events came after /sleep was sent"
    return (CAUGHT if drains else UNSURE), what


def end_clock(future):
    """Call right after submitting: returns a function giving the perf_counter moment the future ended.
    For "seconds from /sleep to the request's end": not the sleep's answer plus the wait after it, since
    where the worker brackets its sleep the answer comes after the executor's sleep, which may wait for a
    neighbour's allocation long after the abort ended the requests."""
    ended = []
    future.add_done_callback(lambda f: ended.append(time.perf_counter()))

    def at() -> float:
        if not ended:
            raise RuntimeError("end_clock: the request has not ended yet; wait for it first")
        return ended[0]

    return at
