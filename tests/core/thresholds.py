"""Every numeric bound of the suite, in one table.

Triage policy (the only place it is written; entries of the "wait" layer are not bounds, see below):
  * layer "contract": the bound is part of what vLLM's sleep API promises (flags, output identity,
    requests end, error statuses). A failure is a bug: file it with the test id and the server log.
  * layer "mechanism": the bound depends on how the mechanism is implemented and on the hardware
    (bytes freed, latency, leak per cycle). A failure is first compared against a baseline run of the
    same cell (same runner x mode, same GPU, previous vLLM build) before filing; only a regression
    against that baseline is a bug.

`source` says why a bound is where it is. Bound policy (docs/oracles.md, "Bounds"): a mechanism bound sits
near what a healthy server shows, never at the size of a defect written for it: its noise record (`record`, a key of
noise.json next to this file) holds the healthy extreme measured on the H200 (the largest value of an upper
bound, the smallest of a lower bound, over every cell of >= 3 runs), and the bound is at most
NOISE_FACTOR_MAX times away from it; where the healthy value is 0, the bound is one measurement granule
(`granule`: NVML maps in 2 MiB, /proc counts 4 KiB pages) with a strict `<`. Contract bounds are what the
API promises (a hang detector, an exact state) and say so in `source`. A contract bound may have a noise
record too; where it sits more than NOISE_FACTOR_MAX times away from it, `source` says why and a mutant
1.5 times past it proves the bound still catches a defect of about its size (PROBED in
tests/mutants/unit/catalogue_unit_test.py). `per_cell` overrides the value for one runner, one mode or one
runner-mode pair; add such keys only from measurement (e.g. graph mode keeps its CUDA-graph pool resident,
#45648).

The measurements are data, not code: noise.json holds each record (extreme, readings, cells, the runs, the
run that set the extreme, what each run measured) and the runs (date, GPUs, vLLM release, what ran).
`python3 -m tests.core.noise_floor --merge` adds a run to it; docs/thresholds.md shows it
(tests/core/bounds_doc.py). Only unit tests (thresholds_unit_test, the mutants'
catalogue_unit_test) and bounds_doc read it, so recording a run leaves every GPU cell's cached result valid.
"""

import dataclasses
import functools
import json
import os

from tests.core import host_memory, metrics, releases
from tests.core.cells import EXECUTION_MODES, RUNNERS
from tools import matrix

CONTRACT = "contract"
MECHANISM = "mechanism"
WAIT = "wait"
LAYERS = (CONTRACT, MECHANISM, WAIT)
POLICY = {
    CONTRACT: "contract layer: a failure is a bug in vLLM's sleep API (file it with the server log)",
    MECHANISM: (
        "mechanism layer: compare against a baseline run of the same cell before filing; "
        "only a regression against that baseline is a bug"
    ),
    WAIT: (
        "wait layer: how often a test looks while it waits; never a bound, so it fails nothing: a "
        "longer poll only costs time, a shorter one only costs requests to the server"
    ),
}
NOISE_FACTOR_MAX = 4.0
NOISE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "noise.json")
GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
NVML_GRANULE = 2 * MiB  # cuMem maps and unmaps device memory in 2 MiB granules
PAGE = 4 * KiB  # VmRSS counts whole pages


@dataclasses.dataclass(frozen=True)
class Noise:
    """What healthy servers showed: the largest value measured for an upper bound (the smallest for a
    lower bound), over `runs` matrix runs of `cells`. per_cell: the same for a bound's per_cell keys.
    From noise.json: run_ids names the runs, run the one that set the value (None: not known), n the
    readings behind it (None: not counted)."""

    value: float
    runs: int
    cells: str
    source: str
    per_cell: dict = dataclasses.field(default_factory=dict)
    run_ids: tuple = ()
    run: str | None = None
    n: int | None = None


class NoiseRecordError(KeyError):
    """A threshold names a noise record that noise.json lacks (or the file is missing)."""

    def __str__(self) -> str:  # KeyError's own str() quotes the message
        return str(self.args[0])


