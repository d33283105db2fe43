"""Assertions shared by the test classes: sleep flags and golden output.

Messages say what was expected, what was seen, at which step, and which vLLM issue the check guards.
"""

import concurrent.futures

from tests.sleep_wake.lib import measure, metrics, thresholds
from tests.sleep_wake.lib.prompts import GOLDEN_MAX_TOKENS, PROMPTS


def expect_state(client, *, sleeping: bool, gauge: dict, step: str, issue: str) -> None:
    """/is_sleeping == sleeping and vllm:engine_sleep_state == gauge, read back to back."""
    seen = client.state()
    if seen.is_sleeping != sleeping or seen.gauge != gauge:
        raise AssertionError(
            f"[{issue}] after {step}: expected is_sleeping={sleeping} gauge={_fmt(gauge)}, "
            f"seen is_sleeping={seen.is_sleeping} gauge={_fmt(seen.gauge)}")


def expect_awake(client, *, step: str, issue: str) -> None:
    expect_state(client, sleeping=False, gauge=metrics.GAUGE_AWAKE, step=step, issue=issue)


def expect_partially_asleep(client, *, step: str, issue: str, level: int = 1) -> None:
    """After a wake_up that leaves a tag of a level-`level` sleep asleep: /is_sleeping true (contract,
    #44483) and the gauge the known divergence gauge_awake_while_partially_asleep pins for the
    server's vLLM release (fails when a release changes it)."""
    pin = thresholds.divergence("gauge_awake_while_partially_asleep", client.version())
    want = pin.expected[level]
    seen = client.state()
    if not seen.is_sleeping:
        raise AssertionError(f"[{issue}] after {step}: expected is_sleeping=True while a tag is still "
                             f"asleep (#44483), seen False (gauge {_fmt(seen.gauge)})")
    if seen.gauge != want:
        raise AssertionError(
            f"[{issue}] after {step}: expected gauge {_fmt(want)} {pin.describe()}; seen {_fmt(seen.gauge)}")


def _fmt(gauge: dict) -> str:
    """(awake,weights_offloaded,discard_all), e.g. (0,1,0)."""
    values = [gauge.get(k) for k in metrics.SLEEP_STATE_LABELS]
    return "(" + ",".join(f"{v:g}" if isinstance(v, (int, float)) else "?" for v in values) + ")"


def expect_tokens(completion, golden_completion, *, prompt: str, step: str, issue: str) -> None:
    """Greedy token ids identical to the golden run, full length, cut by length (ignore_eos)."""
    got, want = completion.token_ids[0], golden_completion.token_ids[0]
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise AssertionError(
            f"[{issue}] after {step}: token ids for {prompt!r} differ from golden at position {first}: "
            f"expected {want}, seen {got} (text {completion.text[0]!r})")
    if completion.finish_reasons[0] != "length":
        raise AssertionError(
            f"[{issue}] after {step}: expected finish_reason 'length' (ignore_eos, max_tokens "
            f"{GOLDEN_MAX_TOKENS}) for {prompt!r}, seen {completion.finish_reasons[0]!r}")


def expect_result(future, timeout_s: float, *, step: str, issue: str):
    """The result of a background request, or an AssertionError naming the issue (hang or failure)."""
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"[{issue}] {step}: request did not finish within {timeout_s:g} s") from None
    except Exception as e:  # the server's answer (HTTP 5xx: engine died?) or a transport failure
        raise AssertionError(f"[{issue}] {step}: request failed: {e}") from e


def expect_golden(client, golden: dict, *, step: str, issue: str, prompts=None) -> None:
    """Every prompt (default: all of PROMPTS) regenerates its golden token ids."""
    for prompt in prompts or PROMPTS:
        expect_tokens(client.complete(prompt, GOLDEN_MAX_TOKENS), golden[prompt],
                      prompt=prompt, step=step, issue=issue)


def take_golden(client, prompts) -> dict:
    """prompt -> Completion (greedy, ignore_eos, GOLDEN_MAX_TOKENS tokens, logprobs=1), each checked to be
    full length and cut by length: the reference every output oracle compares with."""
    out = {}
    for prompt in prompts:
        c = client.complete(prompt, GOLDEN_MAX_TOKENS, logprobs=1)
        if len(c.token_ids[0]) != GOLDEN_MAX_TOKENS or c.finish_reasons != ["length"]:
            raise AssertionError(
                f"golden run for {prompt!r}: expected {GOLDEN_MAX_TOKENS} tokens ending by length, got "
                f"{len(c.token_ids[0])} ending {c.finish_reasons}")
        out[prompt] = c
    return out


def logprob_drift(completion, golden_completion) -> float:
    """max |logprob - golden logprob| over the sampled tokens (same tokens assumed: check them first)."""
    want, got = golden_completion.logprobs[0], completion.logprobs[0]
    if len(got) != len(want) or not want:
        raise AssertionError(f"expected {len(want)} token logprobs (the golden's), seen {len(got)}")
    return max(abs(a - b) for a, b in zip(got, want))


def expect_golden_with_logprobs(client, recorder, golden: dict, prompts, cell_id, *, step: str,
                                issue: str) -> float:
    """Every prompt regenerates its golden token ids, and the worst per-token logprob drift over all of
    them is within logprob_drift_max; returns that drift (all drifts are recorded)."""
    drifts = {}
    for prompt in prompts:
        after = client.complete(prompt, GOLDEN_MAX_TOKENS, logprobs=1)
        expect_tokens(after, golden[prompt], prompt=prompt, step=step, issue=issue)
        drifts[prompt] = logprob_drift(after, golden[prompt])
        recorder.record(measure.current_test(), "logprob_drift", drifts[prompt], "nats", prompt=prompt,
                        step=step, golden=golden[prompt].logprobs[0], seen=after.logprobs[0])
    worst = max(drifts, key=drifts.get)
    measure.check_at_most(recorder, "logprob_drift_max", drifts[worst], cell_id,
                          f"[{issue}] after {step}: max |logprob - golden| per token, worst prompt "
                          f"{worst!r} (all prompts: {drifts})")
    return drifts[worst]
