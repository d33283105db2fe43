"""A seeded n=4 sampled request (parallel sampling: one parent, four child requests) is streaming
when /sleep?mode=abort arrives: the sleep aborts choices that could not have finished yet (seen in the
stream, not inferred), every choice ends promptly, nothing leaks (NVML bytes after wake, /load), and
the engine serves golden and seeded output afterwards (#45520, #45326)."""

import time

from tests.core import expect, measure, memory, oracle, stalls, thresholds
from tests.core.background import LOST, background, end_clock, generated_tokens, race_outcome, wait_decoding
from tests.core.memory import settled_gpu_bytes
from tests.core.prompts import GOLDEN_MAX_TOKENS, PROMPTS

ISSUE = "#45520/#45326 abort during parallel sampling"
N = 4
SEED = 1234
PROMPT = PROMPTS[2]  # shorter than one KV block: never a prefix-cache hit, so runs compute alike
STREAM_MAX_TOKENS = 768  # still decoding when /sleep lands


def _sampled(client):
    # temperature 0 with n > 1 is a 400 in vLLM 0.26.0 ("n must be 1 when using greedy sampling").
    return client.complete(PROMPT, GOLDEN_MAX_TOKENS, temperature=1.0, seed=SEED, n=N)


class TestAbortDuringParallelSampling:
    def test_abort_ends_every_choice_without_leak(self, server, client, golden, recorder, cell):
        test = measure.current_test()
        reference = _sampled(client)
        again = _sampled(client)
        # Without it "the same ids after wake" would prove nothing.
        if again.token_ids != reference.token_ids or len(reference.token_ids) != N:
            raise oracle.Precondition(
                f"seeded n={N} sampling is not reproducible before any sleep: expected "
                f"{reference.token_ids}, seen {again.token_ids}"
            )
        awake = settled_gpu_bytes(server, "awake, before the aborted request", recorder=recorder)
        recorder.record(test, "awake_bytes", awake, "bytes")

        # The clock beside the abort: a host stall in its window leaves its time out (tests/core/stalls.py).
        with background(client) as pool, stalls.Sampler() as sampler:
            with client.sleep_window():  # the sleep must land while the n=4 request decodes
                since = generated_tokens(client)
                stream = pool.submit(
                    client.complete_stream,
                    PROMPT,
                    STREAM_MAX_TOKENS,
                    temperature=1.0,
                    seed=SEED,
                    n=N,
                    timeout_s=thresholds.get("request_completion_s_max"),
                )
                stream_end = end_clock(stream)
                wait_decoding(client, [stream], 1, since, 2 * N)
                sent = time.perf_counter()
                client.sleep(level=1, mode="abort")
            # Tokens the engine had generated for the request when /sleep answered: fewer than finishing
            # every choice takes means the sleep landed where the choices could not all have finished.
            at_sleep = generated_tokens(client) - since
            measure.wait_for_server(
                stream.done,
                thresholds.get("request_completion_s_max"),
                f"[{ISSUE}] the n={N} stream to end after /sleep?mode=abort",
                client.confirm_live,
            )
            result = stream.result()
        # A broken connection, a stream silent past its timeout, or one cut on a server no longer live is no
        # verdict on the abort.
        client.check_stream(result, f"[{ISSUE}] the n={N} stream")
        stalls.bounded_unless_stalled(
            recorder,
            sampler,
            "requests.abort_time",
            sent,
            stream_end(),
            cell.id,
            f"[{ISSUE}] seconds from /sleep?mode=abort to the end of the n={N} stream",
        )
        recorder.record(
            test,
            "aborted_stream",
            {
                "finish_reasons": result.finish_reasons,
                "tokens": [len(t) for t in result.token_ids],
                "error": result.error,
                "tokens_at_sleep": at_sleep,
            },
            "",
        )
        if result.error is not None:
            oracle.holds(
                "requests.clean_end",
                result.error.startswith("error event"),
                f"[{ISSUE}] how the n={N} stream ended",
                result.error,
                "finish reasons or an abort error event",
            )
        ends = [(r, len(t)) for r, t in zip(result.finish_reasons, result.token_ids)]
        # Aborted: finish_reason abort, or none for a choice that streamed nothing (vLLM skips its empty
        # chunks: openai/completion/serving.py, "not delta_token_ids and not previous_num_tokens[i]") or
        # when an error event ended the whole stream. A choice that streamed tokens always gets a chunk
        # with its finish reason, so one that ends without it was never reported finished (#45326).
        aborted = [
            i
            for i, (r, n) in enumerate(ends)
            if r == "abort" or (r is None and n < STREAM_MAX_TOKENS and (n == 0 or result.error))
        ]
        full = [i for i, (r, n) in enumerate(ends) if r == "length" and n == STREAM_MAX_TOKENS]
        oracle.holds(
            "requests.clean_end",
            len(aborted) + len(full) == N,
            f"[{ISSUE}] each of the {N} choices ends aborted or by 'length' at {STREAM_MAX_TOKENS} tokens",
            f"(finish_reason, tokens) {ends}",
            "aborted or full length",
        )
        # A sleep that lets requests run to the end (drains) instead of aborting them passes every other
        # check here. The request was decoding when /sleep was sent (wait_decoding): where its tokens still
        # came after that, a sleep that aborts ends a choice and one that let every choice finish drained.
        # Where every token came before, the request finished first and the abort met nothing in flight.
        race, shows = race_outcome(result, sent, STREAM_MAX_TOKENS)
        if race == LOST:
            raise oracle.Precondition(
                f"[{ISSUE}] the n={N} request finished before /sleep was sent ({shows}), so the abort met no "
                "request in flight (a longer one does not fit max_model_len): run the cell on a quieter host"
            )
        oracle.holds(
            "requests.abort_aborts",
            bool(aborted),
            f"[{ISSUE}] /sleep?mode=abort with {N} choices in flight ({at_sleep} of the "
            f"{N * STREAM_MAX_TOKENS} tokens finishing them takes generated when /sleep answered)",
            f"(finish_reason, tokens) {ends}",
            "at least one aborted",
        )
        expect.load_drains(client, "after the abort (a child request leaked)")
        expect.asleep(client, 1, step="sleep level 1 (mode abort) during parallel sampling", issue=ISSUE)
        client.wake_up()
        expect.awake(client, step="full wake after the abort", issue=ISSUE)
        memory.expect_restored(server, recorder, cell.id, awake, "the abort and a full wake")
        expect.golden(client, golden, step="abort during parallel sampling and wake", issue=ISSUE)
        oracle.equal(
            "output.seeded_sampling",
            _sampled(client).token_ids,
            reference.token_ids,
            f"[{ISSUE}] seeded n={N} sampling after abort and wake",
        )