@functools.cache
def noise_data(path: str = NOISE_FILE) -> dict:
    """noise.json: {"records": {name: record}, "runs": {run id: run}} (noise_floor.py writes it)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise NoiseRecordError(
            f"{path} is missing: the noise records live there. Under Bazel, add "
            "//tests/core:noise.json to the target's data"
        ) from None


def noise_record(ref: str, path: str = NOISE_FILE) -> Noise | None:
    """The noise record `ref` of noise.json as a Noise; None for a record of history only (readings
    written down before any set an extreme; noise_floor --merge fills one in)."""
    try:
        record = noise_data(path)["records"][ref]
    except KeyError:
        raise NoiseRecordError(
            f"no noise record {ref!r} in {path}: record the bound's healthy extreme from a run's test logs "
            "with `python3 -m tests.core.noise_floor --merge --run ID --what TEXT "
            "bazel-testlogs`, or fix the threshold's record="
        ) from None
    if "value" not in record:
        return None
    ids = tuple(record["runs"])
    return Noise(
        record["value"],
        len(ids),
        record["cells"],
        f"noise.json runs {', '.join(ids)}",
        per_cell={k: v["value"] for k, v in record["per_cell"].items()},
        run_ids=ids,
        run=record["run"],
        n=record["n"],
    )


@dataclasses.dataclass(frozen=True)
class Threshold:
    name: str
    value: float
    unit: str
    layer: str
    source: str
    per_cell: dict = dataclasses.field(default_factory=dict)
    noise: Noise | None = None  # given inline (a unit test's entry); the table's come from `record`
    granule: float | None = None  # the measurement's resolution, where the noise is 0
    strict: bool = False  # measured < value (a bound of one granule over a noise of 0), not <=
    record: str | None = None  # the key of its noise record in noise.json (required for the mechanism layer)

    @property
    def relation(self) -> str:
        if self.name.endswith("_min"):
            return ">="
        return "<" if self.strict else "<="

    def cell_key(self, cell_id: str | None) -> str | None:
        """The per_cell key that bounds a cell ("runner-mode" first, then mode, then runner); None: the
        default value."""
        if not cell_id:
            return None
        key = cell_id.lower()
        runner, _, mode = key.partition("-")
        return next((k for k in (key, mode, runner) if k in self.per_cell), None)

    def bound_at(self, key: str | None) -> float:
        """The bound of a per_cell key (None: the default value)."""
        return self.per_cell.get(key, self.value) if key else self.value

    def recorded_noise(self) -> Noise | None:
        """Its healthy extreme: `noise` where given inline, else its noise record (read from noise.json
        on first use; NoiseRecordError when the record is missing)."""
        if self.noise is not None:
            return self.noise
        return noise_record(self.record) if self.record else None

    def noise_at(self, key: str | None) -> float | None:
        """The healthy extreme behind the bound of a per_cell key (None: the default value)."""
        noise = self.recorded_noise()
        if noise is None:
            return None
        return noise.per_cell.get(key, noise.value) if key else noise.value

    def factor(self, key: str | None = None) -> float | None:
        """How many times the bound is away from its healthy extreme (>= 1 when the bound is sane);
        None where the noise is 0 (the bound is a granule) or unknown."""
        noise = self.noise_at(key)
        value = self.bound_at(key)
        if not noise:
            return None
        return noise / value if self.relation == ">=" else value / noise


def valid_cell_keys() -> set[str]:
    """Keys allowed in per_cell: a runner, a mode, or "runner-mode" (all lower case)."""
    return set(RUNNERS) | set(EXECUTION_MODES) | {f"{r}-{m}" for r in RUNNERS for m in EXECUTION_MODES}


_TABLE = [
    # --- memory (NVML bytes of the server's process tree) ---------------------------------------
    Threshold(
        "level1_bytes_fraction_max",
        0.35,
        "fraction of awake bytes",
        MECHANISM,
        "level 1 leaves the allocator's residue and, in graph mode, the CUDA-graph pool resident (graph highest)",
        record="level1_bytes_fraction_max",
    ),
    Threshold(
        "level2_bytes_fraction_max",
        0.35,
        "fraction of awake bytes",
        MECHANISM,
        "level 2 holds what level 1 does once weights are not backed up",
        record="level2_bytes_fraction_max",
    ),
    Threshold(
        "weights_wake_bytes_fraction_max",
        0.5,
        "fraction of awake bytes",
        MECHANISM,
        "a weights-only wake brings the weights back while the 2 GiB KV cache stays released",
        record="weights_wake_bytes_fraction_max",
    ),
    Threshold(
        "level1_residue_bytes_max",
        1 * GiB,
        "bytes",
        MECHANISM,
        "what level 1 leaves resident; graph mode also keeps its CUDA-graph pool (#45648), hence a bound of its own",
        per_cell={"graph": 1.15 * GiB},
        record="level1_residue_bytes_max",
    ),
    Threshold(
        "wake_restore_bytes_max",
        256 * MiB,
        "bytes (woken - awake: growth)",
        MECHANISM,
        "settled per process: a full wake remaps the same pools, growth beyond is a leak",
        record="wake_restore_bytes_max",
    ),
    Threshold(
        "wake_shortfall_bytes_max",
        128 * MiB,
        "bytes (awake - woken: shortfall)",
        MECHANISM,
        "graph cells come back to the same bytes, or short by the sampler's blocks in torch's caching "
        "allocator after a staged wake (a sleep empties that cache; the same blocks show as growth when "
        "the awake reading had none); eager cells come back lower on MRV1 and MRV2 alike, by the "
        "activation blocks the allocator held before the sleep emptied it, hence a bound of their own",
        per_cell={"eager": 400 * MiB},
        record="wake_shortfall_bytes_max",
    ),
    Threshold(
        "weights_wake_bytes_rel_error_max",
        0.15,
        "fraction of checkpoint tensor bytes",
        MECHANISM,
        "a weights-only wake maps the checkpoint's tensor bytes and little else",
        record="weights_wake_bytes_rel_error_max",
    ),
    Threshold(
        "sleep_freed_kv_fraction_min",
        0.95,
        "fraction of SLEEPWAKE_KV_CACHE_BYTES",
        MECHANISM,
        "a level-1 sleep frees at least the KV cache (the weights and the allocator's cache go too)",
        record="sleep_freed_kv_fraction_min",
    ),
    Threshold(
        "memory_settle_s_max",
        10.0,
        "s",
        CONTRACT,
        "a contract, not a measurement: a sleep or wake is over when its call answers, so NVML's "
        "per-process bytes must stop moving (three readings within one granule, at least one "
        "memory_settle_poll_s apart) well inside this; a release still trickling after 10 s is a "
        "defect whatever its size. Healthy readings settle at the first look or after one span "
        "(measured per reading: memory_settle_s in measurements.jsonl)",
    ),
    # The leak pair, in the order the leak-cycle test checks them: a steady leak shows in the median
    # step (one jump does not move it), a jump shows in the spread. Healthy servers move neither by a
    # single granule, so each bound is one granule, strict: any leak NVML can see fails.
    Threshold(
        "leak_bytes_per_cycle_max",
        NVML_GRANULE,
        "bytes (median of the cycle-to-cycle steps)",
        MECHANISM,
        "healthy servers grow by no granule per cycle",
        granule=NVML_GRANULE,
        strict=True,
        record="leak_bytes_per_cycle_max",
    ),
    Threshold(
        "cycle_bytes_flat_max",
        NVML_GRANULE,
        "bytes (max - min over cycles 2..10)",
        MECHANISM,
        "healthy servers' bytes spread by no granule over 10 cycles",
        granule=NVML_GRANULE,
        strict=True,
        record="cycle_bytes_flat_max",
    ),
    # --- immediacy: device-wide NVML bytes, read once, right after the call returns --------------
    Threshold(
        "sleep_freed_immediate_kv_fraction_min",
        0.95,
        "fraction of SLEEPWAKE_KV_CACHE_BYTES",
        MECHANISM,
        "the KV cache freed at the first reading, taken without any wait under the GPU's exclusive "
        "memory phase, so a release that lands after /sleep answers fails",
        record="sleep_freed_immediate_kv_fraction_min",
    ),
    Threshold(
        "wake_shortfall_immediate_bytes_max",
        128 * MiB,
        "bytes (used before the sleep - first reading after the wake)",
        MECHANISM,
        "the first device-wide reading after /wake_up answers, so memory mapped after the answer fails",
        record="wake_shortfall_immediate_bytes_max",
    ),
    # --- host memory: VmRSS of the server's process tree (host_memory.py) --------------------
    Threshold(
        "host_copy_weights_ratio_min",
        1.2,
        "host bytes added by the first level-1 sleep / checkpoint tensor bytes",
        MECHANISM,
        "the weights pool copied to pinned blocks rounded up by PyTorch's caching host allocator. Less "
        "is a weight not backed up (garbage after wake)",
        record="host_copy_weights_ratio_min",
    ),
    Threshold(
        "host_copy_weights_ratio_max",
        1.8,
        "host bytes added by the first level-1 sleep / checkpoint tensor bytes",
        MECHANISM,
        "one copy of the weights pool in pinned blocks. More is a second copy",
        record="host_copy_weights_ratio_max",
    ),
    Threshold(
        "level2_host_bytes_max",
        11 * MiB,
        "bytes (host bytes asleep at level 2 - awake)",
        MECHANISM,
        "level 2 copies no weights (device_allocator/sleep_mode_backend.py CuMemBackend.suspend: "
        "offload_tags=() unless level 1), gpu_worker.py Worker.sleep saves only the model's buffers to "
        "CPU; the rest is API-server heap noise",
        record="level2_host_bytes_max",
    ),
    Threshold(
        "host_leak_bytes_per_cycle_max",
        32 * KiB,
        "bytes (median of the cycle-to-cycle steps; RssAnon + RssShmem)",
        MECHANISM,
        "every level-1 sleep after the first reuses the pinned blocks PyTorch's caching host allocator "
        "kept (known divergence host_copy_cached_after_wake)",
        record="host_leak_bytes_per_cycle_max",
    ),
    Threshold(
        "host_cycle_flat_max",
        352 * KiB,
        "bytes (max - min over cycles 2..10; RssAnon + RssShmem)",
        MECHANISM,
        "as host_leak_bytes_per_cycle_max, for a one-off jump (a second copy pinned once). Over "
        "allocated pages, not VmRSS: a healthy engine core's RssFile moves with the page cache "
        "reclaiming library pages (its record's history)",
        record="host_cycle_flat_max",
    ),
    # --- output --------------------------------------------------------------------------------
    Threshold(
        "logprob_drift_max",
        1e-2,
        "nats (absolute, per token)",
        CONTRACT,
        "a contract: level-1 sleep copies weights back bit-exact and a push loads the same file, so "
        "healthy servers drift by kernel nondeterminism alone (its record); 1e-2 tolerates that only: "
        "the bound is the promise, not a measurement, wherever the noise sits below it. The mutant "
        "weights_perturbed drifts 1.5x past it, so a drift of the bound's own size is caught",
        record="logprob_drift_max",
    ),
    # --- requests end --------------------------------------------------------------------------
    Threshold(
        "request_completion_s_max",
        60.0,
        "s",
        CONTRACT,
        "a contract, not a measurement: a hang detector. A 16-token greedy request on the synthetic "
        "model ends in well under 1 s on the H200 (test.log timings); one that does not end in 60 s "
        "hangs (#45326). Also each HTTP call's timeout",
    ),
    Threshold(
        "race_timeout_s",
        120.0,
        "s",
        CONTRACT,
        "a contract, not a measurement: a hang detector for the streaming burst of a generate/sleep "
        "race (768 tokens x 8 requests end in seconds); #45520 killed the engine behind a 200 and "
        "#45326 left requests open forever",
    ),
    Threshold(
        "abort_s_max",
        10.0,
        "s",
        CONTRACT,
        "a contract: sleep?mode=abort ends the requests in flight before it returns (the abort "
        "outputs are sent first, v1/engine/core.py pause_scheduler), so the stream ends within the "
        "time its last chunk takes to arrive; 10 s separates that from a drain of 768 tokens x 4 "
        "choices or a hang, hence far past the healthy times (its record). The mutant "
        "abort_delayed ends the stream 1.5x past it, so an abort that late is caught",
        record="abort_s_max",
    ),
    Threshold(
        "held_request_window_s",
        2.0,
        "s",
        CONTRACT,
        "observation window: a request held by a partial wake must stay pending this long "
        "(#44483); 2 s is ~100x the time the request takes when scheduled",
    ),
    # --- latency (median of repeats) -----------------------------------------------------------
    Threshold(
        "sleep_s_max",
        0.4,
        "s",
        MECHANISM,
        "each sleep timed inside its FREE phase beside GPU neighbours (client.last_call_s)",
        record="sleep_s_max",
    ),
    # Judged only on the samples with no GPU neighbour in a start step: a whole suite in one `bazel test`
    # can put every wake of a cell beside one, and the bounds below judge those.
    Threshold(
        "wake_s_max",
        0.30,
        "s",
        MECHANISM,
        "the full wakes judged with no neighbour in a start step (oracle.bounded_median), each timed "
        "inside its ALLOCATE phase",
        record="wake_s_max",
    ),
    Threshold(
        "staged_wake_s_max",
        0.30,
        "s",
        MECHANISM,
        "wake weights + wake kv_cache, judged with no neighbour in a start step, each call timed "
        "inside its memory phase",
        record="staged_wake_s_max",
    ),
    # The same medians when most of a test's samples ran beside a neighbour's start step (a weight load,
    # a profile run, a graph capture share the GPU's copy engines and driver with the wake).
    Threshold(
        "wake_beside_start_s_max",
        0.60,
        "s",
        MECHANISM,
        "full wakes beside a neighbour's start step; faster starts put more wakes beside one",
        record="wake_beside_start_s_max",
    ),
    Threshold(
        "staged_wake_beside_start_s_max",
        0.60,
        "s",
        MECHANISM,
        "wake weights + wake kv_cache beside a neighbour's start step",
        record="staged_wake_beside_start_s_max",
    ),
    Threshold(
        "cycle_s_max",
        1.5,
        "s",
        MECHANISM,
        "sleep + wake + a 16-token request, the three calls' own times",
        record="cycle_s_max",
    ),
    # --- waiting: how often a test looks (observation windows, which oracles rely on, are above) ---
    Threshold(
        "poll_s",
        0.05,
        "s",
        WAIT,
        "measure.wait_until: each look is one or two loopback HTTP calls (/load, /metrics, "
        "/is_sleeping) or an NVML read, a few ms each, so a wait ends within 0.05 s of its "
        "condition at a few percent of one core; the timeouts, not the poll, are the bounds",
    ),
    Threshold(
        "host_stall_s",
        1.0,
        "s",
        WAIT,
        "stalls.Sampler: a gap this long between two of its readings of the clock (poll_s apart) is a stall of "
        "the test's process, not scheduling noise (its record: the largest gap on a shared CPU host, beside a busy "
        "thread and CPU hogs), so a timed sample whose window holds one is left out and counted, never judged; "
        "far below abort_s_max, so a stall cannot make up most of a sample it lets through",
        record="host_stall_s",
    ),
    Threshold(
        "race_tokens",
        64,
        "tokens",
        WAIT,
        "the tokens each request a walk sleep races asks for (walk/gpu_walk.py race_tokens): it must still be "
        "decoding when /sleep answers, so above its record (the most tokens a choice had generated by then, "
        "over the walk's races); a race lost anyway is no verdict but runs again with twice as many, so a "
        "shorter request only costs a re-run, and a longer one costs every held request's decode after the wake",
        record="walk_race_tokens",
    ),
    Threshold(
        "hold_sample_s",
        0.1,
        "s",
        WAIT,
        "measure.assert_holds samples its predicate this often for the whole window "
        "(held_request_window_s decides how long the test waits); a request that finishes "
        "inside the window is caught at the next sample, so a failure is reported <= 0.1 s late",
    ),
    Threshold(
        "memory_settle_poll_s",
        0.25,
        "s",
        WAIT,
        "memory.settled_gpu_bytes: three NVML readings spanning at least one poll must agree "
        "within 2 MiB (or the expected value is reached at once). NVML's per-process bytes may "
        "trail an unmap; how long was never measured, so the span stays 0.25 s (shortening it "
        "would shorten the evidence the memory oracles read)",
    ),
    Threshold(
        "health_poll_s",
        0.05,
        "s",
        WAIT,
        "the launcher's GET /health during a start (ServerConfig.health_poll_s, set by the "
        "fixtures): vLLM 0.26.0 binds its port early (api_server.py setup_server) but listens "
        "only once the engine is up, so until then a look is a refused loopback connect (<1 ms); "
        "0.25 s before, which cost up to 0.25 s of every start (a warm start is ~6 s)",
    ),
]

TABLE = {t.name: t for t in _TABLE}
if len(TABLE) != len(_TABLE):
    raise ValueError("duplicate threshold names in thresholds._TABLE")


def threshold(name: str) -> Threshold:
    try:
        return TABLE[name]
    except KeyError:
        raise KeyError(f"no threshold named {name!r}; known: {sorted(TABLE)}") from None


def get(name: str, cell_id: str | None = None) -> float:
    """The bound for a cell: "runner-mode" key first, then mode, then runner, then the default."""
    t = threshold(name)
    return t.bound_at(t.cell_key(cell_id))


# A terminal pin's gauge where the call writes none (a failed reload): the gauge of the state before it,
# which the pinning tier reads off its model (walk/model.py flags), since one pin serves several states.
UNCHANGED = "unchanged"


@dataclasses.dataclass(frozen=True)
class KnownDivergence:
    """A behaviour of some vLLM releases that differs from what the API documents, pinned by a test.

    On a release in `versions` the pinning test asserts `observed`; on any other supported release it
    asserts `documented`. Either way a change fails the test, so the entry is revisited (a fix: drop
    the release from `versions`) rather than silently drifting. `observed` and `documented` are values
    the test compares with, keyed the same way (e.g. by sleep level).
    """

    name: str
    documented: object
    observed: object
    versions: tuple
    reason: str  # where each listed release does it: source lines, or the measurement
    # The front doors (tools/matrix.bzl FRONT_DOORS) whose code path runs the divergent code: all of them
    # for the engine's own, ("http",) for vLLM's API server's routers, which the in-process doors skip.
    doors: tuple = tuple(matrix.FRONT_DOORS)


class UnsupportedVersionError(ValueError):
    """The server runs a vLLM release KNOWN_DIVERGENCES was not checked against."""


@dataclasses.dataclass(frozen=True)
class Pin:
    """A divergence entry looked up for the running release: what the pinning test must see."""

    entry: KnownDivergence
    version: str
    door: str | None = None  # None: a caller that cannot name its door, allowed for an entry on every door

    @property
    def applies(self) -> bool:
        return self.version in self.entry.versions and (self.door is None or self.door in self.entry.doors)

    @property
    def expected(self):
        return self.entry.observed if self.applies else self.entry.documented

    def describe(self) -> str:
        e = self.entry
        if self.applies:
            return (
                f"per known divergence {e.name} of vLLM {self.version} ({e.reason}). If vLLM now "
                f"behaves as documented, drop {self.version} from the entry's versions in "
                "thresholds.KNOWN_DIVERGENCES"
            )
        if self.version in e.versions:  # the door does not run the divergent code
            return (
                f"as documented through the {self.door} door: known divergence {e.name} of vLLM {self.version} "
                f"is in code only the {'/'.join(e.doors)} door runs ({e.reason}); if this door diverges too, "
                "add it to the entry's doors"
            )
        return (
            f"as documented: vLLM {self.version} is not among the releases with known divergence "
            f"{e.name} ({', '.join(e.versions)}); if it diverges too, list it there with the reason"
        )


KNOWN_DIVERGENCES = {
    d.name: d
    for d in [
        KnownDivergence(
            name="gauge_awake_while_partially_asleep",
            documented={1: metrics.GAUGE_LEVEL1, 2: metrics.GAUGE_LEVEL2},  # by the level slept at
            observed={1: metrics.GAUGE_AWAKE, 2: metrics.GAUGE_AWAKE},
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "vllm/v1/engine/async_llm.py:943 (0.24.0, 0.25.0 and 0.26.0 alike) AsyncLLM.wake_up calls "
                "logger_manager.record_sleep_state(0, 0) after every wake_up, partial or not (and also "
                "when the executor ignored an unknown tag), so vllm:engine_sleep_state reads awake "
                "(1,0,0) while /is_sleeping stays true until every tag is resident (core.py wake_up/"
                "is_sleeping: 0.26.0 lines 898-918, 0.24.0/0.25.0 lines 799-819); seen on the H200 "
                "with 0.26.0"
            ),
        ),
        KnownDivergence(
            name="sleep_level_out_of_range_accepted",
            documented={"status": 400, "is_sleeping": False, "gauge": metrics.GAUGE_AWAKE, "weights_discarded": False},
            observed={"status": 200, "is_sleeping": True, "gauge": metrics.GAUGE_LEVEL0, "weights_discarded": True},
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "seen on the H200 with 0.26.0 (a probe): /sleep?level=3 "
                "answers 200; the router only does int(level) (serve/dev/sleep/api_router.py:26 in all three "
                "releases) and only "
                "level == 1 offloads the weights (0.24.0 v1/worker/gpu_worker.py:176, 0.25.0/0.26.0 "
                "device_allocator/sleep_mode_backend.py:125), so level 3 discards them like level 2 "
                "while the gauge reads (0,0,0) (v1/metrics/loggers.py record_sleep_state knows levels 1 "
                "and 2 only: 0.24.0/0.25.0 line 1231, 0.26.0 line 1268); a plain wake then serves "
                "garbage until reload_weights"
            ),
        ),
        KnownDivergence(
            name="reset_prefix_cache_result_unreported",
            documented=True,  # {"success": true} from an idle server
            observed=None,  # an empty 200: the client cannot tell whether the reset happened
            versions=("0.24.0", "0.25.0"),
            reason=(
                "0.24.0 and 0.25.0: serve/dev/cache/api_router.py:43 returns Response(status_code=200) "
                "and drops the engine's bool (\"we currently do not check if the prefix cache is "
                'successfully reset in the API server"); 0.26.0 returns {"success": bool} (line 44), '
                "false while running requests hold blocks. The router only: in 0.24.0 and 0.25.0 alike "
                "LLM.reset_prefix_cache returns LLMEngine's bool (entrypoints/llm.py:803, v1/engine/"
                "llm_engine.py:349) and AsyncLLM.reset_prefix_cache the engine core's (v1/engine/async_llm.py:924); "
                "the door cells on the H200 read true from an idle engine on both"
            ),
            doors=("http",),
        ),
        KnownDivergence(
            name="reload_without_path_loads_last_pushed",
            documented="checkpoint A",  # the checkpoint the server started on
            observed="checkpoint B",  # the checkpoint last pushed with weights_path
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "from the source of all three releases, and held on the H200 on all three: "
                "v1/worker/gpu_model_runner.py "
                "GPUModelRunner.reload_weights documents 'Use path of original model if neither is "
                "provided', but a call with weights_path sets self.model_config.model = weights_path "
                "(0.24.0 line 5426, 0.25.0 line 5477, 0.26.0 line 5518; MRV2's runner, v1/worker/gpu/"
                "model_runner.py, calls the same method in all three), so a later reload_weights() without "
                "a path (the plain level-2 recovery) loads the last pushed checkpoint, not the one the "
                "server started on"
            ),
        ),
        KnownDivergence(
            name="full_wake_remaps_resident_pool",
            # /wake_up without tags after a wake of one tag: its answer, and whether it leaves the server usable.
            # The answer, then what is observable after it (the walk's terminal probe, walk/driver.py).
            documented={"status": 200},
            observed={
                "status": 500,
                "is_sleeping": True,
                "gauge": metrics.GAUGE_AWAKE,
                "health": 200,
                "request": "held",
            },
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "found by the state walk on the H200 with 0.26.0 (all four "
                "runner x mode cells: sleep level 1, wake_up(tags=weights), wake_up() -> HTTP 500 'CUDA Error: "
                "invalid argument at "
                "cumem_allocator.cpp:169'): v1/executor/abstract.py Executor.wake_up passes tags=None on to the "
                "workers (0.24.0, 0.25.0, 0.26.0 line 351), and device_allocator/cumem.py CuMemAllocator.wake_up "
                "maps every allocation again when tags is None, the ones already resident included (0.24.0 "
                "lines 229-232, 0.25.0 and 0.26.0 lines 294-297; data.is_asleep is set but never read), so "
                "cuMemMap refuses the resident pool (cf. vllm-project/vllm#45565, closed unmerged). The "
                "executor keeps its sleeping tags, so the server stays asleep; with the KV cache resident and "
                "the weights asleep the weights are mapped before the refusal, and no later wake succeeds. "
                "After it: the gauge stays what the partial wake wrote (AsyncLLM.wake_up records the state only "
                "after the engine answered, async_llm.py:939-943), /health stays 200 (the utility call's error "
                "goes back to the caller, the engine runs on) and a request waits, the scheduler still paused"
            ),
        ),
        KnownDivergence(
            name="kv_first_wake_after_level2_restores_into_unmapped_weights",
            # After a level-2 sleep, /wake_up?tags=kv_cache while the weights stay asleep.
            documented={"status": 200},
            observed={
                "status": 500,
                "is_sleeping": True,
                "gauge": metrics.GAUGE_LEVEL2,
                "health": 200,
                "request": "held",
            },
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "v1/worker/gpu_worker.py Worker.wake_up (0.26.0 lines 227-236) restores the model buffers a "
                "level-2 sleep saved (gpu_worker.py:197) after resuming only the tags asked for, and those "
                "buffers live in the weights pool (allocated under the weights tag, gpu_worker.py:426), still "
                "unmapped: the copy fails, the executor keeps both tags asleep (abstract.py:343-354 updates "
                "them only after the workers answered) and the answer is a 500 (vllm-project/vllm#45619, the "
                "fix, was closed unmerged). Seen on the H200 with 0.26.0 (all four runner x mode cells) and "
                "0.24.0 (two cells), 0.25.0 from its source (the same lines): 500 'CUDA error: invalid argument', "
                "/is_sleeping true, the gauge still level 2's, /health 200, a request waits; a later weights wake and "
                "reload answer 200 and "
                "requests still wait"
            ),
        ),
        KnownDivergence(
            name="reload_while_weights_asleep",
            # collective_rpc reload_weights while the weights pool is asleep (unmapped).
            documented={"status": 400, "is_sleeping": True, "gauge": UNCHANGED, "health": 200},
            observed={"status": 500, "is_sleeping": True, "gauge": UNCHANGED, "health": 200, "request": "held"},
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "vLLM has no guard: v1/worker/gpu_model_runner.py GPUModelRunner.reload_weights (0.26.0 lines "
                "5480-5530) loads the checkpoint into the parameters, whose memory a sleep unmapped "
                "(device_allocator/cumem.py keeps the virtual addresses reserved, so the pointers stay "
                "valid and the write faults); the documented recipe wakes the weights first. Seen on the H200 "
                "with 0.26.0 (all four cells) and 0.24.0 (two cells), 0.25.0 from its source (the same lines), "
                "at level 1, at level 2 and with the KV cache woken: 500 'CUDA error: invalid argument', /is_sleeping "
                "true, the gauge unchanged, "
                "/health 200, a request waits; a full wake then answers 200 and the first request after it "
                "kills the engine ('EngineCore encountered an issue', /health 503): the server is done"
            ),
        ),
        KnownDivergence(
            name="host_copy_cached_after_wake",
            # host_memory.retention of the host bytes still held after the wake: the wake gives the
            # weights' host copy back (documented), or the process keeps a weight-sized block (observed).
            documented=host_memory.RELEASED,
            observed=host_memory.KEPT,
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "from the source of all three releases, and held on the H200 on all three: "
                "device_allocator/cumem.py CuMemAllocator.wake_up "
                "drops each cpu_backup_tensor (0.24.0 line 241, 0.25.0 and 0.26.0 line 307; allocated with "
                "pin_memory at 0.24.0 line 199, 0.25.0/0.26.0 line 261), but PyTorch's caching host allocator keeps "
                "freed pinned "
                "blocks for reuse, and none of the three releases empties it on a wake (their only "
                "torch._C._host_emptyCache call is in distributed/parallel_state.py "
                "cleanup_dist_env_and_memory, at shutdown; a later vLLM adds "
                "VLLM_SLEEP_MODE_RELEASE_HOST_MEMORY, vllm-project/vllm#55206, for #16663). So after its "
                "first level-1 sleep a server keeps a weight-sized block of host RAM, which the next sleep "
                "reuses"
            ),
        ),
        # The offline front door, vllm.LLM with its engine core in the caller's process
        # (VLLM_ENABLE_V1_MULTIPROCESSING=0, as colocated RL trainers run it): pinned on the engine tier
        # (tests/engine/test_llm_door.py) for each release.
        KnownDivergence(
            name="llm_door_wait_mode_refused",
            documented={"raised": None, "is_sleeping": True},
            observed={"raised": "ValueError", "is_sleeping": False},
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "LLM.sleep documents mode wait; the in-process engine's client refuses it before anything "
                "sleeps: InprocClient.sleep raises ValueError (v1/engine/core_client.py:326 in all three "
                "releases), as EngineCore.pause_scheduler would (core.py 0.24.0/0.25.0 line 741, 0.26.0 "
                "line 840): no busy loop steps the engine while the call waits (vllm-project/vllm#56754, "
                "open, would drain in-process); seen on the engine tier with each release"
            ),
            # The GPU's door whose engine runs in the caller's process (TRL colocate); the engine tier's
            # in-process vllm.LLM looks it up as that door.
            doors=("llm_colocate",),
        ),
        KnownDivergence(
            name="resume_while_kv_cache_asleep",
            # /resume while a tag is asleep (the recipe: after a level-1 sleep and a weights-only wake; the
            # walk's probes: at each level and set of tags asleep), then a request within the held window.
            # Documented: scheduling stays paused until every tag is resident, as #44483 made the wake do.
            # The answer, then what is observable after it (the walk's terminal probe, walk/driver.py): the
            # flags and /health before the request, the request's outcome last.
            documented={
                "status": 200,
                "is_paused": True,
                "is_sleeping": True,
                "gauge": UNCHANGED,
                "health": 200,
                "request": "held",
            },
            observed={
                "status": 200,
                "is_paused": False,
                "is_sleeping": True,
                "gauge": UNCHANGED,
                "health": 200,
                "request": "engine dead",
            },
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "EngineCore.resume_scheduler sets the scheduler unpaused with no look at the executor's "
                "sleeping tags (v1/engine/core.py 0.26.0 line 852; the same in 0.24.0 and 0.25.0), so the "
                "request that follows is scheduled and its forward reads the unmapped pool (the KV cache's, "
                "or the weights' where they still sleep): the CUDA error kills the engine core. Until then "
                "/resume answers 200, /is_sleeping stays true (core.py is_sleeping reads the executor too), "
                "the gauge is what the last /sleep or /wake_up wrote (AsyncLLM.resume_generation writes none) "
                "and /health 200; read from the source, to be held on the H200"
            ),
            # The routes and AsyncLLM methods that reach it; vllm.LLM has no resume_generation.
            doors=("http", "async_llm"),
        ),
        KnownDivergence(
            name="llm_door_abort_end_lost",
            documented={"ended": True, "finish_reason": "abort", "unfinished": 0},
            observed={"ended": False, "finish_reason": None, "unfinished": 1},
            versions=("0.24.0", "0.25.0", "0.26.0"),
            doors=("llm_colocate",),
            reason=(
                "EngineCore.pause_scheduler(mode='abort') ends every request in the scheduler "
                "(finish_requests(None, FINISHED_ABORTED): core.py 0.24.0/0.25.0 line 744, 0.26.0 line 843) "
                "and sends nothing; EngineCoreProc's override sends the abort outputs (0.24.0/0.25.0 line "
                "1665, 0.26.0 line 1764), the in-process engine has no queue to send them on, so LLMEngine's "
                "output processor keeps the request unfinished and LLM.wait_for_completion's loop `while "
                "has_unfinished_requests(): step()` (entrypoints/offline_utils.py:594 in all three) never ends "
                "after LLM.enqueue, LLM.sleep(), LLM.wake_up(); seen on the engine tier with each release"
            ),
        ),
        # The async front door, AsyncLLM with its engine core in a process of its own (as NeMo-RL and verl
        # hold it): pinned on the engine tier (tests/engine/test_async_llm_door.py) for each release.
        KnownDivergence(
            name="async_door_pending_call_never_fails",
            documented={"answered": True, "raised": "EngineDeadError", "later_call": "EngineDeadError"},
            observed={"answered": False, "raised": None, "later_call": "EngineDeadError"},
            versions=("0.24.0", "0.25.0", "0.26.0"),
            reason=(
                "an AsyncLLM call awaiting the engine's answer when the engine process dies (here await "
                "sleep(1) queued behind a forward pass that fails, as #45520's did) never returns: "
                "AsyncMPClient._call_utility_async parks a future in utility_results "
                "(v1/engine/core_client.py:1109 in 0.24.0, 0.25.0 and 0.26.0 alike), and when the engine's "
                "death sentinel arrives process_outputs_socket hands EngineDeadError to the request outputs' "
                "queue only (validate_alive line 1009, except line 1045), so requests and later calls raise it "
                "(ensure_alive, line 1083) while the pending call waits forever; vllm-project/vllm#56416 "
                "(open) fails the pending calls; seen on the engine tier with each release"
            ),
        ),
    ]
}


def divergence(name: str, version: str, door: str | None = None) -> Pin:
    """The entry `name` looked up for the vLLM release `version` (the server's GET /version) as seen
    through the front door `door`; door may be left out only for an entry that diverges on every door."""
    try:
        entry = KNOWN_DIVERGENCES[name]
    except KeyError:
        raise KeyError(f"no known divergence {name!r}; known: {sorted(KNOWN_DIVERGENCES)}") from None
    if door is None and set(entry.doors) != set(matrix.FRONT_DOORS):
        raise ValueError(f"known divergence {name} holds on the {'/'.join(entry.doors)} door only: pass the door")
    if door is not None and door not in matrix.FRONT_DOORS:
        raise ValueError(f"door {door!r} is none of the front doors {matrix.FRONT_DOORS}")
    public = releases.public(version)
    if public not in releases.SUPPORTED:
        raise UnsupportedVersionError(
            f"the server runs vLLM {version!r}, which the known divergences were not checked against "
            f"(supported: {', '.join(releases.SUPPORTED)}). Read its source for each entry of "
            "thresholds.KNOWN_DIVERGENCES, list the release where it diverges, then add it to "
            "releases.SUPPORTED."
        )
    return Pin(entry, public, door)
