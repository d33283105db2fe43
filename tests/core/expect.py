"""The suite's checks of what a server serves and reports, each judged by its oracle (oracle.py):
sleep flags and gauge, golden output, held and in-flight requests.

`step` says where in the test the check ran and `issue` which vLLM issue it guards; both go into the
message only: the verdict of a failure is its oracle id.
"""

from tests.core import measure, metrics, oracle, thresholds
from tests.core.client import ServerResponseError, StreamResult
from tests.core.prompts import GOLDEN_MAX_TOKENS, PROMPTS


def _where(step: str, issue: str) -> str:
    return f"[{issue}] after {step}" if issue else f"after {step}"


def state(client, *, sleeping: bool, gauge: dict, step: str, issue: str = "") -> None:
    """/is_sleeping == sleeping and vllm:engine_sleep_state == gauge, read back to back."""
    seen = client.state()
    oracle.equal("flags.is_sleeping", seen.is_sleeping, sleeping, f"{_where(step, issue)}: /is_sleeping")
    oracle.equal("flags.gauge", fmt(seen.gauge), fmt(gauge), f"{_where(step, issue)}: vllm:engine_sleep_state")


def awake(client, *, step: str, issue: str = "") -> None:
    state(client, sleeping=False, gauge=metrics.GAUGE_AWAKE, step=step, issue=issue)


def asleep(client, level: int, *, step: str, issue: str = "") -> None:
    state(client, sleeping=True, gauge=metrics.GAUGE_BY_LEVEL[level], step=step, issue=issue)


def partially_asleep(client, *, step: str, issue: str = "", level: int = 1) -> None:
    """After a wake_up that leaves a tag of a level-`level` sleep asleep: /is_sleeping true (contract,
    #44483) and the gauge the known divergence gauge_awake_while_partially_asleep pins for the
    server's vLLM release (fails when a release changes it)."""
    pin = thresholds.divergence("gauge_awake_while_partially_asleep", client.version())
    seen = client.state()
    where = _where(step, issue)
    oracle.equal(
        "flags.is_sleeping", seen.is_sleeping, True, f"{where}: /is_sleeping while a tag is still asleep (#44483)"
    )
    oracle.equal(
        "flags.gauge",
        fmt(seen.gauge),
        fmt(pin.expected[level]),
        f"{where}: vllm:engine_sleep_state while a tag is still asleep, {pin.describe()}",
    )


def fmt(gauge: dict) -> str:
    """(awake,weights_offloaded,discard_all), e.g. (0,1,0)."""
    values = [gauge.get(k) for k in metrics.SLEEP_STATE_LABELS]
    return "(" + ",".join(f"{v:g}" if isinstance(v, (int, float)) else "?" for v in values) + ")"


def first_difference(got: list, want: list) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


def tokens(
    completion, golden_completion, *, prompt: str, step: str, issue: str = "", oracle_id: str = "output.golden_tokens"
) -> None:
    """Greedy token ids identical to the golden run, full length, cut by length (ignore_eos)."""
    got, want = completion.token_ids[0], golden_completion.token_ids[0]
    where = _where(step, issue)
    if got != want:
        oracle.fail(
            oracle_id,
            f"{where}: token ids for {prompt!r} (first difference at position "
            f"{first_difference(got, want)}; text {completion.text[0]!r})",
            got,
            want,
        )
    oracle.equal(
        "output.finish_length",
        completion.finish_reasons[0],
        "length",
        f"{where}: finish_reason for {prompt!r} (ignore_eos, max_tokens {GOLDEN_MAX_TOKENS})",
    )


def result(future, timeout_s: float, *, client, step: str, issue: str = ""):
    """The result of a background request: the oracle requests.completes fails when a live server answered
    it with a body that is no completion. Still open past timeout_s it is no answer (liveness.NoAnswer, or
    what a server that is not live is: measure.wait_for_server). Anything else the request raised
    propagates as it is: a live server's error answer is api.status, a dead engine a liveness.Errored, and
    a refused connection or a bug in the test proves nothing about the request (errored)."""
    where = _where(step, issue)
    measure.wait_for_server(future.done, timeout_s, f"{where}: a held request to end", client.confirm_live)
    try:
        return future.result()
    except ServerResponseError as e:
        oracle.fail("requests.completes", f"{where}: a held request", f"answered: {e}", "a completion", "==")


def golden(
    client, golden_run: dict, *, step: str, issue: str = "", prompts=None, oracle_id: str = "output.golden_tokens"
) -> None:
    """Every prompt (default: all of PROMPTS) regenerates its golden token ids."""
    for prompt in prompts or PROMPTS:
        tokens(
            client.complete(prompt, GOLDEN_MAX_TOKENS),
            golden_run[prompt],
            prompt=prompt,
            step=step,
            issue=issue,
            oracle_id=oracle_id,
        )


