"""The state walk of tests/sleep_wake/walk on vLLM's real engine core: the same model, plan and oracles.

EngineWalker applies each planned operation to an EngineServer (lib/engine_server.py: EngineCoreProc's
real busy loop behind vLLM's own routers) and judges every step by the model, each check through an
oracle id of tests/sleep_wake/lib/oracle.py. What the engine tier cannot observe (the gauge AsyncLLM
writes, device and host bytes, the tokens of real weights, which checkpoint a reload loaded) is
skipped per check, never per pair: SKIPPED says why, and the coverage record counts the checks made
and skipped by oracle id.

Every in-flight sleep lands mid-decode (2 of IN_FLIGHT_TOKENS tokens generated): the server's
InFlightGate holds the request's second forward pass until the /sleep is on the input queue.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools

from tests.engine.fakes.worker import SAMPLED_TOKEN, TAGS
from tests.engine.lib.engine_server import WAIT_S, EngineServer
from tests.sleep_wake.lib import oracle, thresholds
from tests.sleep_wake.walk import model, plan
from tests.sleep_wake.walk import operations as ops
from tests.sleep_wake.walk.model import KV_CACHE, WEIGHTS, State
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
    "weights.pushed_checkpoint_golden": "the fake worker loads no checkpoint: A and B serve alike; the "
                                        "weights' integrity is checked instead",
    "output.logprob_drift": "the fake worker computes no logprobs",
    "output.seeded_sampling": "the fake worker ignores the seed (one constant token)",
    "requests.abort_time": "a time bound measured on the H200's server; on the CPU the abort output's "
                           "order (before the offload, before /sleep answers) is checked instead",
    "api.status": "(generates only) requests go to the engine core's input queue: there is no OpenAI "
                  "route in front of it to answer a status",
    "server.healthy": "(checked as: the busy loop is alive) there is no /health route on this app",
    "device_bytes": "no device memory: the fake worker's two pool flags stand for it (checked per tag)",
    "host_bytes": "no host copy: the fake worker backs nothing up",
}


# Ids the walk checks here only through a stand-in (the weights' integrity for a golden, the busy loop for
# /health): the GPU walk's own check under that id is still skipped, and counted so.
STAND_INS = ("output.golden_tokens", "weights.pushed_checkpoint_golden", "server.healthy")


# --- the walker ------------------------------------------------------------------------------------
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


def _held_oracle(state: State) -> str:
    if state.level == 0:
        return "requests.held_while_paused"
    if len(state.asleep_tags) < len(model.TAGS):
        return "requests.held_until_resident"
    return "requests.held_while_asleep"


@dataclasses.dataclass
class Held:
    request_id: str
    tokens: int  # generated before the level-0 keep froze it


class EngineWalker:
    """One engine's walks, from INITIAL, step by step, each judged by the model."""

    def __init__(self, server: EngineServer, version: str, checkpoints: dict) -> None:
        self.server = server
        self.version = version
        self.checkpoints = checkpoints  # "A"/"B" -> a checkpoint directory (the fake loads neither)
        self.state = model.INITIAL
        self.step_index = 0
        self.held: Held | None = None
        self.checked = collections.Counter()  # oracle id -> checks made
        self.skipped = collections.Counter()  # oracle id -> checks the GPU walk makes that this one cannot
        self.executed: list[list] = []  # per walk: [(state before, operation)]
        self._step_checked: set = set()
        self.emptied_unseen = False  # as the GPU walk's runner: a step emptied the prefix cache, unseen since

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
        error = self.server.alive()
        self._holds("server.healthy", error is None, f"{where}: the engine's busy loop is alive (a forward "
                    "pass on released memory kills it: the fake worker raises, a GPU faults)",
                    repr(error), "alive")

    # --- one step ---------------------------------------------------------------------------------
    def step(self, op) -> None:
        before = self.state
        ops.require_applicable(op, before, self.step_index)
        self._step_checked = set()
        where = f"step {self.step_index} ({op} from {before.describe()})"
        getattr(self, "_" + op.name)(op, before, where)
        self.state = op.apply(before)
        self.emptied_unseen = ops.emptied_cache_unseen(self.emptied_unseen, op, before, self.state)
        self._check_state(where)
        for oracle_id in set(op.oracles(before)) | set(ops.AFTER_EVERY_STEP):
            if oracle_id not in self._step_checked or oracle_id in STAND_INS:
                self.skipped[oracle_id] += 1
        self.skipped["device_bytes"] += 1
        self.skipped["host_bytes"] += 1
        if self.executed:
            self.executed[-1].append((before, op))
        self.step_index += 1

    def _status(self, response, what: str) -> None:
        failure = self.server.client.last_failure if response.status_code != ops.EXPECTED_STATUS else None
        self._equal("api.status", response.status_code, ops.EXPECTED_STATUS,
                    f"{what}: {response.text[:300]!r}; the engine's failure: {failure}")

    def _finished_by_length(self, rid: str, max_tokens: int, oracle_id: str, what: str) -> None:
        if not self.server.record.wait_ended([rid]):
            self._alive(what)
            raise oracle.Precondition(f"{what}: request {rid} did not end within {WAIT_S} s; "
                                      f"timeline: {self.server.timeline}")
        end, tokens = self.server.record.end(rid), self.server.record.tokens(rid)
        self._equal(oracle_id, (end, len(tokens)), (FinishReason.LENGTH, max_tokens),
                    f"{what}: how request {rid} ended (finish reason, tokens)")

    # --- the operations -----------------------------------------------------------------------------
    def _generate_fresh(self, op, s: State, where: str) -> None:
        rid = self.server.send(short_prompt(), GENERATE_TOKENS, kind="fresh")
        self._finished_by_length(rid, GENERATE_TOKENS, "output.finish_length", f"walk {where}")
        self.server.settle()  # the step after the finish frees its blocks

    def _generate_cached(self, op, s: State, where: str) -> None:
        rid = self.server.send(list(LONG_PROMPT), GENERATE_TOKENS, kind="long")
        self._finished_by_length(rid, GENERATE_TOKENS, "output.finish_length", f"walk {where}")
        cached = self.server.record.cached.get(rid)
        self._equal("prefix_cache.hit_iff_cached", bool(cached), model.hits_cache(s, "long"),
                    f"walk {where}: the long prompt hit cached tokens ({cached!r} of {len(LONG_PROMPT)}) "
                    f"in ({s.describe()})")
        self.server.settle()

    def _generate_n4(self, op, s: State, where: str) -> None:
        prompt = short_prompt()
        rids = [self.server.send(prompt, GENERATE_TOKENS, seed=SEED + i, kind="n4") for i in range(SEED_N)]
        for rid in rids:
            self._finished_by_length(rid, GENERATE_TOKENS, "output.finish_length", f"walk {where}")
        self.server.settle()

    def _generate_stream(self, op, s: State, where: str) -> None:
        rid = self.server.send(short_prompt(), STREAM_TOKENS, kind="stream")
        self._finished_by_length(rid, STREAM_TOKENS, "output.finish_length", f"walk {where}")
        stream = self.server.record.streams[rid]
        shape = ([len(t) for t, _ in stream], [r for _, r in stream])
        want = ([1] * STREAM_TOKENS, [None] * (STREAM_TOKENS - 1) + [FinishReason.LENGTH])
        self._equal("requests.clean_end", shape, want,
                    f"walk {where}: the stream's outputs (tokens each, finish reasons), one token a step "
                    "and a finish only on the last")
        self.server.settle()

    def _sleep(self, op, s: State, where: str) -> None:
        level, mode, in_flight = op.params
        server = self.server
        if not in_flight:
            self._status(server.post("/sleep", params={"level": level, "mode": mode}), f"walk {where}")
            return
        rid = server.send(short_prompt(), IN_FLIGHT_TOKENS, kind="inflight")
        server.gate.arm(rid)
        try:
            server.wait_for(lambda: server.timeline.forwarded(rid), f"walk {where}: the in-flight request's prefill")
            response = server.post("/sleep", params={"level": level, "mode": mode})
        finally:
            server.gate.disarm()
        # What the client had received when /sleep answered, then what happened after.
        end_at_answer, tokens_at_answer = server.record.end(rid), len(server.record.tokens(rid))
        forwards_at_answer = server.forwards(rid)
        self._status(response, f"walk {where}")
        if server.gate.timed_out:
            raise oracle.Precondition(f"walk {where}: /sleep reached the engine more than {server.gate.GATE_S} s "
                                      f"after the in-flight request's prefill; timeline: {server.timeline}")
        events = server.timeline.events
        ended_at = [i for i, e in enumerate(events) if e.kind == "output" and e.detail[0] == rid]
        sleep_at = server.timeline.index("sleep", last=True) if level >= 1 else len(events)
        ends = model.in_flight_outcome(mode, level).ends
        if ends == "aborted":
            self._equal("requests.abort_aborts", (end_at_answer, tokens_at_answer < IN_FLIGHT_TOKENS),
                        (FinishReason.ABORT, True),
                        f"walk {where}: the request in flight when /sleep answered (finish reason, cut short)")
            self._holds("requests.clean_end", bool(ended_at) and ended_at[0] < sleep_at,
                        f"walk {where}: the abort output left the engine before the offload (#45326), "
                        f"timeline {server.timeline}", ended_at[:1], f"< {sleep_at}")
        elif ends == "completed":
            self._equal("requests.ends_in_race", (end_at_answer, tokens_at_answer),
                        (FinishReason.LENGTH, IN_FLIGHT_TOKENS),
                        f"walk {where}: the drained request when /sleep answered (finish reason, tokens)")
            self._holds("output.finish_length", bool(ended_at) and ended_at[0] < sleep_at,
                        f"walk {where}: the drained request ended by length before the offload (#45520), "
                        f"timeline {server.timeline}", ended_at[:1], f"< {sleep_at}")
        else:  # "held": a level-0 keep freezes it
            server.settle()
            self._equal("requests.held_while_paused",
                        (server.record.end(rid), server.forwards(rid)), (None, forwards_at_answer),
                        f"walk {where}: the request mode=keep froze (finish reason, forward passes) after "
                        "/sleep answered")
            self.held = Held(rid, tokens_at_answer)
            return
        server.settle()
        self._equal("requests.load_drains", server.unfinished(), 0,
                    f"walk {where}: requests the scheduler still holds after the in-flight request ended")

    def _wake(self, op, s: State, where: str) -> None:
        tags = op.params[0]
        params = {"tags": list(tags)} if tags is not None else None
        self._status(self.server.post("/wake_up", params=params), f"walk {where}")
        if self.held is None:
            return
        held = self.held
        if model.sleeping(op.apply(s)):
            self.server.settle()
            self._equal("requests.held_while_paused", self.server.record.end(held.request_id), None,
                        f"walk {where}: the paused request while still asleep")
            return
        self.held = None
        if not self.server.record.wait_ended([held.request_id]):
            self._alive(f"walk {where}")
        self._equal("requests.resumes_after_keep", self.server.record.end(held.request_id), FinishReason.LENGTH,
                    f"walk {where}: how the request a level-0 keep paused ended after the wake")
        self._equal("prefix_cache.kept_paused_request", self.server.record.tokens(held.request_id),
                    [SAMPLED_TOKEN] * IN_FLIGHT_TOKENS,
                    f"walk {where}: the paused request's tokens against an uninterrupted run's "
                    f"({held.tokens} before the pause)")
        self.server.settle()

    def _reload(self, op, s: State, where: str) -> None:
        path = op.params[0]
        body = {"method": "reload_weights"}
        if path is not None:
            body["kwargs"] = {"weights_path": self.checkpoints[path]}
        reloads = len(self.server.timeline.of("reload_weights"))
        self._status(self.server.post("/collective_rpc", json=body), f"walk {where}")
        after = op.apply(s)
        self._equal(model.golden_oracle(after), len(self.server.timeline.of("reload_weights")) - reloads, 1,
                    f"walk {where}: reload_weights calls that reached the worker (checkpoint "
                    f"{path or 'by model path'}, which the fake does not tell apart)")

    def _reset_prefix_cache(self, op, s: State, where: str) -> None:
        response = self.server.post("/reset_prefix_cache")
        self._status(response, f"walk {where}")
        body = response.json() if response.content else None
        result = None if body is None else body.get("success")
        self._equal("api.reset_prefix_cache_result", result, model.reset_prefix_cache_result(self.version),
                    f"walk {where}: POST /reset_prefix_cache on an idle engine ({body!r})")

    # --- after every step -------------------------------------------------------------------------
    def _check_state(self, where: str) -> None:
        s, server = self.state, self.server
        where = f"walk {where}"
        server.settle()
        self._alive(where)
        if model.sleeping(s) and not s.held_stream:
            self._held_probe(s, where)
        executor = server.proc.model_executor
        sleeping = model.sleeping(s)
        with oracle.together():
            self._equal("flags.is_sleeping", server.http_is_sleeping(), sleeping,
                        f"{where}: GET /is_sleeping (vLLM's route)")
            self._equal("flags.is_sleeping", server.client.call("is_sleeping"), sleeping,
                        f"{where}: EngineCore.is_sleeping")
            self._equal("flags.is_sleeping", (sorted(executor.sleeping_tags), executor.is_sleeping),
                        (sorted(s.asleep_tags), bool(s.asleep_tags)),
                        f"{where}: the executor's sleeping tags and is_sleeping (what /is_sleeping reads "
                        "besides the scheduler)")
            self._equal("flags.is_sleeping", server.client.call("is_scheduler_paused"), s.paused,
                        f"{where}: EngineCore.is_scheduler_paused (the other half of /is_sleeping; the gate "
                        "of #44483)")
            for tag in TAGS:
                self._equal(_residency_oracle(s, tag), server.worker.resident[tag], tag not in s.asleep_tags,
                            f"{where}: the fake worker's {tag} pool resident (a GPU's mapped bytes)")
            self._equal(model.golden_oracle(s), server.worker.weights_intact, model.serves(s) is not None,
                        f"{where}: the fake worker's weights intact (False: garbage after a level-2 sleep "
                        "until a reload), against the checkpoint the model says serves")
            if not s.held_stream:
                self._equal("requests.load_drains", server.unfinished(), 0,
                            f"{where}: requests the scheduler holds between steps")
        if model.hits_cache(s, "long"):
            # As the GPU walk: the cached blocks are part of the state, a repeat must still hit them.
            self._generate_cached(None, s, f"the cache probe after {where}")
        elif self.emptied_unseen and model.can_run(s):
            # As the GPU walk (runner._look_at_emptied_cache): the first look at a cache a step emptied,
            # then a reset, so that the state is the plan's again.
            self.emptied_unseen = False
            self._generate_cached(None, s, f"the first look at the emptied cache after {where}")
            self._reset_prefix_cache(None, s, f"the reset after looking, {where}")

    def _held_probe(self, s: State, where: str) -> None:
        """A request sent now must wait for the wake: sent, given a step, checked, then aborted as a
        client that gives up does, so the walk's state is unchanged."""
        rid = self.server.send(short_prompt(), PROBE_TOKENS, kind="probe")
        self.server.settle()
        error = self.server.alive()
        self._equal(_held_oracle(s), (self.server.forwards(rid), self.server.record.end(rid), repr(error)),
                    (0, None, "None"),
                    f"{where}: a request sent in ({s.describe()}) (forward passes, finish reason, engine error)")
        self.server.abort([rid])
        self.server.settle()

    # --- whole walks ------------------------------------------------------------------------------
    def run(self, walks, seed: int, shard: int) -> None:
        for walk in walks:
            start = self.state
            self.executed.append([])
            for i, op in enumerate(walk):
                try:
                    self.step(op)
                except oracle.OracleFailure as failure:
                    raise plan.with_replay(failure, seed, shard, walk, i, start, "a fresh engine",
                                           f"--test_filter=shard{shard}") from None

    def probe(self, walk) -> int:
        """A terminal probe (plan.terminal_probes): the way to a partial wake, then the full wake that the
        known divergence full_wake_remaps_resident_pool answers; the engine is not walked further.
        Returns the full wake's status."""
        *prefix, last = walk
        self.executed.append([])
        for op in prefix:
            self.step(op)
        s = self.state
        where = f"walk probe {last} from ({s.describe()})"
        pin = thresholds.divergence("full_wake_remaps_resident_pool", self.version)
        response = self.server.post("/wake_up")
        self._equal("api.full_wake_from_partial", {"status": response.status_code}, pin.expected,
                    f"{where}, {pin.describe()}; body {response.text[:300]!r}")
        self.server.settle()
        self._alive(where)
        executor = self.server.proc.model_executor
        if pin.applies:  # the server stays asleep: the executor keeps its sleeping tags
            self._equal("flags.is_sleeping", (self.server.http_is_sleeping(), sorted(executor.sleeping_tags)),
                        (True, sorted(s.asleep_tags)),
                        f"{where}: /is_sleeping and the executor's tags after the refused full wake")
        else:
            self.state = ops.effect(last, s)
            self._check_state(where)
        return response.status_code

    def coverage(self) -> tuple[set, collections.Counter]:
        """What the executed steps visited: pairs, and consecutive operations within a walk."""
        return plan.steps_coverage(self.executed)
