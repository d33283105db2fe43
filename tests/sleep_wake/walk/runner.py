"""Runs planned walks against a server and judges every step by the model (Jepsen's habit: the history
is checked against the model after every operation, not at the end of one hand-written path).

Each operation is one client call (or a request) whose own result the model predicts (its status, the
serving checkpoint's golden, cached tokens, how a request in flight ends); after it, every invariant
of the state the model says the server is now in is measured: both sleep flags, /health, the GPU bytes
of the server's processes and the host bytes of its process tree, each bound failing its own oracle.
A failure is reported with the walk so far and the shortest replay (plan.shrink_candidates) as lines
for SLEEPWAKE_WALK_REPLAY.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from tests.sleep_wake.lib import expect, host_memory, measure, oracle, thresholds
from tests.sleep_wake.lib.background import background, end_clock, generated_tokens, wait_decoding
from tests.sleep_wake.lib.memory import settled_gpu_bytes
from tests.sleep_wake.lib.prompts import GOLDEN_MAX_TOKENS, LONG_PROMPTS, PROMPTS
from tests.sleep_wake.walk import model, plan
from tests.sleep_wake.walk import operations as ops
from tests.sleep_wake.walk.model import State

STREAM_TOKENS = 128  # a request in flight: long enough to be mid-decode when /sleep lands
SEED_N, SEED = 4, 1234
LONG = LONG_PROMPTS[0]  # the prompt of the prefix-cache operations: several KV blocks long
IN_FLIGHT = PROMPTS[3]  # a request in flight: shorter than one KV block, so it caches nothing


@dataclasses.dataclass
class Goldens:
    """What each checkpoint serves: greedy completions of PROMPTS and LONG, the seeded n=4 sample, and
    the uninterrupted STREAM_TOKENS-token run a paused request must resume into."""
    greedy: dict
    seeded: list
    stream: list


@dataclasses.dataclass
class Context:
    server: object
    client: object
    recorder: object
    cell_id: str
    checkpoints: dict  # "A"/"B" -> absolute checkpoint dir
    goldens: dict  # "A"/"B" -> Goldens
    sizes: model.Sizes
    host_awake: int


def take_goldens(client) -> Goldens:
    greedy = expect.take_golden(client, PROMPTS + [LONG])
    seeded = client.complete(PROMPTS[2], GOLDEN_MAX_TOKENS, temperature=1.0, seed=SEED, n=SEED_N).token_ids
    stream = client.complete(IN_FLIGHT, STREAM_TOKENS).token_ids[0]
    return Goldens(greedy, seeded, stream)


class Walker:
    """One server's walks, from INITIAL, step by step."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.state = model.INITIAL
        self.step_index = 0
        self.held = None  # (future, ExitStack holding its pool) of a stream frozen by a level-0 keep
        self.version = ctx.client.version()
        self._prompt = 0
        # A step emptied the prefix cache (a sleep of level >= 1, a reset) and no request of the long
        # prompt has looked since: see _look_at_emptied_cache.
        self.emptied_unseen = False

    # --- one step -------------------------------------------------------------------------------
    def step(self, op) -> None:
        before = self.state
        ops.require_applicable(op, before, self.step_index)
        getattr(self, "_" + op.name)(op, before)
        self.state = op.apply(before)
        self.emptied_unseen = ops.emptied_cache_unseen(self.emptied_unseen, op, before, self.state)
        self._check_state(f"step {self.step_index} ({op} from {before.describe()})")
        self.ctx.recorder.record("", "walk_step", self.step_index, "step", op=str(op),
                                 before=before.describe(), after=self.state.describe())
        self.step_index += 1

    def _golden(self, state: State) -> Goldens:
        return self.ctx.goldens[model.serves(state)]

    def _next_prompt(self) -> str:
        self._prompt = (self._prompt + 1) % len(PROMPTS)
        return PROMPTS[self._prompt]

    def _generate_fresh(self, op, s: State) -> None:
        prompt = self._next_prompt()
        golden = self._golden(s).greedy
        expect.golden_with_logprobs(self.ctx.client, self.ctx.recorder, golden, [prompt], self.ctx.cell_id,
                                    step=f"walk {op}", oracle_id=model.golden_oracle(s))

    def _generate_cached(self, op, s: State) -> None:
        """op: the operation, or where a probe of the cache runs (for the message)."""
        c = self.ctx.client.complete(LONG, GOLDEN_MAX_TOKENS)
        expect.tokens(c, self._golden(s).greedy[LONG], prompt=LONG, step=f"walk {op}",
                      oracle_id=model.golden_oracle(s))
        predicted = model.hits_cache(s, "long")
        oracle.equal("prefix_cache.hit_iff_cached", bool(c.cached_tokens), predicted,
                     f"walk {op}: the long prompt hit cached tokens ({c.cached_tokens!r}) in ({s.describe()})")

    def _generate_n4(self, op, s: State) -> None:
        got = self.ctx.client.complete(PROMPTS[2], GOLDEN_MAX_TOKENS, temperature=1.0, seed=SEED, n=SEED_N)
        oracle.equal("output.seeded_sampling", got.token_ids, self._golden(s).seeded,
                     f"walk {op}: seeded n={SEED_N} sampling of checkpoint {model.serves(s)}")

    def _generate_stream(self, op, s: State) -> None:
        prompt = self._next_prompt()
        result = self.ctx.client.complete_stream(prompt, GOLDEN_MAX_TOKENS)
        self.ctx.client.check_stream(result, f"walk {op}: a stream of {prompt!r}")
        oracle.holds("requests.clean_end", result.error is None and result.finish_reasons == ["length"],
                     f"walk {op}: a stream of {prompt!r}", (result.finish_reasons, result.error), "length")
        want = self._golden(s).greedy[prompt].token_ids[0]
        if result.token_ids[0] != want:
            oracle.fail(model.golden_oracle(s), f"walk {op}: streamed token ids for {prompt!r}",
                        result.token_ids[0], want)

    def _sleep(self, op, s: State) -> None:
        level, mode, in_flight = op.params
        client = self.ctx.client
        moves = ops.moves_memory(op, s)  # a level-0 pause, a sleep while asleep: no neighbour need wait
        if not in_flight:
            client.sleep(level=level, mode=mode, memory_moves=moves)
            return
        # The sleep must land while the request decodes. Where the worker brackets its own sleep
        # (client.phases_in_server) it does: only the executor's sleep, after the pause, waits for FREE.
        # Elsewhere a FREE window holds from before the request starts until the sleep answers (mode wait
        # drains first); a sleep that unmaps nothing needs none, and one would only keep every neighbour's
        # wakes and starts out for that second.
        # An ExitStack, not a with-block: a request a level-0 keep holds outlives this step (self.held), and
        # on a failure background() sees the exception and wakes the engine, so a request the defect left
        # held ends now rather than at its 60 s client timeout.
        with contextlib.ExitStack() as stack:
            pool = stack.enter_context(background(client))
            with client.sleep_window() if moves else contextlib.nullcontext():
                since = generated_tokens(client)
                stream = pool.submit(client.complete_stream, IN_FLIGHT, STREAM_TOKENS,
                                     timeout_s=thresholds.get("request_completion_s_max"))
                stream_end = end_clock(stream)
                wait_decoding(client, [stream], 1, since, 4)
                sent = time.perf_counter()
                client.sleep(level=level, mode=mode, memory_moves=moves)
                at_answer = generated_tokens(client) - since  # what the engine had generated when it answered
            outcome = model.in_flight_outcome(mode, level)
            if outcome.ends == "held":
                self.held = (stream, stack.pop_all())
                return
            if outcome.ends == "completed":  # mode wait drains before it answers
                want = len(self._golden(s).stream)
                oracle.holds("requests.ends_in_race", at_answer >= want,
                             f"walk {op}: tokens the engine had generated for the drained request when /sleep "
                             "answered", at_answer, f">= {want} (all of them)")
                bound, oracle_id = thresholds.get("request_completion_s_max"), "requests.completes"
            else:  # mode abort: the abort outputs go out before the pause completes
                bound, oracle_id = thresholds.get("abort_s_max"), "requests.abort_time"
            measure.wait_until(stream.done, bound, what=f"walk {op}: the request in flight to end",
                               oracle_id=oracle_id, confirm_live=client.confirm_live)
            client.check_stream(stream.result(), f"walk {op}: the request in flight")
            self._in_flight_ended(op, s, outcome.ends, stream.result(), stream_end() - sent)
            expect.load_drains(client, f"after walk {op}")

    def _in_flight_ended(self, op, s: State, ends: str, result, seconds: float) -> None:
        want = self._golden(s).stream
        got = result.token_ids[0] if result.token_ids else []
        if got != want[:len(got)]:
            oracle.fail(model.golden_oracle(s), f"walk {op}: tokens streamed before the sleep", got, want[:len(got)])
        if ends == "aborted":
            oracle.bounded(self.ctx.recorder, "requests.abort_time", seconds, self.ctx.cell_id,
                           f"walk {op}: seconds from /sleep to the end of the aborted request")
            aborted = result.finish_reasons[0] == "abort" or (result.finish_reasons[0] is None and len(got) < len(want))
            oracle.holds("requests.abort_aborts", aborted, f"walk {op}: the request in flight",
                         (result.finish_reasons, len(got), result.error), "aborted")
            if result.error is not None:
                oracle.holds("requests.clean_end", result.error.startswith(("error event", "HTTP")),
                             f"walk {op}: how the aborted request ended", result.error, "abort or error event")
        else:  # "completed": mode wait drains before the executor sleeps
            oracle.equal("requests.clean_end", (result.finish_reasons, result.error, len(got)),
                         (["length"], None, len(want)), f"walk {op}: the request in flight, drained by mode wait")

    def _wake(self, op, s: State) -> None:
        tags = op.params[0]
        self.ctx.client.wake_up(list(tags) if tags is not None else None, memory_moves=ops.moves_memory(op, s))
        if self.held is not None and not model.sleeping(op.apply(s)):
            stream, pool = self.held
            self.held = None
            try:
                result = expect.result(stream, thresholds.get("request_completion_s_max"), client=self.ctx.client,
                                       step=f"walk {op}: the request a level-0 keep paused")
                self.ctx.client.check_stream(result, f"walk {op}: the request a level-0 keep paused")
            finally:
                pool.close()  # shuts the pool down (background), its request having ended
            oracle.equal("requests.resumes_after_keep", (result.finish_reasons, result.error), (["length"], None),
                         f"walk {op}: how the paused request ended after the wake")
            want = self._golden(s).stream
            if result.token_ids[0] != want:
                oracle.fail("prefix_cache.kept_paused_request", f"walk {op}: the paused request's tokens "
                            f"(first difference at {expect.first_difference(result.token_ids[0], want)})",
                            result.token_ids[0], want)
        elif self.held is not None:
            stream, _ = self.held
            if stream.done():
                self.ctx.client.check_stream(stream.result(), f"walk {op}: the paused request while still asleep")
            oracle.holds("requests.held_while_paused", not stream.done(),
                         f"walk {op}: the paused request while still asleep", "ended", "open")

    def _reload(self, op, s: State) -> None:
        path = op.params[0]
        self.ctx.client.reload_weights(self.ctx.checkpoints[path] if path else None)

    def _reset_prefix_cache(self, op, s: State) -> None:
        oracle.equal("api.reset_prefix_cache_result", self.ctx.client.reset_prefix_cache(),
                     model.reset_prefix_cache_result(self.version), f"walk {op}")

    # --- after every step -------------------------------------------------------------------------
    def _check_state(self, where: str) -> None:
        s, ctx = self.state, self.ctx
        sleeping, gauge = model.flags(s, self.version)
        expect.state(ctx.client, sleeping=sleeping, gauge=gauge, step=f"walk {where}")
        expect.healthy(ctx.client, f"walk {where}")
        if model.hits_cache(s, "long"):
            # The cached blocks are part of the state: after every step that keeps them (a level-0 pause
            # and its wake, a reload of the same weights, misuse), a repeat still hits them. Asking
            # leaves the state as it is; where nothing is cached, asking would cache it, so only
            # generate_cached looks there.
            self._generate_cached(f"the cache probe after {where}", s)
        elif self.emptied_unseen and model.can_run(s):
            self._look_at_emptied_cache(where, s)
        band = model.device_band(s, ctx.sizes, ctx.cell_id)
        device = settled_gpu_bytes(ctx.server, f"walk {where}", done=lambda b: not band.violations(b),
                                   recorder=ctx.recorder)
        host = host_memory.server_host_memory(ctx.server)[0].rss
        hband = model.host_band(s, self.version, ctx.host_awake, ctx.sizes.weights_bytes, ctx.cell_id)
        ctx.recorder.record("", "walk_bytes", device, "bytes", host=host, state=s.describe())
        with oracle.together():
            for b in band.violations(device):
                oracle.fail(b.oracle, f"walk {where}: GPU bytes of the server ({b.what})", device, b.value,
                            b.relation)
            for b in hband.violations(host):
                oracle.fail(b.oracle, f"walk {where}: host bytes of the server's processes ({b.what})", host,
                            b.value, b.relation)

    def _look_at_emptied_cache(self, where: str, s: State) -> None:
        """A cache that should be empty is seen to be only by a request of the long prompt, which fills
        it again; where the plan sends none before the next reset, the walk looks itself at the first
        state that can serve one, then resets, so the state is the plan's again. Without it, a sleep that
        kept the blocks (sleep_while_paused_keeps_prefix_cache) passed whenever the plan happened to
        reset the cache before its next request of that prompt."""
        self.emptied_unseen = False
        c = self.ctx.client.complete(LONG, GOLDEN_MAX_TOKENS)
        oracle.equal("prefix_cache.hit_iff_cached", bool(c.cached_tokens), False,
                     f"walk: the long prompt, the first time since the cache was emptied, after {where}: "
                     f"cached tokens {c.cached_tokens!r} in ({s.describe()})")
        self._reset_prefix_cache(f"the reset after looking, {where}", s)

    def probe(self, walk) -> None:
        """A terminal probe (plan.terminal_probes): the walk to a partial wake, then the full wake that the
        pinned divergence full_wake_remaps_resident_pool answers; the server is not walked any further."""
        *prefix, last = walk
        for op in prefix:
            self.step(op)
        pin = thresholds.divergence("full_wake_remaps_resident_pool", self.version)
        resp = self.ctx.client.wake_up(None, check=False)
        oracle.equal("api.full_wake_from_partial", {"status": resp.status_code}, pin.expected,
                     f"walk probe {last} from ({self.state.describe()}), {pin.describe()}; body {resp.text[:200]}")
        if not pin.applies:  # as documented: every tag resident again, and the walk's checks hold
            self.state = ops.effect(last, self.state)
            self._check_state(f"probe {last}")

    # --- whole walks ------------------------------------------------------------------------------
    def run(self, walks, seed: int, shard: int) -> None:
        """Every walk in order; a failure carries the replay of the walk so far and its shrunk form."""
        for walk in walks:
            start = self.state
            for i, op in enumerate(walk):
                try:
                    self.step(op)
                except oracle.OracleFailure as failure:
                    raise plan.with_replay(failure, seed, shard, walk, i, start, "a fresh server",
                                           f"--test_filter=TestStateWalkShard{shard}") from None
