"""Server reuse between test classes (SLEEPWAKE_REUSE_SERVERS=1; off by default): of one test process,
and, where the launcher can hand a server on (tools/launcher/parking.py: a server forked by a zygote),
of every test process on the machine, so that the cells of one runner x mode share their servers.

A class's server, given back when every test of the class passed, is lent to the next class that asks
for a server of the same configuration, once a reset to INITIAL has been checked, not assumed: awake by
both flags, /health, an empty prefix cache, the start checkpoint's goldens, and device and host bytes
within a healthy server's noise of what the server held fresh. A check that fails means a fresh server
for that class, never a red class. A class that measures what only a fresh server shows declares
`FRESH_SERVER = "why"` and neither borrows nor gives back; one that ends its server's usable life (a
terminal probe) declares `ENDS_SERVER = "why"`: it borrows, and never gives back. A class whose initial
state holds more than these invariants declares `LEND_CHECK`, a function (LendCheck) that judges them
on a lent server after the common ones: a refusal there is a fresh server too (the state walk's
shards: tests/sleep_wake/test_state_walk.py). The fresh readings travel with the server:
the launcher keeps them with a parked one (Fresh.as_record) and hands them to its next test process.

What "the same configuration" is: in one process, the cell's ServerConfig but for its log directory,
the environment that reaches a server (a mutant's switch, PYTHONPATH) being the test process's, the
same for every class of it; across processes, the launcher's parking key (the config, the checkpoint's
files, the zygote's key, the mutant's switch). Where the goldens come from: the golden action's file of
the start checkpoint when the target has one (SLEEPWAKE_GOLDEN_A), else what the server answered fresh,
after its warm-up and before any class.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Protocol

import requests

from tests.core import (
    cells,
    expect,
    goldens,
    host_bands,
    host_memory,
    liveness,
    memory,
    metrics,
    oracle,
    prompts,
    servers,
    thresholds,
)
from tests.core.client import Completion, ServerResponseError
from tools.launcher.interface import Server

ENV = "SLEEPWAKE_REUSE_SERVERS"
LONG = prompts.LONG_PROMPTS[0]  # several KV blocks: the probe of an empty prefix cache


def enabled(environ=None) -> bool:
    value = (os.environ if environ is None else environ).get(ENV, "0")
    if value not in ("0", "1"):
        raise ValueError(f"{ENV}={value!r}: say 1 to lend servers between classes, 0 (the default) not to")
    return value == "1"


def key_of(config) -> str:
    """The configuration a borrower must share: every ServerConfig field but the log directory."""
    fields = dataclasses.asdict(config)
    fields.pop("log_dir", None)
    return json.dumps(fields, sort_keys=True, default=str)


@dataclasses.dataclass
class Fresh:
    """What a server showed fresh, after its warm-up and before any class: the readings every reset is
    judged against, and the checkpoint it started on."""

    checkpoint: str
    device_bytes: int
    host_bytes: int  # VmRSS over its process tree, as the walk reads it
    golden: dict  # prompt -> Completion of PROMPTS (prompts.py), greedy

    def as_record(self) -> dict:
        """JSON for the launcher to keep with a parked server (tools/launcher/parking.py)."""
        record = dataclasses.asdict(self)
        record["golden"] = {p: dataclasses.asdict(c) for p, c in self.golden.items()}
        return record

    @classmethod
    def from_record(cls, record: dict | None) -> Fresh | None:
        if not record:
            return None
        golden = {p: Completion(**c) for p, c in record["golden"].items()}
        return cls(record["checkpoint"], record["device_bytes"], record["host_bytes"], golden)


@dataclasses.dataclass
class Lent:
    """A started server (its context exits it) with its fresh readings and the classes it served."""

    context: object
    server: Server
    fresh: Fresh | None
    classes: list = dataclasses.field(default_factory=list)
    # What the borrowing class's LEND_CHECK found the server in (the walk: its model state), for that class
    # to start from; None for a server started for it, or a class without a check of its own.
    initial: object = None


class LendCheck(Protocol):
    """A class's own invariants of its initial state on a lent server, after reset() and refusal(): the
    first it breaks, said as refusal() says it, or None; it may set lent.initial. An oracle failure or a
    request that fails is a refusal too (lend())."""

    def __call__(self, cell, lent: Lent, client, recorder) -> str | None: ...


class Pool:
    """The idle servers of this test process, one per configuration (classes run one after another)."""

    def __init__(self, on: bool):
        self.on = on
        self._idle: dict[str, Lent] = {}

    def take(self, key: str) -> Lent | None:
        return self._idle.pop(key, None) if self.on else None

    def keep(self, key: str, lent: Lent) -> Lent | None:
        """Keeps lent idle; returns the server it displaces (the caller stops it), if any."""
        displaced = self._idle.pop(key, None)
        self._idle[key] = lent
        return displaced

    def drain(self) -> list[Lent]:
        idle, self._idle = list(self._idle.values()), {}
        return idle


def warm_up(client, streams: bool = True) -> None:
    """One request of every kind the suite sends, so that the fresh readings include what a server's heap
    and activation blocks grow by at their first such answer (test_state_walk.py's warm-up says how much);
    streams: whether the front door streams (else the long request is sent whole, as the walk sends it)."""
    for prompt in prompts.PROMPTS + [LONG]:
        client.complete(prompt, prompts.GOLDEN_MAX_TOKENS, logprobs=1)
    client.complete(
        prompts.SEEDED_PROMPT,
        prompts.GOLDEN_MAX_TOKENS,
        temperature=prompts.SEEDED_TEMPERATURE,
        seed=prompts.SEED,
        n=prompts.SEED_N,
    )
    if streams:
        client.complete_stream(prompts.IN_FLIGHT, prompts.STREAM_TOKENS)
    else:
        client.complete(prompts.IN_FLIGHT, prompts.STREAM_TOKENS)
    client.reset_prefix_cache()


def _golden(cell, client, checkpoint: str) -> dict:
    path = os.environ.get(goldens.ENV["A"])
    if path:
        return goldens.read(
            path,
            runner=cell.config.runner,
            mode=cell.config.execution_mode,
            identity=servers.identity(),
            checkpoint=goldens.checkpoint_name(checkpoint),
            prompts=prompts.PROMPTS,
        )
    return expect.take_golden(client, prompts.PROMPTS)


def read_fresh(cell, server, client, checkpoint: str, recorder=None) -> Fresh:
    """The readings of a server just started, after its warm-up."""
    warm_up(client, streams=cells.door_cannot(cell, "stream") is None)
    golden = _golden(cell, client, checkpoint)
    client.reset_prefix_cache()
    device = memory.settled_gpu_bytes(server, "a fresh server, warmed up (reuse)", recorder=recorder)
    return Fresh(checkpoint, device, host_memory.server_host_memory(server)[0].rss, golden)


def reset(client, checkpoint: str) -> None:
    """Back to INITIAL from whatever a passing class left: both pools and the scheduler awake, the start
    checkpoint's weights (a pushed checkpoint stays the model path until the next reload names another),
    no cached blocks."""
    client.wake_everything()
    client.reload_weights(checkpoint)
    client.reset_prefix_cache()


def refusal(cell, server, client, fresh: Fresh, recorder=None) -> str | None:
    """Why the server may not be lent after reset(): the first invariant of INITIAL it breaks, its
    measured value and its bound; None when it holds every one."""
    if not client.health():
        return "GET /health is not 200"
    state = client.state()
    if state.is_sleeping or state.gauge != metrics.GAUGE_AWAKE:
        return f"not awake: is_sleeping={state.is_sleeping} gauge={state.gauge}"
    cached = client.complete(LONG, prompts.GOLDEN_MAX_TOKENS).cached_tokens
    if cached:
        return f"prefix cache not empty: {cached} cached tokens for a prompt no request sent since the reset"
    # Token ids and logprobs: a server that left a class computing otherwise may keep its argmax (one
    # lent on the H200 did, docs/oracles.md "Known divergences").
    drift_max = thresholds.get("logprob_drift_max", cell.id)
    for prompt in prompts.PROMPTS:
        seen, golden = client.complete(prompt, prompts.GOLDEN_MAX_TOKENS, logprobs=1), fresh.golden[prompt]
        if seen.token_ids[0] != golden.token_ids[0]:
            return (
                f"not the start checkpoint's golden for {prompt!r}: {seen.token_ids[0]} against {golden.token_ids[0]}"
            )
        drift = expect.logprob_drift(seen, golden)
        if drift > drift_max:
            return (
                f"logprobs {drift:.4f} nats off the start checkpoint's golden for {prompt!r},"
                f" over logprob_drift_max {drift_max}"
            )
    client.reset_prefix_cache()
    device = memory.settled_gpu_bytes(server, "a server reset for reuse", recorder=recorder)
    growth, shortfall = device - fresh.device_bytes, fresh.device_bytes - device
    for name, value in (("wake_restore_bytes_max", growth), ("wake_shortfall_bytes_max", shortfall)):
        bound = thresholds.get(name, cell.id)
        if value > bound:
            return f"device bytes {device} against {fresh.device_bytes} fresh: {value} over {name} {bound}"
    host = host_memory.server_host_memory(server)[0].rss
    bands = awake_host_bands(cell.id, client.version(), fresh)
    if not any(lo <= host <= hi for lo, hi in bands.values()):
        return f"host bytes {host} in none of the awake bands over {fresh.host_bytes} fresh: {bands}"
    return None


def awake_host_bands(cell_id: str, version: str, fresh: Fresh) -> dict[str, tuple[float, float]]:
    """The host bytes an awake server may hold against what it held fresh, as the walk bounds them in
    INITIAL (host_bands.py): with no host copy cached, and, where the release keeps a level-1 copy's
    pinned block after the wake, with that block. A lender does not know whether a class slept at
    level 1, so either holds."""
    bands = {"no host copy cached": (0.0, fresh.host_bytes + host_bands.drift(cell_id))}
    if host_bands.copy_cached_after_wake(version):
        weights = memory.checkpoint_tensor_bytes(fresh.checkpoint)
        bands["a level-1 copy's block cached"] = host_bands.copy_held(fresh.host_bytes, weights, cell_id)
    return bands


def lend(cell, lent: Lent, client, recorder=None, check: LendCheck | None = None) -> str | None:
    """reset() then refusal(), then the borrowing class's own check; a reset the server refuses or does not
    answer is a refusal too: the lender judges the server, the borrowing class has not started."""
    if lent.fresh is None:
        return "no fresh readings to judge it by (a server started for a class that gives none back)"
    lent.initial = None
    try:
        reset(client, lent.fresh.checkpoint)
        why = refusal(cell, lent.server, client, lent.fresh, recorder)
        if why is None and check is not None:
            why = check(cell, lent, client, recorder)
        return why
    except (oracle.OracleFailure, liveness.Errored, requests.RequestException, ServerResponseError) as e:
        return f"the reset or a check of it failed: {type(e).__name__}: {str(e)[:300]}"