def take_golden(client, prompts) -> dict:
    """prompt -> Completion (greedy, ignore_eos, GOLDEN_MAX_TOKENS tokens, logprobs=1), each checked to be
    full length and cut by length: the reference every output oracle compares with (a precondition)."""
    out = {}
    for prompt in prompts:
        c = client.complete(prompt, GOLDEN_MAX_TOKENS, logprobs=1)
        if len(c.token_ids[0]) != GOLDEN_MAX_TOKENS or c.finish_reasons != ["length"]:
            raise oracle.Precondition(
                f"golden run for {prompt!r}: expected {GOLDEN_MAX_TOKENS} tokens ending by length, got "
                f"{len(c.token_ids[0])} ending {c.finish_reasons}"
            )
        out[prompt] = c
    return out


def logprob_drift(completion, golden_completion) -> float:
    """max |logprob - golden logprob| over the sampled tokens (same tokens: check them first)."""
    want, got = golden_completion.logprobs[0], completion.logprobs[0]
    oracle.equal("output.logprob_drift", len(got), len(want), "token logprobs returned (the golden's count)")
    return max(abs(a - b) for a, b in zip(got, want))


def golden_with_logprobs(
    client,
    recorder,
    golden_run: dict,
    prompts,
    cell_id,
    *,
    step: str,
    issue: str = "",
    oracle_id: str = "output.golden_tokens",
) -> float:
    """Every prompt regenerates its golden token ids, and the worst per-token logprob drift over all of
    them is within logprob_drift_max; returns that drift (all drifts are recorded)."""
    drifts = {}
    for prompt in prompts:
        after = client.complete(prompt, GOLDEN_MAX_TOKENS, logprobs=1)
        tokens(after, golden_run[prompt], prompt=prompt, step=step, issue=issue, oracle_id=oracle_id)
        drifts[prompt] = logprob_drift(after, golden_run[prompt])
        recorder.record(
            measure.current_test(),
            "logprob_drift",
            drifts[prompt],
            "nats",
            prompt=prompt,
            step=step,
            golden=golden_run[prompt].logprobs[0],
            seen=after.logprobs[0],
        )
    worst = max(drifts, key=lambda p: drifts[p])
    oracle.bounded(
        recorder,
        "output.logprob_drift",
        drifts[worst],
        cell_id,
        f"{_where(step, issue)}: max |logprob - golden| per token, worst prompt {worst!r} (all prompts: {drifts})",
    )
    return drifts[worst]


def accepted(client, futures, count: int, what: str) -> None:
    """`count` requests sent in the background are accepted (/load) or one of them already ended."""
    measure.wait_for_server(
        lambda: client.load() >= count or any(f.done() for f in futures),
        thresholds.get("request_completion_s_max"),
        what,
        client.confirm_live,
    )


def held(oracle_id: str, client, futures, window_s: float, what: str) -> None:
    """The oracle `oracle_id`: every request of `futures` stays pending, and /is_sleeping true, for the
    whole window. A request a live server answered inside it (a completion, or an error answer: either
    way not held) fails the oracle with how it ended. A request that ended any other way (no answer, a
    dead engine, a refused connection, a bug in the test) raises what it ended with, as does a server
    that stops answering /is_sleeping: neither shows what the scheduler did (errored)."""

    def pending():
        ended = {i: ended_how(f, client) for i, f in enumerate(futures) if f.done()}
        if ended:
            oracle.fail(oracle_id, what, f"requests ended inside the window: {ended}", "all pending", "")
        return client.is_sleeping()

    measure.assert_holds(oracle_id, pending, window_s, what=f"{what} (is_sleeping true)")


def ended_how(future, client) -> str:
    """How a finished background request ended, for a message; raises what it raised unless that is
    a live server's answer (an oracle's failure: api.status; a body that is no completion), and what a
    stream's end stands for when it is no answer of a live server (client.check_stream: broken off,
    silent, cut on a server no longer live)."""
    error = future.exception()
    if error is None:
        value = future.result()
        if isinstance(value, StreamResult):
            client.check_stream(value, "a background stream")
        return f"finish_reasons {getattr(value, 'finish_reasons', value)}"
    if isinstance(error, (oracle.OracleFailure, ServerResponseError)):
        return f"answered: {error}"
    raise error


def load_drains(client, what: str) -> None:
    measure.wait_for_server(
        lambda: client.load() == 0,
        thresholds.get("request_completion_s_max"),
        f"/load back to 0 {what}",
        client.confirm_live,
    )


def healthy(client, step: str) -> None:
    """/health answers 200 (the API server up and its engine alive): a liveness oracle, which the verdict
    counts only for a defect that is an error answer. No answer raises liveness.NoAnswer; a refused
    connection propagates."""
    status = client.health_status()
    oracle.equal("server.healthy", status, 200, f"GET /health after {step}")
