"""Oracles: every check the suite makes is a named invariant with a stable id, the bound it applies (from
the thresholds table, or an exact expectation) and the value measured.

A failing oracle raises OracleFailure, which carries the id, the measured value and the bound; the
suite's conftest turns it into JUnit properties of the failing test case
(`<property name="oracle" value="ID"/>`, `oracle_measured`, `oracle_bound`), and the mutant verdicts
read those properties, never the failure text (tests/core/verdict.py). Anything else a test raises
(a refused connection, a timeout of a wait, a fixture's precondition, a bug in the test) proves nothing
about sleep mode and is judged `errored`; so is an oracle that fired on a server not live by then
(liveness.py: the hook probes the servers the conftest watches, and marks the case).

The ids are listed once, in ORACLES: the catalogue of mutants names the ids that must fire for it, and a
unit test checks that every id it names is here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import threading

import pytest

from tests.core import liveness, thresholds
from tools.results.testlogs import ERRORED_PROPERTY  # what the verdicts read back
from tools.results.testlogs import ORACLE_PROPERTY as PROPERTY

MEASURED_PROPERTY, BOUND_PROPERTY = "oracle_measured", "oracle_bound"
VALUE_CHARS = 300  # of a measured value or bound in the JUnit properties


@dataclasses.dataclass(frozen=True)
class Oracle:
    id: str
    invariant: str  # what holds on a healthy server, in one line
    threshold: str | None = None  # the thresholds.TABLE entry that bounds it; None: an exact expectation
    # The entry for samples most of which ran while a GPU neighbour was in a start step (bounded_median):
    # a latency that healthy servers show 2-5x longer then, with noise of its own.
    beside_start: str | None = None


class OracleFailure(AssertionError):
    """The invariant `oracle_id` did not hold: `measured` broke `relation bound`."""

    def __init__(self, oracle_id: str, what: str, measured, bound, relation: str = "==", also=(), detail: str = ""):
        """also: the other OracleFailures of the same readings (oracle.together); detail: lines after the
        verdict (a replay script)."""
        if oracle_id not in ORACLES:
            raise KeyError(f"no oracle {oracle_id!r} in oracle.ORACLES; add it there with its invariant")
        self.oracle_id = oracle_id
        self.measured = measured
        self.bound = bound
        self.relation = relation
        self.what = what
        self.also = list(also)
        self.detail = detail
        text = f"[oracle {oracle_id}] {what}: measured {_text(measured)}, expected {relation} {_text(bound)}"
        super().__init__("\n".join([text] + [str(f) for f in self.also] + ([detail] if detail else [])))

    def failures(self) -> list[OracleFailure]:
        return [self] + self.also


class Precondition(Exception):
    """The test could not set up what its oracle needs (a prefix-cache hit to compare with, a race that
    must land mid-decode, a server awake before the test): it proves nothing either way."""


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


_collecting = threading.local()


def fail(oracle_id: str, what: str, measured, bound, relation: str = "==") -> None:
    failure = OracleFailure(oracle_id, what, measured, bound, relation)
    pending = getattr(_collecting, "failures", None)
    if pending is None:
        raise failure
    pending.append(failure)


@contextlib.contextmanager
def together():
    """Every oracle inside judges the same readings: all of them are evaluated, and one OracleFailure
    names each that failed (so a defect several bounds see is reported by all, whichever is checked
    first). Only for checks that do not depend on each other."""
    outer = getattr(_collecting, "failures", None)
    _collecting.failures = []
    try:
        yield
        failures = _collecting.failures
    finally:
        _collecting.failures = outer
    if failures:
        first, *rest = failures
        raise OracleFailure(first.oracle_id, first.what, first.measured, first.bound, first.relation, rest)


def equal(oracle_id: str, measured, expected, what: str) -> None:
    """measured == expected, else the oracle fails."""
    if measured != expected:
        fail(oracle_id, what, measured, expected, "==")


def holds(oracle_id: str, ok: bool, what: str, measured, expected) -> None:
    """ok, else the oracle fails with `measured` against the stated `expected`."""
    if not ok:
        fail(oracle_id, what, measured, expected, "is")


def bounded(
    recorder, oracle_id: str, measured: float, cell_id: str | None, what: str, threshold: str | None = None
) -> None:
    """Records `measured`, then holds it against the oracle's threshold for the cell (its relation,
    <, <= or >=, is the threshold's). threshold: another of the oracle's own entries (beside_start)."""
    o = ORACLES[oracle_id]
    if o.threshold is None:
        raise KeyError(f"oracle {oracle_id!r} has no threshold; use oracle.equal or oracle.holds")
    name = threshold or o.threshold
    if name not in (o.threshold, o.beside_start):
        raise KeyError(f"oracle {oracle_id!r} is not bounded by {name!r}")
    t = thresholds.threshold(name)
    bound = thresholds.get(name, cell_id)
    relation = t.relation
    ok = {"<": measured < bound, "<=": measured <= bound, ">=": measured >= bound}[relation]
    recorder.record(
        "", name, measured, t.unit, bound=bound, relation=relation, oracle=oracle_id, layer=t.layer, ok=ok, what=what
    )
    if not ok:
        fail(
            oracle_id,
            f"{what} (threshold {name!r}, cell {cell_id}, layer {t.layer}; triage: {thresholds.POLICY[t.layer]})",
            measured,
            bound,
            relation,
        )


def bounded_median(
    recorder, oracle_id: str, samples: list[float], beside: list[bool], cell_id: str | None, what: str
) -> None:
    """The median of the samples taken under the condition most of them ran under, against that
    condition's bound: with no GPU neighbour in a start step, the oracle's threshold; beside one, its
    beside_start threshold. Judging the two together would need a bound wide enough for the loaded
    samples, which a regression of a quiet wake would pass; judging only quiet ones would judge nothing
    where neighbours start all the time (the whole suite in one `bazel test`)."""
    if len(samples) != len(beside) or not samples:
        raise ValueError(f"{oracle_id}: {len(samples)} samples and {len(beside)} conditions")
    o = ORACLES[oracle_id]
    if o.beside_start is None:
        raise KeyError(f"oracle {oracle_id!r} has no beside_start threshold; use oracle.bounded")
    loaded = [s for s, b in zip(samples, beside) if b]
    quiet = [s for s, b in zip(samples, beside) if not b]
    if 2 * len(quiet) > len(samples):
        bounded(
            recorder,
            oracle_id,
            float(statistics.median(quiet)),
            cell_id,
            f"{what}; median of the {len(quiet)} with no neighbour in a start step",
        )
    else:
        bounded(
            recorder,
            oracle_id,
            float(statistics.median(loaded)),
            cell_id,
            f"{what}; median of the {len(loaded)} beside a neighbour's start step",
            threshold=o.beside_start,
        )


def properties(exc: BaseException) -> list[tuple[str, str]]:
    """The JUnit properties of a failure: the oracle's id, measured value and bound; for a
    liveness.Errored what happened and the liveness oracle that saw it; for any other exception (a bug in
    the test, a precondition, a wait that set nothing up) the errored mark, so that an oracle the same case
    fires in a later phase (a fixture's teardown) is no kill either; [] for a skip."""
    if isinstance(exc, liveness.Errored):
        return exc.properties()
    if isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception)):
        return []
    if not isinstance(exc, OracleFailure):
        kind = "precondition" if isinstance(exc, Precondition) else f"test code: {type(exc).__name__}"
        return [(ERRORED_PROPERTY, kind)]
    return [
        prop
        for f in exc.failures()
        for prop in (
            (PROPERTY, f.oracle_id),
            (MEASURED_PROPERTY, _text(f.measured)[:VALUE_CHARS]),
            (BOUND_PROPERTY, f"{f.relation} {_text(f.bound)}".strip()[:VALUE_CHARS]),
        )
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The conftest's hook (imported there): an oracle failure in set-up, call or teardown becomes the
    test case's JUnit properties, marked errored when a watched server is not live after it
    (liveness.after_oracle); a liveness.Errored its kind. The item's list too, since the teardown report,
    which the JUnit writer reads them from, copies it."""
    report = yield
    if call.excinfo is not None:
        found = properties(call.excinfo.value)
        if isinstance(call.excinfo.value, OracleFailure):
            found += liveness.after_oracle(call.excinfo.value)
        for name, value in found:
            item.user_properties.append((name, value))
            report.user_properties.append((name, value))
    return report


_LIST = [
    # --- flags: /is_sleeping and the vllm:engine_sleep_state gauge ---------------------------------
    Oracle(
        "flags.is_sleeping", "/is_sleeping reads true while any tag or the scheduler sleeps, false once all are awake"
    ),
    Oracle(
        "flags.gauge",
        "vllm:engine_sleep_state reads the state of the last call (pinned divergences applied per release)",
    ),
    # api.status, api.answers and server.healthy are liveness oracles: an overloaded host or any crash fires
    # them too, so they kill only a mutant whose defect is a hang or an error answer (tests/core/verdict.py).
    Oracle("api.status", "a sleep-API call on a live server answers 2xx (or the documented status of a misuse)"),
    Oracle(
        "api.answers",
        "a sleep-API call the server accepted is answered within the client's bound (a hang "
        "is #45326, or #45520's dead engine behind the API server)",
        "request_completion_s_max",
    ),
    Oracle("api.level_out_of_range", "/sleep?level=3 answers and changes state as pinned per release"),
    Oracle(
        "api.reset_prefix_cache_result",
        "/reset_prefix_cache on an idle server reports its result as pinned per release",
    ),
    Oracle(
        "api.full_wake_from_partial",
        "/wake_up without tags after a wake of one tag answers as pinned per release (full_wake_remaps_resident_pool)",
    ),
    Oracle(
        "api.kv_first_wake_after_level2",
        "after a level-2 sleep, /wake_up?tags=kv_cache with the weights still "
        "asleep answers, and leaves the server, as pinned per release (status, flags, gauge, /health, a "
        "request's outcome)",
    ),
    Oracle(
        "api.reload_while_weights_asleep",
        "collective_rpc reload_weights while the weights are asleep answers, "
        "and leaves the server, as pinned per release (status, flags, gauge, /health, a request's outcome)",
    ),
    Oracle("server.healthy", "/health answers 200 after every sequence of sleep-API calls"),
    # --- output of the serving checkpoint ---------------------------------------------------------
    Oracle("output.golden_tokens", "greedy token ids equal the golden run of the serving checkpoint"),
    Oracle("output.finish_length", "an ignore_eos request ends by length at max_tokens"),
    Oracle("output.logprob_drift", "per-token logprobs stay within the bound of the golden run", "logprob_drift_max"),
    Oracle("output.seeded_sampling", "seeded n>1 sampling gives the same ids before and after sleeps"),
    Oracle(
        "weights.pushed_checkpoint_golden",
        "after a weight push the server serves the pushed checkpoint's own golden, through every later sleep and wake",
    ),
    Oracle(
        "weights.reload_reaches_worker",
        "collective_rpc reload_weights reaches the worker once (the engine "
        "tier's stand-in for the checkpoint a reload loads, which its fake worker does not tell apart)",
    ),
    Oracle(
        "weights.served_after_plain_reload",
        "reload_weights without a path loads the checkpoint pinned "
        "per release (the one started on, or the last pushed)",
    ),
    # --- prefix cache -----------------------------------------------------------------------------
    Oracle("prefix_cache.reset_after_discard", "the first request after a level>=1 sleep hits no cached token"),
    Oracle(
        "prefix_cache.kept_at_level0",
        "a repeat after a level-0 pause (or a /pause with clear_cache=false) hits as many cached tokens as before it",
    ),
    Oracle(
        "prefix_cache.hit_iff_cached",
        "a repeat of the long prompt hits cached tokens iff its blocks were "
        "cached with the serving weights and no sleep of level >= 1 or reset came since",
    ),
    Oracle(
        "prefix_cache.kept_paused_request",
        "a request paused mid-decode (mode keep) resumes with the tokens of an uninterrupted run",
    ),
    # --- requests ---------------------------------------------------------------------------------
    Oracle(
        "requests.accepted",
        "a request sent while paused or asleep is accepted (/load) within the bound",
        "request_completion_s_max",
    ),
    Oracle("requests.held_while_paused", "a request sent during a level-0 pause stays pending until the wake"),
    Oracle(
        "requests.held_until_resident",
        "a request sent after a partial wake stays pending until every tag is resident (#44483)",
    ),
    Oracle("requests.held_while_asleep", "a request sent while asleep stays pending until the wake"),
    Oracle(
        "requests.completes", "a held request completes after the wake within the bound", "request_completion_s_max"
    ),
    Oracle("requests.load_drains", "/load returns to 0 once every request ended", "request_completion_s_max"),
    Oracle(
        "requests.ends_in_race",
        "every request in flight when /sleep lands ends (done or aborted) within the bound",
        "race_timeout_s",
    ),
    Oracle(
        "requests.clean_end",
        "a request in flight when /sleep?mode=abort lands ends by length, by "
        "abort or with an error event, never a cut stream",
    ),
    Oracle("requests.abort_aborts", "/sleep?mode=abort aborts requests that could not have finished"),
    Oracle(
        "requests.cancel_aborts",
        "a request waiting in the queue whose client went away leaves it (/load) within the bound and never runs",
        "abort_s_max",
    ),
    Oracle("requests.abort_time", "the requests a /sleep?mode=abort ends have ended within the bound", "abort_s_max"),
    Oracle("requests.resumes_after_keep", "a request paused with mode keep resumes and ends by length"),
    Oracle(
        "requests.abort_reaches_caller",
        "a request that a sleep with mode abort ends reaches its caller as ended (abort), as pinned per release"
        " and front door",
    ),
    Oracle(
        "api.dead_engine_call",
        "a sleep-API call in flight when the engine process dies raises EngineDeadError at its caller (never "
        "hangs), as pinned per release and front door",
    ),
    Oracle(
        "api.resume_while_asleep",
        "/resume while a tag still sleeps, then a request: scheduling kept paused and the request held until"
        " every tag is resident, or as pinned per release (resume_while_kv_cache_asleep)",
    ),
    Oracle(
        "flags.is_paused",
        "/is_paused is true from a /pause or a /sleep until /resume or the wake that resumes scheduling",
    ),
    Oracle(
        "api.wait_mode",
        "a sleep with mode wait is accepted and sleeps, or is refused, as pinned per release and front door",
    ),
    # --- device bytes (NVML) ----------------------------------------------------------------------
    Oracle(
        "device_bytes.settles", "NVML's bytes of the server settle within the bound after a call", "memory_settle_s_max"
    ),
    Oracle("device_bytes.level1_asleep", "bytes held asleep at level 1 / awake bytes", "level1_bytes_fraction_max"),
    Oracle("device_bytes.level2_asleep", "bytes held asleep at level 2 / awake bytes", "level2_bytes_fraction_max"),
    Oracle(
        "device_bytes.level1_freed_kv", "bytes freed by a level-1 sleep / KV cache bytes", "sleep_freed_kv_fraction_min"
    ),
    Oracle("device_bytes.level1_residue", "bytes resident at level 1, per execution mode", "level1_residue_bytes_max"),
    Oracle(
        "device_bytes.weights_wake_mapped",
        "|bytes a weights-only wake maps - checkpoint bytes| / checkpoint bytes",
        "weights_wake_bytes_rel_error_max",
    ),
    Oracle(
        "device_bytes.weights_wake_kv_unmapped",
        "after a weights-only wake the KV cache's bytes are still unmapped",
        "sleep_freed_kv_fraction_min",
    ),
    Oracle(
        "device_bytes.weights_wake_fraction",
        "bytes after a weights-only wake / awake bytes",
        "weights_wake_bytes_fraction_max",
    ),
    Oracle("device_bytes.kv_wake_mapped", "after a KV-cache-only wake the KV cache's bytes are mapped back"),
    Oracle("device_bytes.kv_wake_weights_unmapped", "after a KV-cache-only wake the weights' bytes are still unmapped"),
    Oracle(
        "device_bytes.wake_growth", "bytes after a full wake - awake bytes before the sleep", "wake_restore_bytes_max"
    ),
    Oracle(
        "device_bytes.wake_shortfall",
        "awake bytes before the sleep - bytes after a full wake",
        "wake_shortfall_bytes_max",
    ),
    Oracle(
        "device_bytes.leak_per_cycle",
        "median cycle-to-cycle growth of the bytes over level-1 cycles",
        "leak_bytes_per_cycle_max",
    ),
    Oracle("device_bytes.cycle_spread", "max - min of the bytes over level-1 cycles 2..N", "cycle_bytes_flat_max"),
    Oracle(
        "device_bytes.freed_at_sleep_answer",
        "device bytes freed at the first reading after /sleep answers / KV cache bytes",
        "sleep_freed_immediate_kv_fraction_min",
    ),
    Oracle(
        "device_bytes.restored_at_wake_answer",
        "device bytes before the sleep - the first reading after /wake_up answers",
        "wake_shortfall_immediate_bytes_max",
    ),
    # --- host bytes (VmRSS of the server's process tree) ------------------------------------------
    Oracle(
        "host_bytes.level1_copy_min",
        "host bytes a first level-1 sleep adds / checkpoint bytes",
        "host_copy_weights_ratio_min",
    ),
    Oracle(
        "host_bytes.level1_copy_max",
        "host bytes a first level-1 sleep adds / checkpoint bytes",
        "host_copy_weights_ratio_max",
    ),
    Oracle("host_bytes.level2_asleep", "host bytes a level-2 sleep adds", "level2_host_bytes_max"),
    Oracle("host_bytes.retained_after_wake", "what the host copy leaves after the wake, as pinned per release"),
    Oracle(
        "host_bytes.leak_per_cycle",
        "median cycle-to-cycle growth of host bytes over level-1 cycles",
        "host_leak_bytes_per_cycle_max",
    ),
    Oracle("host_bytes.cycle_spread", "max - min of host bytes over level-1 cycles 2..N", "host_cycle_flat_max"),
    # --- the executor's bookkeeping, seen by the engine tier's fake worker (tests/engine) ------------
    Oracle(
        "executor.worker_calls",
        "the worker receives exactly the sleeps and wakes the executor's "
        "bookkeeping lets through: none for level 0 or the scheduling tag, none while asleep again, none "
        "for a tag that is not asleep (#31618, #48310)",
    ),
    Oracle(
        "engine.failed_sleep_state",
        "a worker failure inside sleep reaches the caller and leaves the "
        "state vLLM documents: the scheduler paused, the executor's flags untouched, the memory released",
    ),
    # --- the state walk -----------------------------------------------------------------------------
    Oracle("walk.pairs_visited", "a shard's walks visit every situation pair of its partition"),
    # --- latency ----------------------------------------------------------------------------------
    Oracle("latency.sleep", "median seconds of a level-1 /sleep", "sleep_s_max"),
    Oracle("latency.wake", "median seconds of a full /wake_up", "wake_s_max", "wake_beside_start_s_max"),
    Oracle(
        "latency.staged_wake",
        "median seconds of wake weights + wake kv_cache",
        "staged_wake_s_max",
        "staged_wake_beside_start_s_max",
    ),
    Oracle("latency.cycle", "median seconds of sleep + wake + the first request", "cycle_s_max"),
]
ORACLES = {o.id: o for o in _LIST}
if len(ORACLES) != len(_LIST):
    raise ValueError("duplicate oracle ids in oracle._LIST")
