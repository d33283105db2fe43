"""The state walk's engine tier: vLLM's real engine core around the fake worker, driven by the one walk
driver (tests/core/walk/driver.py) with the same model, plan and oracles as the GPU.

EngineSubject makes each planned operation on an EngineServer (lib/engine_server.py: EngineCoreProc's real
busy loop behind vLLM's own routers) and judges it, each check through an oracle id of
tests/core/oracle.py. What the engine tier cannot observe (the gauge AsyncLLM writes, device
and host bytes, the tokens of real weights, which checkpoint a reload loaded) is skipped per check,
never per pair: SKIPPED says why, and the coverage record counts the checks made and skipped by oracle
id. A pair it cannot honour at all is named in CANNOT_HONOUR.

Every in-flight sleep lands mid-decode (2 of IN_FLIGHT_TOKENS tokens generated): the server's
InFlightGate holds the request's second forward pass until the /sleep is on the input queue; for a
request arriving during a wait sleep's drain, the gate also holds the drain until it is queued.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading

from tests.engine.fakes.worker import TAGS
from tests.engine.lib import cpu_push
from tests.engine.lib.engine_client import CALL_TIMEOUT_S
from tests.engine.lib.engine_server import WAIT_S, EngineServer
from tests.core import liveness, oracle, pushes, thresholds
from tests.core.walk import model, observations
from tests.core.walk import operations as ops
from tools.matrix import HTTP
from tests.core.walk.model import KV_CACHE, WEIGHTS, State
from vllm.v1.engine import FinishReason

SHORT_PROMPT_LEN = 4  # under one 16-token KV block: never a prefix-cache hit
# The long prompt: four KV blocks; a repeat hits three of them (the last block is always recomputed).
LONG_PROMPT = list(range(1500, 1564))
GENERATE_TOKENS = 4
STREAM_TOKENS = 8
IN_FLIGHT_TOKENS = 32  # the gate holds the request at 2 of them when /sleep lands
PROBE_TOKENS = 2
SEED_N, SEED = 4, 1234  # generate_n4: the n=4 fan-out AsyncLLM makes, as four seeded child requests

_prompts = itertools.count(0)


def short_prompt() -> list[int]:
    """A prompt no other request of the walk shares (ids inside the tiny model's 2048-token vocab)."""
    first = 100 + (next(_prompts) * SHORT_PROMPT_LEN) % 1300
    return list(range(first, first + SHORT_PROMPT_LEN))


# --- what the walk cannot check here, and why ---------------------------------------------------------
SKIPPED = {
    "flags.gauge": "vllm:engine_sleep_state is written by AsyncLLM.sleep/wake_up (record_sleep_state), "
    "which the engine tier's QueueEngineClient stands in for without its stat loggers",
    "output.golden_tokens": "the fake worker samples one constant token: no golden of real weights; the "
    "weights' integrity is checked instead (garbage after level 2 until a reload)",
    "weights.pushed_checkpoint_golden": "the fake worker serves no checkpoint: A and B serve alike; the "
    "weights' integrity is checked instead, and at a push the tensors its load_weights received",
    "output.logprob_drift": "the fake worker computes no logprobs",
    "output.seeded_sampling": "the fake worker ignores the seed (one constant token)",
    "requests.abort_time": "a time bound measured on the H200's server; on the CPU the abort output's "
    "order (before the offload, before /sleep answers) is checked instead",
    "api.status": "(generates only) requests go to the engine core's input queue: there is no OpenAI "
    "route in front of it to answer a status",
    "server.healthy": "(checked as: the busy loop is alive) there is no /health route on this app",
    "device_bytes": "no device memory: the fake worker's two pool flags stand for it (checked per tag)",
    "host_bytes": "no host copy: the fake worker backs nothing up",
    "prefix_cache.kept_paused_request": "the fake worker samples one constant token, so a resumed request's "
    "tokens cannot tell a kept KV cache from a recomputed one; its count is "
    "checked instead",
}
# Ids the walk checks here only through a stand-in (the weights' integrity for a golden, the busy loop for
# /health): the GPU walk's own check under that id is still skipped, and counted so.
STAND_INS = ("output.golden_tokens", "weights.pushed_checkpoint_golden", "server.healthy")
# Terminal pairs whose known divergence lives in code the engine tier replaces: probed on the GPU and the
# fake tier only.
CANNOT_HONOUR = {
    ops.KV_FIRST_AFTER_LEVEL2: "the failing restore of the level-2 sleep's model buffers is the GPU worker's "
    "(gpu_worker.py wake_up); the fake worker keeps no model buffers",
}


def _residency_oracle(state: State, tag: str) -> str:
    """The device_bytes oracle whose band a wrong pool residency breaks on a GPU (model.device_band)."""
    asleep = state.asleep_tags
    if not asleep:
        return "device_bytes.wake_shortfall"  # a pool not mapped back after the wake
    if asleep == set(model.TAGS):
        return "device_bytes.level1_asleep" if state.level == 1 else "device_bytes.level2_asleep"
    if asleep == {KV_CACHE}:
        return "device_bytes.weights_wake_mapped" if tag == WEIGHTS else "device_bytes.weights_wake_kv_unmapped"
    return "device_bytes.kv_wake_mapped" if tag == KV_CACHE else "device_bytes.kv_wake_weights_unmapped"


@dataclasses.dataclass
class Open:
    """A request that waits: its ids (n of them for an n=4 fan-out), what the model calls it (QUEUED_KINDS
    or "held"), the tokens each had when it started waiting, the forward passes it had then."""

    ids: list
    kind: str
    op_name: str
    max_tokens: int
    tokens: int = 0
    forwards: int = 0


class EngineSubject:
    """The walk's operations on one engine (driver.Subject), each judged by the model."""

    replay_on = "a fresh engine"

    def __init__(self, server: EngineServer, version: str, checkpoints: dict) -> None:
        self.server = server
        self.version = version
        self.checkpoints = checkpoints  # "A"/"B" -> a checkpoint directory (the fake loads neither)
        self.open: list[Open] = []
        self.cancelled: list[str] = []  # the requests cancel_queued left: none may ever run
        self.checked: collections.Counter = collections.Counter()  # oracle id -> checks made
        # oracle id -> checks the GPU walk makes that this one cannot
        self.skipped: collections.Counter = collections.Counter()
        self._step_checked: set = set()
        self._step: tuple | None = None  # (operation, state before) of the step being made

    def pick(self, shard: int) -> str:
        return f"--test_filter=shard{shard}"

    # --- oracle calls, counted --------------------------------------------------------------------
    def _equal(self, oracle_id: str, measured, expected, what: str) -> None:
        self._step_checked.add(oracle_id)
        self.checked[oracle_id] += 1
        oracle.equal(oracle_id, measured, expected, what)

    def _holds(self, oracle_id: str, ok: bool, what: str, measured, expected) -> None:
        self._step_checked.add(oracle_id)
        self.checked[oracle_id] += 1
        oracle.holds(oracle_id, ok, what, measured, expected)

    def _alive(self, where: str) -> None:
        """The busy loop lives (the stand-in for /health); its death is liveness.EngineDead (errored,
        server.healthy), never an oracle's failure: a dead engine proves nothing about the step. A forward
        pass on released memory kills it (the fake worker raises, a GPU faults), and the fake records the
        pass first, so the check of the step that scheduled it sees that before this."""
        self._step_checked.add("server.healthy")
        self.checked["server.healthy"] += 1
        self._not_dead(where)

    def _not_dead(self, where: str) -> None:
        """liveness.EngineDead (server.healthy) if the busy loop died; _alive without counting a check."""
        error = self.server.alive()
        if error is not None:
            raise liveness.EngineDead(
                f"{where}: the engine's busy loop died: {error!r}; timeline: {self.server.timeline}", "server.healthy"
            )

    def _begin(self, op, before: State) -> None:
        self._step_checked = set()
        self._step = (op, before)

    def _status(self, response, what: str, expected: int = ops.EXPECTED_STATUS) -> None:
        """The route's status is `expected` (api.status); another status from a dead engine is
        liveness.EngineDead (errored), as the GPU tier's client charges a dead engine's 5xx."""
        failure = self.server.client.last_failure if response.status_code != expected else None
        error = self.server.alive() if response.status_code != expected else None
        if error is not None:
            raise liveness.EngineDead(
                f"{what}: HTTP {response.status_code} {response.text[:300]!r} from a dead engine: {error!r}",
                "api.status",
            )
        self._equal(
            "api.status",
            response.status_code,
            expected,
            f"{what}: {response.text[:300]!r}; the engine's failure: {failure}",
        )

    def _ended(self, ids, what: str) -> None:
        """Every request of ids has ended within WAIT_S. One still open then is a wall-clock wait that ran
        out, never an oracle's failure (the step's own oracle then judges how they ended): on a dead engine
        liveness.EngineDead (errored, server.healthy), on a live one liveness.NoAnswer (errored,
        api.answers: a hang and a host too loaded look alike; only a catalogued hang may count it)."""
        if not self.server.record.wait_ended(ids):
            self._alive(what)
            open_ids = [r for r in ids if self.server.record.end(r) is None]
            raise liveness.NoAnswer(f"{what}: requests {open_ids} not ended within {WAIT_S:g} s on a live engine")

    def _finished_by_length(self, rid: str, max_tokens: int, oracle_id: str, what: str) -> None:
        self._ended([rid], what)
        end, tokens = self.server.record.end(rid), self.server.record.tokens(rid)
        self._equal(
            oracle_id,
            (end, len(tokens)),
            (FinishReason.LENGTH, max_tokens),
            f"{what}: how request {rid} ended (finish reason, tokens)",
        )

    # --- generates ----------------------------------------------------------------------------------
    def _send(self, op_name: str) -> tuple[list, int]:
        """The requests of a generate operation: (their ids, max_tokens)."""
        server = self.server
        if op_name == "generate_cached":
            return [server.send(list(LONG_PROMPT), GENERATE_TOKENS, kind="long")], GENERATE_TOKENS
        if op_name == "generate_n4":
            prompt = short_prompt()
            return [
                server.send(prompt, GENERATE_TOKENS, seed=SEED + i, kind="n4") for i in range(SEED_N)
            ], GENERATE_TOKENS
        if op_name == "generate_stream":
            return [server.send(short_prompt(), STREAM_TOKENS, kind="stream")], STREAM_TOKENS
        return [server.send(short_prompt(), GENERATE_TOKENS, kind="fresh")], GENERATE_TOKENS

    def generate(self, op, s: State, after: State, where: str) -> None:
        self._begin(op, s)
        ids, max_tokens = self._send(op.name)
        if not model.can_run(s):
            self.server.settle()
            self._equal(
                model.held_oracle(s),
                [(self.server.forwards(r), self.server.record.end(r)) for r in ids],
                [(0, None)] * len(ids),
                f"walk {where}: the request sent while paused (forward passes, finish reason)",
            )
            self.open.append(Open(ids, "long" if op.name == "generate_cached" else "plain", op.name, max_tokens))
            return
        self._judge_ran(ids, op.name, max_tokens, model.hits_cache(s, "long"), f"walk {where}")

    def cancel_queued(self, op, s: State, after: State, where: str) -> None:
        """A request of the long prompt sent while paused, then what the front end sends once its client went
        away (an ABORT: async_llm.py generate -> abort): it leaves the scheduler with no forward pass, and the wake or
        /resume that lifts the pause runs nothing of it (_run_waiting looks again)."""
        self._begin(op, s)
        what = f"walk {where}"
        rid = self.server.send(list(LONG_PROMPT), GENERATE_TOKENS, kind="cancelled")
        self.server.settle()
        self._equal(
            model.held_oracle(s),
            (self.server.forwards(rid), self.server.record.end(rid)),
            (0, None),
            f"{what}: the request sent while paused, before its client goes away (forward passes, finish reason)",
        )
        held = self.server.unfinished()
        self.server.abort([rid])
        self.server.settle()
        # An abort sends no output of the request (scheduler.py finish_requests only frees it), so what
        # shows it left is the scheduler's count of the requests it holds.
        self._equal(
            "requests.cancel_aborts",
            (self.server.forwards(rid), self.server.unfinished()),
            (0, held - 1),
            f"{what}: the request its client left (forward passes, requests the scheduler holds)",
        )
        self.cancelled.append(rid)

    def _judge_ran(self, ids, op_name: str, max_tokens: int, hits: bool, what: str) -> None:
        for rid in ids:
            self._finished_by_length(rid, max_tokens, "output.finish_length", what)
        if op_name == "generate_cached":
            cached = self.server.record.cached.get(ids[0])
            self._equal(
                "prefix_cache.hit_iff_cached",
                bool(cached),
                hits,
                f"{what}: the long prompt hit cached tokens ({cached!r} of {len(LONG_PROMPT)})",
            )
        if op_name == "generate_stream":
            stream = self.server.record.streams[ids[0]]
            shape = ([len(t) for t, _ in stream], [r for _, r in stream])
            want = ([1] * max_tokens, [None] * (max_tokens - 1) + [FinishReason.LENGTH])
            self._equal(
                "requests.clean_end",
                shape,
                want,
                f"{what}: the stream's outputs (tokens each, finish reasons), one token a step and a "
                "finish only on the last",
            )
        self.server.settle()  # the step after the finish frees its blocks

    # --- sleeps -------------------------------------------------------------------------------------
    def sleep(self, op, s: State, after: State, where: str) -> None:
        self._begin(op, s)
        level, mode, in_flight = op.params
        server = self.server
        existing = list(self.open)
        what = f"walk {where}"
        if not in_flight:
            self._status(server.post("/sleep", params={"level": level, "mode": mode}), what)
            server.settle()
            self._judge_existing(mode, s, existing, what)
            return
        # The kind's requests (model.IN_FLIGHT_REQUESTS) as the engine core sees them: a stream and a whole
        # request alike (the output kind is the front end's), n=4 as four seeded child requests. The gate
        # holds the first one's second forward pass, which holds the engine's every step.
        ids = [
            server.send(short_prompt(), IN_FLIGHT_TOKENS, seed=SEED + i if n > 1 else None, kind="inflight")
            for _, n in model.IN_FLIGHT_REQUESTS[in_flight]
            for i in range(n)
        ]
        rid = ids[0]
        late_sent = threading.Event() if in_flight == 2 else None
        server.gate.arm(rid, late_sent)
        late = None
        try:
            server.wait_for(lambda: server.timeline.forwarded(rid), f"{what}: the in-flight request's prefill")
            if late_sent is None:
                response = server.post("/sleep", params={"level": level, "mode": mode})
            else:
                response, late = self._sleep_with_late_arrival(level, mode, late_sent, what)
        finally:
            server.gate.disarm()
        # What the client had received when /sleep answered, then what happened after.
        ends_at_answer = [server.record.end(r) for r in ids]
        tokens_at_answer = [len(server.record.tokens(r)) for r in ids]
        forwards_at_answer = [server.forwards(r) for r in ids]
        self._status(response, what)
        if server.gate.timed_out:
            raise oracle.Precondition(
                f"{what}: /sleep reached the engine more than {server.gate.GATE_S} s "
                f"after the in-flight request's prefill; timeline: {server.timeline}"
            )
        events = server.timeline.events
        # each request's first output event, by timeline index (len(events): none)
        ended_at = [
            min((i for i, e in enumerate(events) if e.kind == "output" and e.detail[0] == r), default=len(events))
            for r in ids
        ]
        sleep_at = server.timeline.index("sleep", last=True) if level >= 1 and not s.asleep_tags else len(events)
        ends = model.in_flight_outcome(mode, level).ends
        self._judge_existing(mode, s, existing, what)
        if ends == "aborted":
            self._equal(
                "requests.abort_aborts",
                [(end, tokens < IN_FLIGHT_TOKENS) for end, tokens in zip(ends_at_answer, tokens_at_answer)],
                [(FinishReason.ABORT, True)] * len(ids),
                f"{what}: the requests in flight when /sleep answered (finish reason, cut short)",
            )
            self._holds(
                "requests.clean_end",
                max(ended_at) < sleep_at,
                f"{what}: the abort outputs left the engine before the offload (#45326), timeline {server.timeline}",
                ended_at,
                f"< {sleep_at}",
            )
        elif ends == "completed":
            self._equal(
                "requests.ends_in_race",
                list(zip(ends_at_answer, tokens_at_answer)),
                [(FinishReason.LENGTH, IN_FLIGHT_TOKENS)] * len(ids),
                f"{what}: the drained requests when /sleep answered (finish reason, tokens)",
            )
            self._holds(
                "output.finish_length",
                max(ended_at) < sleep_at,
                f"{what}: the drained requests ended by length before the offload (#45520), timeline {server.timeline}",
                ended_at,
                f"< {sleep_at}",
            )
        else:  # "held": a keep freezes it (a level >= 1 one's cache reset preempts it to the waiting queue)
            server.settle()
            self._equal(
                model.held_oracle(after),
                [(server.record.end(r), server.forwards(r)) for r in ids],
                [(None, f) for f in forwards_at_answer],
                f"{what}: the requests mode=keep froze (finish reason, forward passes) after /sleep answered",
            )
            for r, tokens, forwards in zip(ids, tokens_at_answer, forwards_at_answer):
                self.open.append(Open([r], "held", "generate_stream", IN_FLIGHT_TOKENS, tokens, forwards))
            return
        if late is not None:
            server.settle()
            self._equal(
                model.held_oracle(after),
                (server.forwards(late.ids[0]), server.record.end(late.ids[0])),
                (0, None),
                f"{what}: the request that arrived while the wait sleep drained",
            )
            self.open.append(late)
        server.settle()
        if not self.open:
            self._equal(
                "requests.load_drains",
                server.unfinished(),
                0,
                f"{what}: requests the scheduler still holds after the in-flight request ended",
            )

    def _sleep_with_late_arrival(self, level: int, mode: str, late_sent: threading.Event, what: str):
        """/sleep?mode=wait from a thread; once the engine paused (the in-flight request still draining,
        held by the gate), a second request; then the sleep's answer. (response, its Open)."""
        server = self.server
        answer: dict = {}

        def sleep() -> None:
            try:
                answer["r"] = server.post("/sleep", params={"level": level, "mode": mode})
            except Exception as e:  # noqa: BLE001  raised as it is below, in the walk's thread
                answer["raised"] = e

        thread = threading.Thread(target=sleep, name="walk-wait-sleep")
        thread.start()
        try:
            server.wait_for(server.proc.is_scheduler_paused, f"{what}: the engine paused by the wait sleep")
            ids, max_tokens = self._send("generate_fresh")
        finally:
            late_sent.set()
        thread.join(WAIT_S + CALL_TIMEOUT_S)  # past the bound of the route's own engine call
        if "raised" in answer:
            raise answer["raised"]
        if "r" not in answer:
            self._alive(what)
            raise liveness.NoAnswer(f"{what}: /sleep?mode=wait not answered within {WAIT_S + CALL_TIMEOUT_S:g} s")
        return answer["r"], Open(ids, "plain", "generate_fresh", max_tokens)

    def _judge_existing(self, mode: str, s: State, existing: list, what: str) -> None:
        """What a sleep did to the requests that already waited: abort ends them all; wait lets a level-0
        keep's frozen request finish before it answers; keep leaves them."""
        record = self.server.record
        if mode == "abort":
            for o in existing:
                self._ended(o.ids, what)
                self._equal(
                    "requests.abort_aborts",
                    [record.end(r) for r in o.ids],
                    [FinishReason.ABORT] * len(o.ids),
                    f"{what}: the {o.kind} request ({o.op_name}) when the abort sleep answered",
                )
            self.open = [o for o in self.open if o not in existing]
        elif mode == "wait" and s.held_kv:
            held = [o for o in existing if o.kind == "held"]
            for o in held:
                self._equal(
                    "requests.ends_in_race",
                    (record.end(o.ids[0]), len(record.tokens(o.ids[0]))),
                    (FinishReason.LENGTH, o.max_tokens),
                    f"{what}: the request a level-0 keep froze, drained by the wait sleep",
                )
                self._held_tokens(o, s, s.held, what)
            self.open = [o for o in self.open if o not in held]

    def _held_tokens(self, o: Open, state: State, origin: str | None, what: str) -> None:
        """A held request's tokens: where no golden predicts them (weights changed or garbage), their
        count; where one does, the fake's constant token cannot show it (SKIPPED)."""
        if model.resumed_golden(state, origin) is None:
            self._equal(
                "output.finish_length",
                len(self.server.record.tokens(o.ids[0])),
                o.max_tokens,
                f"{what}: the tokens of the request that ran on other weights than it started on",
            )

    # --- wakes, reloads, resets -----------------------------------------------------------------------
    def wake(self, op, s: State, after: State, where: str) -> None:
        self._begin(op, s)
        tags = op.params[0]
        params = {"tags": list(tags)} if tags is not None else None
        what = f"walk {where}"
        self._status(self.server.post("/wake_up", params=params), what)
        self._run_waiting(s, after, what)

    def _run_waiting(self, s: State, after: State, what: str) -> None:
        """The requests that waited, after a step (a wake, a /resume) that may have resumed scheduling:
        still waiting where it did not, else each ended by length."""
        if not self.open and not self.cancelled:
            return
        self.server.settle()
        if not after.paused and self.cancelled:
            cancelled, self.cancelled = self.cancelled, []
            self._equal(
                "requests.cancel_aborts",
                [self.server.forwards(r) for r in cancelled],
                [0] * len(cancelled),
                f"{what}: forward passes of the requests whose client went away, after scheduling resumed",
            )
        if after.paused:
            for o in self.open:
                self._equal(
                    model.held_oracle(after),
                    [(self.server.forwards(r), self.server.record.end(r)) for r in o.ids],
                    [(o.forwards, None)] * len(o.ids),
                    f"{what}: the {o.kind} request still waiting",
                )
            return
        waiting, self.open = self.open, []
        for o in waiting:
            self._ended(o.ids, what)
            if o.kind == "held":
                self._held_tokens(o, after, s.held, what)
            oracle_id = "requests.resumes_after_keep" if o.kind == "held" else "output.finish_length"
            self._equal(
                oracle_id,
                [(self.server.record.end(r), len(self.server.record.tokens(r))) for r in o.ids],
                [(FinishReason.LENGTH, o.max_tokens)] * len(o.ids),
                f"{what}: the {o.kind} request ({o.op_name}) that waited, after scheduling resumed "
                "(finish reason, tokens)",
            )
        # The long prompts that waited run in one step, the first caching the blocks the others hit.
        cached = [self.server.record.cached.get(o.ids[0]) for o in waiting if o.kind == "long"]
        if cached:
            self._equal(
                "prefix_cache.hit_iff_cached",
                sum(bool(c) for c in cached),
                model.long_prompts_hit(len(cached), s.prefix is not None),
                f"{what}: the long prompts that waited with cached tokens ({cached!r})",
            )
        self.server.settle()

    def reload(self, op, s: State, after: State, where: str) -> None:
        self._begin(op, s)
        path = op.params[0]
        body: dict[str, object] = {"method": "reload_weights"}
        if path is not None:
            body["kwargs"] = {"weights_path": self.checkpoints[path]}
        reloads = len(self.server.timeline.of("reload_weights"))
        self._status(self.server.post("/collective_rpc", json=body), f"walk {where}")
        self._equal(
            "weights.reload_reaches_worker",
            len(self.server.timeline.of("reload_weights")) - reloads,
            1,
            f"walk {where}: reload_weights calls that reached the worker (checkpoint "
            f"{path or 'by model path'}, which the fake does not tell apart)",
        )

    def push(self, op, s: State, after: State, where: str) -> None:
        """A push through the suite's worker extension, mixed into the fake worker by vLLM
        (tests/core/pushes.py; the server is built with it): the checkpoint's tensors made in the worker's
        process, or rebuilt from a trainer's IPC handles (cpu_push: the CUDA driver's part stood in for).
        What reached the model's load_weights must be the checkpoint's tensors, byte for byte."""
        self._begin(op, s)
        way, checkpoint = op.params
        path = self.checkpoints[checkpoint]
        if way == pushes.TENSOR:
            body = {"method": pushes.LOAD_TENSORS, "kwargs": {"checkpoint": path}}
        else:
            body = {"method": pushes.LOAD_IPC, "kwargs": {"handles": cpu_push.ipc_handles(path)}}
        self.server.worker.pushed.clear()
        with cpu_push.stand_ins():
            response = self.server.post("/collective_rpc", json=body)
        self._status(response, f"walk {where}")
        want, got = cpu_push.file_tensors(path), self.server.worker.pushed
        # The RPC route answers each worker's result as text (serve/dev/rpc/api_router.py).
        results = [int(r) for r in response.json().get("results", [])]
        self._equal(
            "weights.pushed_checkpoint_golden",
            (results, sorted(n for n in want.keys() | got.keys() if want.get(n) != got.get(n))),
            ([len(want)], []),
            f"walk {where}: the parameters the rpc reports loaded, and the tensors whose bytes the model's "
            f"load_weights received otherwise than checkpoint {checkpoint}'s file holds them",
        )

    def pause(self, op, s: State, after: State, where: str) -> None:
        """POST /pause?mode=&clear_cache= (vLLM's RLHF router): the requests that already waited end as a
        sleep's pause ends them."""
        self._begin(op, s)
        mode, clear_cache = op.params
        existing = list(self.open)
        what = f"walk {where}"
        params = {"mode": mode, "clear_cache": "true" if clear_cache else "false"}
        self._status(self.server.post("/pause", params=params), what)
        self._judge_pause(after, "/pause", what)
        self.server.settle()
        self._judge_existing(mode, s, existing, what)

    def resume(self, op, s: State, after: State, where: str) -> None:
        """POST /resume: the pause lifted, read before the requests that waited are waited for, then they
        run."""
        self._begin(op, s)
        what = f"walk {where}"
        self._status(self.server.post("/resume"), what)
        self._judge_pause(after, "/resume", what)
        self._run_waiting(s, after, what)

    def _judge_pause(self, after: State, call: str, what: str) -> None:
        """GET /is_paused right after the call: its own result."""
        paused = self.server.http_is_paused()
        self._equal(ops.IS_PAUSED, paused, model.is_paused(after), f"{what}: /is_paused after {call}")

    def reset_prefix_cache(self, op, s: State, after: State, where: str) -> None:
        self._begin(op, s)
        params = {"reset_running_requests": "true"} if op.resets_running else None
        response = self.server.post("/reset_prefix_cache", params=params)
        self._status(response, f"walk {where}")
        body = response.json() if response.content else None
        result = None if body is None else body.get("success")
        self._equal(
            "api.reset_prefix_cache_result",
            result,
            model.reset_prefix_cache_result(self.version, HTTP, model.resets_prefix_cache(s, op.resets_running)),
            f"walk {where}: POST /reset_prefix_cache ({body!r})",
        )

    # --- after every step -------------------------------------------------------------------------
    def check_state(self, s: State, where: str) -> None:
        server = self.server
        where = f"walk {where}"
        server.settle()
        self._alive(where)
        if model.sleeping(s):
            self._held_probe(s, where)
        executor = server.proc.model_executor
        sleeping = model.sleeping(s)
        with oracle.together():
            self._equal(
                "flags.is_sleeping", server.http_is_sleeping(), sleeping, f"{where}: GET /is_sleeping (vLLM's route)"
            )
            self._equal(
                "flags.is_sleeping", server.client.call("is_sleeping"), sleeping, f"{where}: EngineCore.is_sleeping"
            )
            self._equal(
                "flags.is_sleeping",
                (sorted(executor.sleeping_tags), executor.is_sleeping),
                (sorted(s.asleep_tags), bool(s.asleep_tags)),
                f"{where}: the executor's sleeping tags and is_sleeping (what /is_sleeping reads "
                "besides the scheduler)",
            )
            self._equal(
                ops.IS_PAUSED,
                (server.http_is_paused(), server.client.call("is_scheduler_paused")),
                (model.is_paused(s),) * 2,
                f"{where}: GET /is_paused (vLLM's route) and EngineCore.is_scheduler_paused (the other half of "
                "/is_sleeping; the gate of #44483)",
            )
            for tag in TAGS:
                self._equal(
                    _residency_oracle(s, tag),
                    server.worker.resident[tag],
                    tag not in s.asleep_tags,
                    f"{where}: the fake worker's {tag} pool resident (a GPU's mapped bytes)",
                )
            self._equal(
                model.golden_oracle(s),
                server.worker.weights_intact,
                model.serves(s) is not None,
                f"{where}: the fake worker's weights intact (False: garbage after a level-2 sleep "
                "until a reload), against the checkpoint the model says serves",
            )
            for o in self.open:
                self._equal(
                    model.held_oracle(s),
                    [(server.forwards(r), server.record.end(r)) for r in o.ids],
                    [(o.forwards if o.kind == "held" else 0, None)] * len(o.ids),
                    f"{where}: the {o.kind} request ({o.op_name}) that must wait (forward passes, finish)",
                )
            if not self.open:
                self._equal(
                    "requests.load_drains",
                    server.unfinished(),
                    0,
                    f"{where}: requests the scheduler holds between steps",
                )
        self._account()

    def _account(self) -> None:
        """Counts the checks of the step's operation the GPU walk makes and this tier could not."""
        if self._step is None:
            return
        op, before = self._step
        for oracle_id in set(op.oracles(before)) | set(ops.after_every_step(HTTP)):
            if oracle_id not in self._step_checked or oracle_id in STAND_INS:
                self.skipped[oracle_id] += 1
        self.skipped["device_bytes"] += 1
        self.skipped["host_bytes"] += 1
        self._step = None

    def ran(self, step, index: int) -> None:
        """Nothing to record: the coverage JSON counts the steps (test_state_walk.py)."""

    def probe_cache(self, s: State, where: str) -> None:
        ids, max_tokens = self._send("generate_cached")
        self._judge_ran(ids, "generate_cached", max_tokens, True, f"walk {where}")

    def look_at_emptied_cache(self, s: State, where: str) -> None:
        ids, max_tokens = self._send("generate_cached")
        self._judge_ran(ids, "generate_cached", max_tokens, False, f"walk {where}")
        self.reset_prefix_cache(ops.RESET_PREFIX_CACHE, s, s, f"the reset after looking, {where}")
        self._step = None

    def _held_probe(self, s: State, where: str) -> None:
        """A request sent now must wait for the wake: sent, given a step, checked, then aborted as a
        client that gives up does, so the walk's state is unchanged."""
        rid = self.server.send(short_prompt(), PROBE_TOKENS, kind="probe")
        self.server.settle()
        # A forward pass of it is the defect, whether or not it killed the engine (the fake worker records
        # the pass before it raises on released memory); a death without one is errored (_not_dead).
        self._equal(
            model.held_oracle(s),
            (self.server.forwards(rid), self.server.record.end(rid)),
            (0, None),
            f"{where}: a request sent in ({s.describe()}) (forward passes, finish reason)",
        )
        self._not_dead(f"{where}, after a request sent in ({s.describe()})")
        self.server.abort([rid])
        self.server.settle()

    # --- terminal pairs ---------------------------------------------------------------------------
    def terminal(self, op, s: State, pin: thresholds.Pin, where: str) -> observations.Terminal:
        """The call, then what the engine tier observes after it of what the pin names: the status, the
        flags, that the busy loop lives, and how a request sent afterwards ends, for the driver to judge
        (observations.check_terminal)."""
        self._begin(op, s)
        name = pin.entry.name
        if name in CANNOT_HONOUR:
            raise oracle.Precondition(f"walk {where}: the engine tier cannot honour {name}: {CANNOT_HONOUR[name]}")
        if op.name == "wake":
            tags = op.params[0]
            response = self.server.post("/wake_up", params={"tags": list(tags)} if tags is not None else None)
        elif op.name == "resume":
            response = self.server.post("/resume")
        else:
            path = op.params[0]
            body: dict[str, object] = {"method": "reload_weights"}
            if path is not None:
                body["kwargs"] = {"weights_path": self.checkpoints[path]}
            response = self.server.post("/collective_rpc", json=body)
        self.server.settle()
        want = pin.expected
        # The engine's death is compared with the pin only where the pin predicts it (its health not 200);
        # anywhere else it is errored, as the GPU tier marks an oracle that fired on a dead server.
        if want.get("health", 200) == 200:
            self._alive(f"walk {where}")
        seen = {"status": response.status_code}
        if "is_sleeping" in want:
            seen["is_sleeping"] = self.server.http_is_sleeping()
        if "is_paused" in want:
            seen["is_paused"] = self.server.http_is_paused()
        if "health" in want:
            seen["health"] = 200 if self.server.alive() is None else 500
        if "request" in want:
            seen["request"] = self._terminal_request(want["request"], f"walk {where}")
        return observations.Terminal(seen, repr(response.text[:300]))

    def judged(self, oracle_ids: list[str]) -> None:
        """The checks the driver made of this step's observation, counted as this tier's own."""
        for oracle_id in oracle_ids:
            self._step_checked.add(oracle_id)
            self.checked[oracle_id] += 1

    def _terminal_request(self, pinned: str, what: str) -> str:
        """How a request sent after a terminal pair ends: "ended" (by length), "error", "engine dead" where
        its forward killed the busy loop and the pin predicts that, or "held" when it has not ended within
        held_request_window_s where the pin predicts that (an observation window: the pinned outcome is that
        it waits) or on the dead engine the pin predicts (terminal() raised on any other death). Where the
        pin predicts an end, one not within WAIT_S on a live engine is a wait that ran out,
        liveness.NoAnswer, never the terminal oracle's failure."""
        rid = self.server.send(short_prompt(), PROBE_TOKENS, kind="after-terminal")
        pinned_held = pinned in ("held", "engine dead")
        bound = thresholds.get("held_request_window_s") if pinned_held else WAIT_S
        if self.server.record.wait_ended([rid], bound):
            return "ended" if self.server.record.end(rid) == FinishReason.LENGTH else "error"
        if pinned == "engine dead" and self.server.alive() is not None:
            return "engine dead"
        if not pinned_held and self.server.alive() is None:
            raise liveness.NoAnswer(f"{what}: the request sent after the terminal call not ended within {bound:g} s")
        self.server.abort([rid])
        return "held"

    def coverage_record(self) -> dict:
        return {
            "checks": dict(sorted(self.checked.items())),
            "skipped_checks": dict(sorted(self.skipped.items())),
            "skip_reasons": {k: SKIPPED.get(k) for k in sorted(self.skipped)},
        }
