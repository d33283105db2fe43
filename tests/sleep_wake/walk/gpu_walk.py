"""The state walk's GPU tier: how each operation is made on a real vLLM server over HTTP, and what the
walk observes of it (the one driver, driver.py, decides the order and keeps the record).

Each operation is one client call (or a request) whose own result the model predicts (its status, the
serving checkpoint's golden, cached tokens, how requests in flight or waiting end); after it, every
invariant of the state the model says the server is now in is measured: both sleep flags, /health, the
requests still waiting, the GPU bytes of the server's processes and the host bytes of its process tree,
each bound failing its own oracle. Requests sent while scheduling is paused run in the background;
the tier keeps them (Open) until the wake that runs them, or the abort sleep that ends them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable

import requests

from tests.core import expect, host_memory, measure, oracle, pushes, stalls, thresholds
from tests.core.background import (
    CAUGHT,
    LOST,
    UNSURE,
    background,
    end_clock,
    generated_tokens,
    race_outcome,
    wait_decoding,
)
from tests.core.client import SleepWakeClient, StreamResult
from tests.core.memory import settled_gpu_bytes
from tests.core.prompts import (
    GOLDEN_MAX_TOKENS,
    IN_FLIGHT,
    LONG_PROMPTS,
    PROMPTS,
    SEED,
    SEED_N,
    SEEDED_PROMPT,
    SEEDED_TEMPERATURE,
    STREAM_TOKENS,
)
from tests.core.trainer import Trainer
from tests.core.walk import model, observations, plan
from tests.core.walk import operations as ops
from tests.core.walk.model import State
from tools.launcher import door_host
from tools.launcher.interface import Server
from tools.matrix import HTTP

LONG = LONG_PROMPTS[0]  # the prompt of the prefix-cache operations: several KV blocks long
WALK_PROMPTS = PROMPTS + [LONG]


@dataclasses.dataclass
class Goldens:
    """What each checkpoint serves, from a fresh server of the cell started on it (the golden actions of
    tests/sleep_wake/goldens, never the server under test): greedy completions of WALK_PROMPTS, the
    seeded n=4 sample, and the uninterrupted STREAM_TOKENS-token run a paused request must resume into."""

    greedy: dict
    seeded: list
    stream: list


@dataclasses.dataclass
class Context:
    server: Server
    client: SleepWakeClient
    recorder: measure.Recorder
    cell_id: str
    checkpoints: dict  # "A"/"B" -> absolute checkpoint dir
    goldens: dict  # "A"/"B" -> Goldens
    sizes: model.Sizes
    host_awake: int
    door: str = HTTP  # the front door the walk sends through (tools/matrix.bzl FRONT_DOORS)
    trainer: Trainer | None = None  # the RL trainer beside the server, for the pushes that cross processes

    @property
    def door_cannot_stream(self) -> bool:
        return door_host.cannot(self.door, "stream") is not None

    @property
    def door_can_pause(self) -> bool:
        return door_host.cannot(self.door, "pause") is None

    @property
    def door_enqueues(self) -> bool:
        """A one-call-at-a-time door (vllm.LLM) sends a request that must wait with /enqueue (LLM.enqueue) and
        collects it with /wait_for_completion (operations.door_why_not)."""
        return door_host.cannot(self.door, "concurrent_calls") is not None


def race_tokens(in_flight) -> int:
    """The tokens each request a sleep races asks for. Long enough to still decode when /sleep answers
    (thresholds race_tokens, sized from the walk_race records); a race lost anyway runs again with twice
    as many. A sleep that must see a second request arrive during its drain (in-flight kind 2) keeps the
    golden's STREAM_TOKENS: its drain, after the engine is seen paused, must outlast that request's trip."""
    return STREAM_TOKENS if in_flight == 2 else int(thresholds.get("race_tokens"))


@dataclasses.dataclass
class Open:
    """A request the walk sent that has not ended: its future, what the model calls it (QUEUED_KINDS, or
    "held" for a stream a keep froze), the prompt and its own kind of request (an operation's name), and
    for a held request the checkpoint its first tokens came from, the pool its future runs on (the last of
    a race's held requests gives it back), the tokens it asked for (its race's: race_tokens, twice that
    where its race ran again) and its choices."""

    future: concurrent.futures.Future
    kind: str
    op_name: str
    prompt: str
    origin: str | None = None
    pool: contextlib.ExitStack | None = None
    tokens: int = STREAM_TOKENS
    n: int = 1  # its choices: a held n=4 request has four
    enqueued: bool = False  # sent with /enqueue: its future is set by /wait_for_completion (GpuSubject._collect)


@dataclasses.dataclass
class Flight:
    """One request of a race (model.IN_FLIGHT_REQUESTS): its future, whether it streams, its choices and
    the moment it ended (end())."""

    future: concurrent.futures.Future
    streamed: bool
    n: int
    end: Callable[[], float]

    @property
    def op_name(self) -> str:
        """The generate it is judged as once it ran on (a held one): a stream, or a whole request."""
        return "generate_stream" if self.streamed else "generate_fresh"


@dataclasses.dataclass
class Race:
    """The requests of a sleep's in-flight kind, each of `tokens` tokens, raced against a /sleep sent at
    perf_counter `sent`: their flights (the first the stream of kinds 1 and 2), what the engine had
    generated for them when /sleep answered, the request that arrived during a wait drain
    (sleep:L:wait:2), the pool they run on, and whether the sleep caught them in flight
    (background.race_outcome: CAUGHT, UNSURE, LOST) with what shows it."""

    flights: list
    tokens: int
    sent: float
    at_answer: float
    late: Open | None
    stack: contextlib.ExitStack
    sampler: stalls.Sampler  # the clock beside the race: a host stall leaves an abort's time out
    outcome: str = CAUGHT
    shows: str = "it was still open when /sleep answered"

    @property
    def stream(self) -> concurrent.futures.Future:
        return self.flights[0].future

    @property
    def choices(self) -> int:
        return sum(f.n for f in self.flights)

    def judge_outcome(self, drains: bool) -> None:
        """The race's outcome over its ended flights: LOST if any lost (the sleep met it finished), else
        UNSURE if any is, else CAUGHT (one still open was in flight)."""
        ended = [f for f in self.flights if f.future.done()]
        outcomes = [race_outcome(f.future.result(), self.sent, self.tokens, drains) for f in ended]
        if not outcomes:
            return
        for kind in (LOST, UNSURE):
            found = [shows for outcome, shows in outcomes if outcome == kind]
            if found:
                self.outcome, self.shows = kind, found[0]
                return
        self.outcome, self.shows = CAUGHT, outcomes[0][1]


def _in_flight_call(client, streamed: bool, n: int, tokens: int):
    """A request of a race: a stream, or one answered whole (its tokens all arrive when it answers, so its
    StreamResult's one arrival is that moment); n > 1 samples seeded choices."""
    timeout_s = thresholds.get("request_completion_s_max")
    sampling = dict(temperature=SEEDED_TEMPERATURE, seed=SEED, n=n) if n > 1 else {}
    if streamed:
        return lambda: client.complete_stream(IN_FLIGHT, tokens, timeout_s=timeout_s, **sampling)

    def whole():
        c = client.complete(IN_FLIGHT, tokens, timeout_s=timeout_s, **sampling)
        return StreamResult(
            finish_reasons=list(c.finish_reasons),
            token_ids=c.token_ids,
            num_tokens=sum(map(len, c.token_ids)),
            error=None,
            status=200,
            arrivals=[time.perf_counter()],
        )

    return whole


def abort_give_up_s() -> float:
    """How long an aborted request is waited for before it is no answer: twice abort_s_max, so that an end
    past the bound is measured (a defect sized 1.5 times past it is caught by requests.abort_time), while a
    request an abort never ends costs a fraction of a hang's request_completion_s_max."""
    return 2 * thresholds.get("abort_s_max")


def _request(client, op_name: str, prompt: str, timeout_s: float):
    """The request of a generate operation, as a call that returns what it answered."""
    if op_name == "generate_stream":
        return lambda: client.complete_stream(prompt, GOLDEN_MAX_TOKENS, timeout_s=timeout_s)
    if op_name == "generate_n4":
        return lambda: client.complete(
            prompt, GOLDEN_MAX_TOKENS, temperature=SEEDED_TEMPERATURE, seed=SEED, n=SEED_N, timeout_s=timeout_s
        )
    return lambda: client.complete(prompt, GOLDEN_MAX_TOKENS, timeout_s=timeout_s)


def warm_up(client, golden: Goldens, streams: bool = True) -> None:
    """One request of every kind the walk sends, each judged against the golden of the checkpoint the
    fresh server started on: what the server holds afterwards is the baseline of every band. streams:
    whether the server's front door streams."""
    for prompt in WALK_PROMPTS:
        c = client.complete(prompt, GOLDEN_MAX_TOKENS, logprobs=1)
        expect.tokens(c, golden.greedy[prompt], prompt=prompt, step="the walk's warm-up on a fresh server")
    seeded = client.complete(SEEDED_PROMPT, GOLDEN_MAX_TOKENS, temperature=SEEDED_TEMPERATURE, seed=SEED, n=SEED_N)
    oracle.equal(
        "output.seeded_sampling",
        seeded.token_ids,
        golden.seeded,
        "the walk's warm-up on a fresh server: the seeded sample",
    )
    if not streams:
        # A door without a stream (door_host.CANNOT) is walked without one: the same request, answered whole.
        whole = client.complete(IN_FLIGHT, STREAM_TOKENS)
        oracle.equal(
            "output.golden_tokens",
            (whole.token_ids[0], whole.finish_reasons),
            (golden.stream, ["length"]),
            "the walk's warm-up on a fresh server: the long request (this door has no stream)",
        )
        return
    stream = client.complete_stream(IN_FLIGHT, STREAM_TOKENS)
    oracle.equal(
        "output.golden_tokens",
        (stream.token_ids[0], stream.finish_reasons, stream.error),
        (golden.stream, ["length"], None),
        "the walk's warm-up on a fresh server: the long stream",
    )


class GpuSubject:
    """The walk's operations on one vLLM server (driver.Subject)."""

    replay_on = "a fresh server"

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.version = ctx.client.version()
        self.open: list[Open] = []
        self._prompt = 0
        self._pool = contextlib.ExitStack()  # runs the requests sent while paused
        self._background: concurrent.futures.ThreadPoolExecutor | None = None

    def pick(self, shard: int) -> str:
        return f"--test_filter=TestStateWalkShard{shard}"

    def close(self) -> None:
        """Joins the requests the walk left open. Called while a step's failure propagates (the walk's
        `finally`), it hands that failure to each pool's background(), which wakes the engine before it
        joins: a request the failure left held then ends now, not at its client timeout."""
        failure = sys.exc_info()
        for o in self.open:
            if o.pool is not None:
                o.pool.__exit__(*failure)
        self._pool.__exit__(*failure)

    def _golden(self, checkpoint: str) -> Goldens:
        return self.ctx.goldens[checkpoint]

    def _next_prompt(self) -> str:
        self._prompt = (self._prompt + 1) % len(PROMPTS)
        return PROMPTS[self._prompt]

    def _submit(self, call):
        if self._background is None:
            self._background = self._pool.enter_context(background(self.ctx.client, workers=8))
        return self._background.submit(call)

    # --- generates ----------------------------------------------------------------------------------
    def generate(self, op, s: State, after: State, where: str) -> None:
        if not model.can_run(s):
            self._send_paused(op, s, after, where)
            return
        getattr(self, "_" + op.name)(op, s, where)

    def _unpredicted(self, completion, n_choices: int, what: str) -> None:
        """Garbage weights or stale blocks: no golden, but the API's contract still holds: every choice
        ends by length with GOLDEN_MAX_TOKENS tokens (ignore_eos)."""
        oracle.equal(
            "output.finish_length",
            ([len(t) for t in completion.token_ids], completion.finish_reasons),
            ([GOLDEN_MAX_TOKENS] * n_choices, ["length"] * n_choices),
            f"{what} (tokens, finish reasons)",
        )

    def _generate_fresh(self, op, s: State, where: str) -> None:
        prompt = self._next_prompt()
        golden = model.golden_of(s, "short")
        if golden is None:
            self._unpredicted(self.ctx.client.complete(prompt, GOLDEN_MAX_TOKENS), 1, f"walk {where}: {prompt!r}")
            return
        expect.golden_with_logprobs(
            self.ctx.client,
            self.ctx.recorder,
            self._golden(golden).greedy,
            [prompt],
            self.ctx.cell_id,
            step=f"walk {where}",
            oracle_id=model.golden_oracle(golden),
        )

    def _generate_cached(self, op, s: State, where: str) -> None:
        c = self.ctx.client.complete(LONG, GOLDEN_MAX_TOKENS)
        self._judge_long(c, s, model.hits_cache(s, "long"), where)

    def _judge_long(self, c, s: State, hits: bool | None, where: str) -> None:
        """The long prompt's answer: its golden where the model predicts one, and (hits not None) whether it
        hit cached blocks."""
        golden = model.golden_of(s, "long")
        if golden is None:
            self._unpredicted(c, 1, f"walk {where}: the long prompt")
        else:
            expect.tokens(
                c,
                self._golden(golden).greedy[LONG],
                prompt=LONG,
                step=f"walk {where}",
                oracle_id=model.golden_oracle(golden),
            )
        if hits is not None:
            oracle.equal(
                "prefix_cache.hit_iff_cached",
                bool(c.cached_tokens),
                hits,
                f"walk {where}: the long prompt hit cached tokens ({c.cached_tokens!r}) in ({s.describe()})",
            )

    def _generate_n4(self, op, s: State, where: str) -> None:
        got = self.ctx.client.complete(
            SEEDED_PROMPT, GOLDEN_MAX_TOKENS, temperature=SEEDED_TEMPERATURE, seed=SEED, n=SEED_N
        )
        self._judge_n4(got, model.golden_of(s, "short"), f"walk {where}")

    def _judge_n4(self, got, golden: str | None, what: str) -> None:
        if golden is None:
            self._unpredicted(got, SEED_N, f"{what}: seeded n={SEED_N} sampling on garbage weights")
            return
        oracle.equal(
            "output.seeded_sampling",
            got.token_ids,
            self._golden(golden).seeded,
            f"{what}: seeded n={SEED_N} sampling of checkpoint {golden}",
        )

    def _generate_stream(self, op, s: State, where: str) -> None:
        prompt = self._next_prompt()
        self._judge_stream(
            self.ctx.client.complete_stream(prompt, GOLDEN_MAX_TOKENS),
            prompt,
            model.golden_of(s, "short"),
            f"walk {where}",
        )

    def _judge_stream(self, result, prompt: str, golden: str | None, what: str) -> None:
        self.ctx.client.check_stream(result, f"{what}: a stream of {prompt!r}")
        oracle.holds(
            "requests.clean_end",
            result.error is None and result.finish_reasons == ["length"],
            f"{what}: a stream of {prompt!r}",
            (result.finish_reasons, result.error),
            "length",
        )
        got = result.token_ids[0]
        if golden is None:
            oracle.equal("output.finish_length", len(got), GOLDEN_MAX_TOKENS, f"{what}: tokens streamed")
        elif got != self._golden(golden).greedy[prompt].token_ids[0]:
            oracle.fail(
                model.golden_oracle(golden),
                f"{what}: streamed token ids for {prompt!r}",
                got,
                self._golden(golden).greedy[prompt].token_ids[0],
            )

    def _send_paused(self, op, s: State, after: State, where: str) -> None:
        """A request sent while scheduling is paused: accepted (/load counts it) and left waiting. Through a
        door that enqueues, LLM.enqueue answers at once with its id, and its output comes with the
        /wait_for_completion of the step that ends it (_collect): its wait is seen in that output, its tokens
        those of the weights that served once it ran (a request that ran while the weights slept answers
        garbage)."""
        prompt = (
            LONG
            if op.name == "generate_cached"
            else (SEEDED_PROMPT if op.name == "generate_n4" else self._next_prompt())
        )
        kind = "long" if op.name == "generate_cached" else "plain"
        if self.ctx.door_enqueues:
            sampling = dict(temperature=SEEDED_TEMPERATURE, seed=SEED, n=SEED_N) if op.name == "generate_n4" else {}
            self.ctx.client.enqueue(prompt, GOLDEN_MAX_TOKENS, **sampling)
            self.open.append(Open(concurrent.futures.Future(), kind, op.name, prompt, enqueued=True))
            return
        call = _request(self.ctx.client, op.name, prompt, thresholds.get("request_completion_s_max"))
        self.open.append(Open(self._submit(call), kind, op.name, prompt))
        expect.accepted(
            self.ctx.client,
            [o.future for o in self.open],
            len(self.open),
            f"walk {where}: the request sent while paused, accepted",
        )

    def cancel_queued(self, op, s: State, after: State, where: str) -> None:
        """A stream of the long prompt sent while scheduling is paused, closed once /load counts it: the
        server aborts it (operations.CANCEL_QUEUED), so /load falls back to the requests still waiting
        within abort_s_max, and it never runs (the driver looks at the prefix cache it would have filled)."""
        client, waiting = self.ctx.client, len(self.open)
        body = client.completion_body(LONG, GOLDEN_MAX_TOKENS, 0.0, True, None, None, 1, stream=True)
        timeout_s = thresholds.get("request_completion_s_max")
        with client.raw("POST", "/v1/completions", json=body, stream=True, timeout=timeout_s) as response:
            oracle.equal("api.status", response.status_code, ops.EXPECTED_STATUS, f"walk {where}: the stream to cancel")
            expect.accepted(
                client,
                [o.future for o in self.open],
                waiting + 1,
                f"walk {where}: the stream sent while paused, accepted before its client goes away",
            )
        measure.wait_until(
            lambda: client.load() <= waiting,
            thresholds.get("abort_s_max"),
            what=f"walk {where}: /load back to the {waiting} requests still waiting once the stream was closed",
            oracle_id="requests.cancel_aborts",
            confirm_live=client.confirm_live,
        )

    # --- sleeps -------------------------------------------------------------------------------------
    def sleep(self, op, s: State, after: State, where: str) -> None:
        level, mode, in_flight = op.params
        client = self.ctx.client
        moves = ops.moves_memory(op, s)  # a level-0 pause, a sleep while asleep: no neighbour need wait
        existing = list(self.open)  # requests that already waited: this sleep's mode decides their end
        if not in_flight:
            client.sleep(level=level, mode=mode, memory_moves=moves)
            self._judge_waiting_at_sleep(op, s, existing, where)
            return
        # The request is judged only where the sleep caught it in flight (background.race_outcome): a race
        # it lost (it finished first), or one the client cannot tell from a sleep that let it run on, runs
        # once more from the state before, with a request twice as long.
        race = self._race(op, moves, race_tokens(in_flight), where)
        if race.outcome != CAUGHT:
            race = self._run_again(race, op, s, moves, where)
        self._judge_race(race, op, s, after, existing, where)

    def _run_again(self, first: Race, op, s: State, moves: bool, where: str) -> Race:
        """The race to judge after `first` was lost or unsure: the race run again where the model has a way
        back to `s`, else `first` where it is unsure (its tokens after /sleep was sent are what a sleep
        that let it run on shows too). One lost twice, or lost with no way back, is a Precondition: the
        sleep met no request in flight, so no oracle of one may judge it."""
        tokens = 2 * first.tokens
        try:
            way = self._way_back(op, s, tokens)
            if isinstance(way, str) and first.outcome == UNSURE:
                return first
            if isinstance(way, str):
                raise oracle.Precondition(
                    f"walk {where}: the request in flight finished before /sleep was sent ({first.shows}), so "
                    f"the sleep met no request in flight, and the race cannot run again: {way}"
                )
        except BaseException:
            first.stack.__exit__(*sys.exc_info())
            raise
        first.stack.close()  # its request ended: the pool joins at once
        self._go_back(op, s, way, f"{where}: the way back after a race {first.outcome} ({first.shows})")
        race = self._race(op, moves, tokens, f"{where}, run again with {tokens} tokens")
        if race.outcome == LOST:
            race.stack.close()
            raise oracle.Precondition(
                f"walk {where}: the request in flight finished before /sleep was sent, twice ({first.shows}; "
                f"then with {tokens} tokens, {race.shows}), so the sleep met no request in flight: a host this "
                "loaded cannot run the race; run the cell on a quieter one"
            )
        return race

    def _race(self, op, moves: bool, tokens: int, where: str) -> Race:
        """A stream of `tokens` tokens, /sleep sent once it decodes, and how it was when /sleep answered:
        its race's outcome (background.race_outcome), the aborted or drained request waited for to its end."""
        level, mode, in_flight = op.params
        client = self.ctx.client
        # The sleep must land while the request decodes. Where the worker brackets its own sleep
        # (client.phases_in_server) it does: only the executor's sleep, after the pause, waits for FREE.
        # Elsewhere a FREE window holds from before the request starts until the sleep answers (mode wait
        # drains first); a sleep that unmaps nothing needs none.
        # An ExitStack, not a with-block: a request a keep holds outlives this step (self.open), and on a
        # failure background() sees the exception and wakes the engine, so a request the defect left
        # held ends now rather than at its client timeout.
        stack = contextlib.ExitStack()
        try:
            pool = stack.enter_context(background(client, workers=3))
            sampler = stack.enter_context(stalls.Sampler())
            with client.sleep_window() if moves else contextlib.nullcontext():
                since = generated_tokens(client)
                flights = []
                for streamed, n in model.IN_FLIGHT_REQUESTS[in_flight]:
                    future = pool.submit(_in_flight_call(client, streamed, n, tokens))
                    flights.append(Flight(future, streamed, n, end_clock(future)))
                futures = [f.future for f in flights]
                wait_decoding(client, futures, len(futures), since, 4 * sum(f.n for f in flights))
                stream = futures[0]
                sent = time.perf_counter()
                late = None
                if in_flight == 2:
                    late = self._sleep_with_late_arrival(pool, op, moves, stream, where)
                else:
                    client.sleep(level=level, mode=mode, memory_moves=moves)
                at_answer = generated_tokens(client) - since  # what the engine had generated when it answered
            race = Race(flights, tokens, sent, at_answer, late, stack, sampler)
            ends = model.in_flight_outcome(mode, level).ends
            if in_flight == 2:  # still open once the engine was seen paused, or not
                race.outcome, race.shows = (
                    (CAUGHT, "it was still open once the engine was seen paused")
                    if late is not None
                    else (LOST, "it ended before the engine was seen paused, so no request could arrive in its drain")
                )
            elif ends == "aborted":
                # An abort's end is bounded too (requests.abort_time, on the seconds it took); a request that
                # never ends is no answer, whatever the mode.
                measure.wait_for_server(
                    lambda: all(f.done() for f in futures),
                    abort_give_up_s(),
                    f"walk {where}: the requests in flight to end",
                    client.confirm_live,
                )
                race.judge_outcome(drains=False)
            elif any(f.done() for f in futures):  # a keep holds them, a wait drains them before answering
                race.judge_outcome(drains=ends == "completed")
            # How far the requests had got when the sleep answered, against how long they were: the margin
            # a request in flight's length (race_tokens) keeps over a lost race (tools/bench/bazel_runs.py).
            self.ctx.recorder.record(
                "",
                "walk_race",
                at_answer,
                "tokens",
                asked=tokens,
                choices=race.choices,
                outcome=race.outcome,
                op=str(op),
            )
            return race
        except BaseException:
            stack.__exit__(*sys.exc_info())
            raise

    def _way_back(self, op, s: State, tokens: int) -> list | str:
        """The operations that take the server from where this sleep leaves it when it meets no request in
        flight back to `s`, for a race of `tokens` tokens; or why the race cannot run again."""
        words = len(IN_FLIGHT.split()) + 1  # one token a word (tests/core/prompts.py), and one to spare
        longest = self.ctx.server.config.max_model_len
        if words + tokens > longest:
            return f"a request of {tokens} tokens after its prompt does not fit max_model_len {longest}"
        level, mode, _ = op.params
        met_none = ops.sleep(level, mode).apply(s)
        way = plan.shortest_path(met_none, s, self.ctx.door)
        if way is None:
            return f"the model has no way from ({met_none.describe()}) back to ({s.describe()})"
        if any(o.name == "sleep" and o.params[2] for o in way):
            return f"the way back races a request itself ({', '.join(map(str, way))})"
        return way

    def _go_back(self, op, s: State, way: list, where: str) -> None:
        """Checks the server is where a sleep that met no request in flight leaves it, then makes each
        operation of the way back to `s`, each judged as a step is (the walk's record counts none of them)."""
        level, mode, _ = op.params
        state = ops.sleep(level, mode).apply(s)
        self.check_state(state, f"{where}, where the sleep left it")
        for o in way:
            nxt = o.apply(state)
            what = f"{where}, {o} from ({state.describe()})"
            (self.generate if o.name in ops.GENERATES else getattr(self, o.name))(o, state, nxt, what)
            self.check_state(nxt, what)
            state = nxt

    def _judge_race(self, race: Race, op, s: State, after: State, existing: list, where: str) -> None:
        """The oracles of a request in flight when /sleep landed: how it ended, or that it waits, by the
        sleep's mode, and what the sleep did to the requests that already waited."""
        level, mode, _ = op.params
        client = self.ctx.client
        stack = race.stack
        try:
            outcome = model.in_flight_outcome(mode, level)
            origin = model.served(s)
            if outcome.ends == "held":
                self._judge_waiting_at_sleep(op, s, existing, where)
                for i, f in enumerate(race.flights):
                    self._judge_held_open(f.future, after, f"walk {where}: request {i} of those a keep froze")
                # the pool the held requests run on is given back once the last of them ended
                pools: list[contextlib.ExitStack | None] = [None] * (len(race.flights) - 1) + [stack]
                for f, pool in zip(race.flights, pools):
                    self.open.append(Open(f.future, "held", f.op_name, IN_FLIGHT, origin, pool, race.tokens, f.n))
                return
            if outcome.ends == "completed":  # mode wait drains before it answers
                oracle.holds(
                    "requests.ends_in_race",
                    race.at_answer >= race.tokens * race.choices,
                    f"walk {where}: tokens the engine had generated for the drained requests when /sleep answered",
                    race.at_answer,
                    f">= {race.tokens * race.choices} (all of them)",
                )
            # An abort's end is bounded too (requests.abort_time, in _in_flight_ended on the seconds it took);
            # a request that never ends is no answer, whatever the mode.
            measure.wait_for_server(
                lambda: all(f.future.done() for f in race.flights),
                abort_give_up_s() if outcome.ends == "aborted" else thresholds.get("request_completion_s_max"),
                f"walk {where}: the requests in flight to end",
                client.confirm_live,
            )
            for i, f in enumerate(race.flights):
                what = f"walk {where}: request {i} in flight ({'a stream' if f.streamed else 'whole'}, n={f.n})"
                client.check_stream(f.future.result(), what)
                self._in_flight_ended(outcome.ends, origin, f, race, what)
            self._judge_waiting_at_sleep(op, s, existing, where)
            if race.late is not None:  # sleep:L:wait:2
                self._judge_held_open(
                    race.late.future, after, f"walk {where}: the request that arrived during the drain"
                )
                self.open.append(race.late)
            if not self.open:
                expect.load_drains(client, f"after walk {where}")
        except BaseException:
            stack.__exit__(*sys.exc_info())
            raise
        stack.close()

    def _sleep_with_late_arrival(self, pool, op, moves: bool, stream, where: str) -> Open | None:
        """/sleep?mode=wait sent, and a second request sent once the engine has paused (/is_sleeping
        true) while the first still drains: it arrives paused, so it must wait for the wake. None, once
        the sleep answered, where the first ended before the engine was seen paused: no request could
        arrive during its drain."""
        level, mode, _ = op.params
        client = self.ctx.client
        answer = pool.submit(client.sleep, level=level, mode=mode, memory_moves=moves)
        measure.wait_until(
            lambda: client.is_sleeping() or answer.done(),
            thresholds.get("request_completion_s_max"),
            poll_s=0.005,
            what=f"walk {where}: the engine paused by the wait sleep",
        )
        if stream.done():
            answer.result()  # the sleep's own failure, if any, is raised here
            return None
        if answer.done():
            raise oracle.Precondition(
                f"walk {where}: the wait sleep answered before the second request could arrive during the "
                "drain; raise STREAM_TOKENS"
            )
        prompt = self._next_prompt()
        call = _request(client, "generate_fresh", prompt, thresholds.get("request_completion_s_max"))
        late = Open(self._submit(call), "plain", "generate_fresh", prompt)
        answer.result()  # the sleep's own failure, if any, is raised here
        return late

    def _judge_held_open(self, stream, after: State, what: str) -> None:
        """A request that must wait (a stream a keep froze, a request arriving during a wait drain) is
        still open when /sleep answers; its tokens are judged whole when it ends. One that ended without
        a live server's answer (broken off, a bug in the test) raises that instead (expect.ended_how)."""
        if stream.done():
            how = expect.ended_how(stream, self.ctx.client)
            oracle.fail(model.held_oracle(after), f"{what}, right after /sleep answered", f"ended: {how}", "open")

    def _in_flight_ended(self, ends: str, origin: str, flight: Flight, race: Race, what: str) -> None:
        """How one request in flight ended (model.IN_FLIGHT): its tokens so far the serving checkpoint's
        golden (greedy requests only); an abort ends each choice that streamed a token with finish_reason
        "abort" within the bound, a wait drains every choice to its last token."""
        result, tokens = flight.future.result(), race.tokens
        got = result.token_ids[0] if result.token_ids else []
        if origin != model.GARBAGE and flight.n == 1:
            want = self._golden(origin).stream  # STREAM_TOKENS long: no golden says what a longer run adds
            n = min(len(got), len(want))
            if got[:n] != want[:n]:
                oracle.fail(model.golden_oracle(origin), f"{what}: tokens streamed before the sleep", got[:n], want[:n])
        if ends == "aborted":
            stalls.bounded_unless_stalled(
                self.ctx.recorder,
                race.sampler,
                "requests.abort_time",
                race.sent,
                flight.end(),
                self.ctx.cell_id,
                f"{what}: seconds from /sleep to the end of the aborted request",
            )
            aborted = result.finish_reasons[0] == "abort" or (result.finish_reasons[0] is None and len(got) < tokens)
            oracle.holds(
                "requests.abort_aborts",
                aborted,
                what,
                (result.finish_reasons, len(got), result.error),
                "aborted",
            )
            if flight.n > 1:
                self._every_choice_ended(result, what)
            if result.error is not None:
                oracle.holds(
                    "requests.clean_end",
                    result.error.startswith(("error event", "HTTP")),
                    f"{what}: how the aborted request ended",
                    result.error,
                    "abort or error event",
                )
        else:  # "completed": mode wait drains before the executor sleeps
            oracle.equal(
                "requests.clean_end",
                (result.finish_reasons, result.error, [len(t) for t in result.token_ids]),
                (["length"] * flight.n, None, [tokens] * flight.n),
                f"{what}, drained by mode wait",
            )

    def _every_choice_ended(self, result, what: str) -> None:
        """Each choice of an aborted n > 1 request that streamed a token reports its end, "abort" (the
        parent's abort reaches every child: parallel_sampling.py, #45326)."""
        unended = [
            i for i, (ids, reason) in enumerate(zip(result.token_ids, result.finish_reasons)) if ids and not reason
        ]
        oracle.holds(
            "requests.clean_end",
            not unended and all(r in ("abort", None) for r in result.finish_reasons),
            f"{what}: every choice's end",
            (result.finish_reasons, [len(t) for t in result.token_ids]),
            "abort on each choice that streamed a token",
        )

    def _judge_waiting_at_sleep(self, op, s: State, existing: list, where: str) -> None:
        """What a sleep (or a /pause) did to the requests that were already open: an abort ends every one of
        them; a wait lets the frozen one (a level-0 keep's) finish before it answers; the others wait on."""
        mode = op.mode
        if mode == "abort":
            self._collect(where)
            for o in existing:
                self._aborted(o, where)
            self.open = [o for o in self.open if o not in existing]
        elif mode == "wait" and s.held_kv:
            # The drained request's last chunk and the sleep's answer race to the client: its end is
            # waited for, then judged as a request that resumed in the state before the sleep.
            held = [o for o in existing if o.kind == "held"]
            for o in held:
                self._resumed(o, s, where)
            self.open = [o for o in self.open if o not in held]

    def _collect(self, where: str) -> None:
        """Through a door that enqueues, the step that ends the enqueued requests (a wake that runs them, an
        abort) collects them with /wait_for_completion, which answers once each ended, in the order they were
        enqueued: each one's answer becomes its future's result. One missing is a request whose end never
        reached the caller (requests.completes)."""
        enqueued = [o for o in self.open if o.enqueued and not o.future.done()]
        if not enqueued:
            return
        outputs = self.ctx.client.wait_for_completion(timeout_s=thresholds.get("request_completion_s_max"))
        oracle.equal(
            "requests.completes",
            len(outputs),
            len(enqueued),
            f"walk {where}: outputs /wait_for_completion answered for the requests enqueued "
            f"({[o.op_name for o in enqueued]})",
        )
        for o, output in zip(enqueued, outputs, strict=True):
            o.future.set_result(output)

    def _end_of(self, o: Open, what: str, give_up_s: float | None = None):
        """What a request that waited answered, once it ended, its pool given back; with the seconds it
        took to end from now. One that does not end within give_up_s (default request_completion_s_max) is
        no answer (expect.result), never an oracle: a bound on how soon it ends is judged on those seconds."""
        start = time.perf_counter()
        give_up_s = thresholds.get("request_completion_s_max") if give_up_s is None else give_up_s
        value = expect.result(o.future, give_up_s, client=self.ctx.client, step=what)
        seconds = time.perf_counter() - start
        if o.op_name == "generate_stream":
            self.ctx.client.check_stream(value, what)
        if o.pool is not None:
            o.pool.close()
        return value, seconds

    def _aborted(self, o: Open, where: str) -> None:
        what = f"walk {where}: the {o.kind} request ({o.op_name}) the abort sleep ended"
        with stalls.Sampler() as sampler:
            start = time.perf_counter()
            value, seconds = self._end_of(o, what, abort_give_up_s())
        stalls.bounded_unless_stalled(
            self.ctx.recorder,
            sampler,
            "requests.abort_time",
            start,
            start + seconds,
            self.ctx.cell_id,
            f"{what}: seconds to its end",
        )
        finish = value.finish_reasons
        n = [len(t) for t in value.token_ids]
        want_n = o.tokens if o.kind == "held" else GOLDEN_MAX_TOKENS
        oracle.holds(
            "requests.abort_aborts",
            all(f in ("abort", None) for f in finish) and all(k < want_n for k in n),
            f"walk {where}: a {o.kind} request ({o.op_name}) when the abort sleep answered",
            (finish, n),
            "aborted, cut short",
        )
        if o.kind == "held" and o.n > 1:
            self._every_choice_ended(value, what)

    def _resumed(self, o: Open, state: State, where: str, prefix_at_resume: str | None = None):
        """A request that waited ran once scheduling resumed in `state` (or a wait sleep drained it): it
        ends by length, with its checkpoint's golden where the model predicts one. Returns what a long
        prompt answered (its cached tokens are judged with the others': model.long_prompts_hit), else None."""
        value, _ = self._end_of(o, f"walk {where}: the {o.kind} request ({o.op_name}) after scheduling resumed")
        what = f"walk {where}: the {o.kind} request ({o.op_name}) that waited"
        if o.kind == "held":
            oracle.equal(
                "requests.resumes_after_keep",
                (value.finish_reasons, value.error),
                (["length"] * o.n, None),
                f"{what}: how it ended",
            )
            golden = model.resumed_golden(state, o.origin)
            if golden is None or o.n > 1:  # no golden of a seeded n=4 run from IN_FLIGHT: its count
                oracle.equal(
                    "output.finish_length", [len(t) for t in value.token_ids], [o.tokens] * o.n, f"{what}: its tokens"
                )
                return
            # STREAM_TOKENS long: a shorter request is its first tokens, a longer one's first are it
            got, want = value.token_ids[0], self._golden(golden).stream
            n = min(o.tokens, len(want))
            if len(got) != o.tokens or got[:n] != want[:n]:
                oracle.fail(
                    "prefix_cache.kept_paused_request",
                    f"{what}: its tokens (first difference at {expect.first_difference(got, want)})",
                    got,
                    want,
                )
            return
        waited = dataclasses.replace(state, prefix=prefix_at_resume)
        kind = "long" if o.kind == "long" else "short"
        golden = model.golden_of(waited, kind)
        if o.op_name == "generate_stream":
            self._judge_stream(value, o.prompt, golden, what)
        elif o.op_name == "generate_n4":
            self._judge_n4(value, golden, what)
        elif o.kind == "long":
            self._judge_long(value, waited, None, where)  # its hit: counted with the others (_run_waiting)
            return value
        elif golden is None:
            self._unpredicted(value, 1, what)
        else:
            expect.tokens(
                value,
                self._golden(golden).greedy[o.prompt],
                prompt=o.prompt,
                step=what,
                oracle_id=model.golden_oracle(golden),
            )

    # --- wakes, reloads, resets -----------------------------------------------------------------------
    def wake(self, op, s: State, after: State, where: str) -> None:
        tags = op.params[0]
        self.ctx.client.wake_up(list(tags) if tags is not None else None, memory_moves=ops.moves_memory(op, s))
        self._run_waiting(s, after, where)

    def _run_waiting(self, s: State, after: State, where: str) -> None:
        """The requests that waited, once the step (a wake, a /resume) resumed scheduling: each judged as it
        ends."""
        if after.paused or not self.open:
            return
        self._collect(where)
        waiting, self.open = self.open, []
        longs = [self._resumed(o, after, where, prefix_at_resume=s.prefix) for o in waiting]
        longs = [c for c in longs if c is not None]
        if longs:
            oracle.equal(
                "prefix_cache.hit_iff_cached",
                sum(bool(c.cached_tokens) for c in longs),
                model.long_prompts_hit(len(longs), s.prefix is not None),
                f"walk {where}: the long prompts that waited with cached tokens "
                f"({[c.cached_tokens for c in longs]!r}) in ({s.describe()})",
            )

    def reload(self, op, s: State, after: State, where: str) -> None:
        path = op.params[0]
        self.ctx.client.reload_weights(self.ctx.checkpoints[path] if path else None)

    def push(self, op, s: State, after: State, where: str) -> None:
        """The checkpoint's tensors into the weights pool the way RL trainers push them (tests/core/pushes.py):
        what serves next is judged by the steps after it (model.golden_of)."""
        way, checkpoint = op.params
        if self.ctx.trainer is None:
            raise oracle.Precondition(f"walk {where}: {op} needs the trainer beside the server; the walk has none")
        pushes.way(way, self.ctx.door, self.ctx.trainer).push(self.ctx.client, self.ctx.checkpoints[checkpoint])

    def pause(self, op, s: State, after: State, where: str) -> None:
        """POST /pause?mode=&clear_cache= (AsyncLLM.pause_generation): the requests already open end as a
        sleep's pause ends them; a wait drains a frozen one before it answers."""
        mode, clear_cache = op.params
        existing = list(self.open)
        self.ctx.client.pause(mode=mode, clear_cache=clear_cache)
        self._judge_pause(after, "/pause", where)
        self._judge_waiting_at_sleep(op, s, existing, where)

    def resume(self, op, s: State, after: State, where: str) -> None:
        """POST /resume (AsyncLLM.resume_generation): the pause lifted, read before the requests that waited
        are waited for (a /resume that lifts nothing would leave them to run out a wall clock, no verdict),
        then those requests run."""
        self.ctx.client.resume()
        self._judge_pause(after, "/resume", where)
        self._run_waiting(s, after, where)

    def _judge_pause(self, after: State, call: str, where: str) -> None:
        """/is_paused right after the call: its own result."""
        oracle.equal(
            ops.IS_PAUSED, self.ctx.client.is_paused(), model.is_paused(after), f"walk {where}: /is_paused after {call}"
        )

    def reset_prefix_cache(self, op, s: State, after: State, where: str) -> None:
        """/reset_prefix_cache (with reset_running_requests=true: a held request preempted, which waits on;
        check_state sees it still open)."""
        resets = model.resets_prefix_cache(s, op.resets_running)
        oracle.equal(
            "api.reset_prefix_cache_result",
            self.ctx.client.reset_prefix_cache(blocks_held=not resets, reset_running_requests=op.resets_running),
            model.reset_prefix_cache_result(self.version, self.ctx.door, resets),
            f"walk {where}",
        )

    # --- after every step -------------------------------------------------------------------------
    def check_state(self, s: State, where: str) -> None:
        ctx = self.ctx
        sleeping, gauge = model.flags(s, self.version)
        expect.state(ctx.client, sleeping=sleeping, gauge=gauge, step=f"walk {where}")
        if ctx.door_can_pause:
            oracle.equal(ops.IS_PAUSED, ctx.client.is_paused(), model.is_paused(s), f"walk {where}: /is_paused")
        expect.healthy(ctx.client, f"walk {where}")
        ended = [o for o in self.open if o.future.done()]
        if ended:
            oracle.fail(
                model.held_oracle(s),
                f"walk {where}: requests that must wait in ({s.describe()})",
                [(o.kind, o.op_name, expect.ended_how(o.future, ctx.client)) for o in ended],
                "all still open",
            )
        band = model.device_band(s, ctx.sizes, ctx.cell_id)
        device = settled_gpu_bytes(
            ctx.server, f"walk {where}", done=lambda b: not band.violations(b), recorder=ctx.recorder
        )
        host = host_memory.server_host_memory(ctx.server)[0].rss
        hband = model.host_band(s, self.version, ctx.host_awake, ctx.sizes.weights_bytes, ctx.cell_id)
        # host_awake beside each reading: the walk's host drift over a run is read from its logs.
        ctx.recorder.record("", "walk_bytes", device, "bytes", host=host, host_awake=ctx.host_awake, state=s.describe())
        with oracle.together():
            for b in band.violations(device):
                oracle.fail(b.oracle, f"walk {where}: GPU bytes of the server ({b.what})", device, b.value, b.relation)
            for b in hband.violations(host):
                oracle.fail(
                    b.oracle,
                    f"walk {where}: host bytes of the server's processes ({b.what})",
                    host,
                    b.value,
                    b.relation,
                )

    def ran(self, step, index: int) -> None:
        """One record per step that ran (tools/bench/bazel_runs reads the walk's step seconds from them)."""
        self.ctx.recorder.record(
            "", "walk_step", index, "step", op=str(step.op), before=step.before.describe(), after=step.after.describe()
        )

    def probe_cache(self, s: State, where: str) -> None:
        self._generate_cached(None, s, where)

    def look_at_emptied_cache(self, s: State, where: str) -> None:
        """A cache that should be empty is seen to be only by a request of the long prompt, which fills
        it again; the walk then resets, so the state is the plan's again."""
        c = self.ctx.client.complete(LONG, GOLDEN_MAX_TOKENS)
        oracle.equal(
            "prefix_cache.hit_iff_cached",
            bool(c.cached_tokens),
            False,
            f"walk: the long prompt, {where}: cached tokens {c.cached_tokens!r} in ({s.describe()})",
        )
        oracle.equal(
            "api.reset_prefix_cache_result",
            self.ctx.client.reset_prefix_cache(),
            model.reset_prefix_cache_result(self.version, self.ctx.door),
            f"walk: the reset after looking, {where}",
        )

    # --- terminal pairs ---------------------------------------------------------------------------
    def terminal(self, op, s: State, pin: thresholds.Pin, where: str) -> observations.Terminal:
        """The call, then everything observable after it that the pin names (its `expected`: the answer's
        status, /is_sleeping, the gauge, /is_paused, /health, and how a request sent afterwards ends), for
        the driver to judge (observations.check_terminal)."""
        client = self.ctx.client
        if op.name == "resume":
            resp = client.raw("POST", "/resume")
        elif op.name == "wake":
            tags = op.params[0]
            resp = client.wake_up(list(tags) if tags is not None else None, check=False)
        else:
            path = op.params[0]
            resp = client.raw(
                "POST",
                "/collective_rpc",
                json={
                    "method": "reload_weights",
                    **({"kwargs": {"weights_path": self.ctx.checkpoints[path]}} if path else {}),
                },
            )
        want = pin.expected
        seen = {"status": resp.status_code}
        if "is_sleeping" in want:
            seen["is_sleeping"] = client.is_sleeping()
        if "gauge" in want:
            seen["gauge"] = expect.fmt(client.sleep_state())
        if "is_paused" in want:
            seen["is_paused"] = client.is_paused()
        if "health" in want:
            seen["health"] = client.health_status()
        if "request" in want:
            request = self._terminal_request()
            # a request whose forward killed the engine (resume_while_kv_cache_asleep) ends in an error
            seen["request"] = "engine dead" if request == "error" and not client.health() else request
        return observations.Terminal(seen, resp.text[:200])

    def judged(self, oracle_ids: list[str]) -> None:
        """Nothing to count: the GPU walk's coverage is its steps (coverage.py)."""

    def _terminal_request(self) -> str:
        """How a request sent after a terminal pair ends, in a word: "golden" (the serving checkpoint's),
        "other tokens", "error" (a non-200 answer) or "held" (no answer within the wait)."""
        client = self.ctx.client
        window = thresholds.get("held_request_window_s")
        if self.ctx.door_cannot_stream:
            return self._terminal_request_whole(window)
        result = client.complete_stream(PROMPTS[0], GOLDEN_MAX_TOKENS, timeout_s=window)
        silent = result.status == 200 and not any(result.token_ids) and result.finish_reasons == [None]
        if silent and result.timed_out:
            return "held"  # accepted, then nothing within the window
        if result.error is not None or result.finish_reasons != ["length"]:
            return "error"
        return self._served(result.token_ids[0])

    def _served(self, token_ids) -> str:
        """ "golden" if a finished terminal request served checkpoint A's golden, else "other tokens"."""
        return "golden" if token_ids == self._golden("A").greedy[PROMPTS[0]].token_ids[0] else "other tokens"

    def _terminal_request_whole(self, window: float) -> str:
        """_terminal_request through a door without a stream: the request answered whole, "held" when it
        has no answer within the window (the server is not walked after a terminal pair, so a request
        left open there ends with it)."""
        client = self.ctx.client
        body = client.completion_body(PROMPTS[0], GOLDEN_MAX_TOKENS)
        try:
            resp = client.raw("POST", "/v1/completions", json=body, timeout=window)
        except requests.ReadTimeout:
            return "held"  # accepted, then no answer within the window
        choices = resp.json().get("choices") if resp.status_code == 200 else None
        if not choices or choices[0].get("finish_reason") != "length":
            return "error"
        return self._served(choices[0].get("token_ids"))
