"""Every numeric bound of the suite, in one table.

Triage policy (the only place it is written; entries of the "wait" layer are not bounds, see below):
  * layer "contract": the bound is part of what vLLM's sleep API promises (flags, output identity,
    requests end, error statuses). A failure is a bug: file it with the test id and the server log.
  * layer "mechanism": the bound depends on how the mechanism is implemented and on the hardware
    (bytes freed, latency, leak per cycle). A failure is first compared against a baseline run of the
    same cell (same runner x mode, same GPU, previous vLLM build) before filing; only a regression
    against that baseline is a bug.

`source` says where a number came from. Bound policy (README "Bounds"): a mechanism bound sits near what a
healthy server shows, never at the size of a defect written for it: `noise` records the healthy extreme
measured on the H200 (the largest value of an upper bound, the smallest of a lower bound, over every cell
of >= 3 runs) and the bound is at most NOISE_FACTOR_MAX times away from it; where the healthy value is 0,
the bound is one measurement granule (`granule`: NVML maps in 2 MiB, /proc counts 4 KiB pages) with a
strict `<`. Contract bounds are what the API promises (a hang detector, an exact state) and say so in
`source`. `per_cell` overrides the value for one runner, one mode or one runner-mode pair; add such keys
only from measurement (e.g. graph mode keeps its CUDA-graph pool resident, #45648).
"""

import dataclasses

from tests.sleep_wake.lib import host_memory, metrics, releases
from tests.sleep_wake.lib.cells import EXECUTION_MODES, RUNNERS

CONTRACT = "contract"
MECHANISM = "mechanism"
WAIT = "wait"
LAYERS = (CONTRACT, MECHANISM, WAIT)
POLICY = {
    CONTRACT: "contract layer: a failure is a bug in vLLM's sleep API (file it with the server log)",
    MECHANISM: ("mechanism layer: compare against a baseline run of the same cell before filing; "
                "only a regression against that baseline is a bug"),
    WAIT: ("wait layer: how often a test looks while it waits; never a bound, so it fails nothing: a "
           "longer poll only costs time, a shorter one only costs requests to the server"),
}
NOISE_FACTOR_MAX = 4.0
MEASURED = "H200 x2, vLLM 0.26.0, 2026-11-29, matrix runs 1-2 (16 cells per GPU, 44 cells each)"
MEASURED_RL = ("H200 x2, 2026-11-30, 5 green matrix runs of 60 cells (16 per GPU): vLLM 0.26.0 x3, 0.25.0, "
               "0.24.0, all four runner x mode cells")
MEASURED_1201 = "H200 x1, vLLM 0.26.0, 2026-12-01, all 60 cells"
# This session's two runs: the discovery run (physical_memory, memory_leak_cycle, host_memory, immediacy,
# latency and state_walk in all four runner x mode cells) and the full matrix, 16 slots on one GPU.
MEASURED_TODAY = "H200 x1, vLLM 0.26.0, 2026-12-01 (two runs: 5 classes x 4 cells, then all 64 cells)"
MEASURED_3 = f"{MEASURED} and {MEASURED_TODAY}"
# The latency samples since they are each call's own time inside its memory phase (client.last_call_s),
# beside 23 neighbours, instead of inside an exclusive window held for the whole test.
MEASURED_CALLS = "H200 x1, vLLM 0.26.0, 2026-12-01, main job runs B-E of the sixth session (24 cells per GPU)"
# The same since neighbours' sleeps hold their FREE phase only inside their worker's sleep: more of the
# GPU's time is ALLOCATE, shared by a latency cell's wake with neighbours' start steps and wakes.
MEASURED_BRACKETED = ("H200 x1, 2026-12-01, main job runs B-D of the seventh session (vLLM 0.26.0) and its "
                      "run F (vLLM 0.24.0), 24 cells per GPU")
# The tenth session's four runs: B and C (the main job), D (the same at 28 cells per GPU) and E (the whole
# suite in one `bazel test`, as `bazel test //tests/sleep_wake/...` schedules it: the walk's 24 shards
# start beside the other classes). Each latency sample is split by whether a GPU neighbour was in a
# start step when its call began or ended, read off the GPU's memory-phase trace (tools/bench/
# phase_trace.py's file), whose wake phases reproduce the cells' recorded medians to the millisecond.
MEASURED_TENTH = ("H200 x1, vLLM 0.26.0, 2026-12-01, tenth session: runs B-E (two waves at 24 and 28 cells per "
                  "GPU, and the whole suite in one `bazel test` at 24), split by a neighbour's start step")
# The eleventh session's runs with the servers' CPU-use defaults (one torch thread, CUDA's blocking wait):
# C and D (the main job), E (the whole suite in one `bazel test`) and F (one torch thread, CUDA's default
# wait), 24 cells per GPU.
MEASURED_ELEVENTH = ("H200 x1, vLLM 0.26.0, 2026-12-01, eleventh session: runs C-F (the main job, the whole suite "
                     "in one `bazel test`), 24 cells per GPU, one torch thread per server process")
# The twelfth session's runs B-F: the main job with the walk planned as one covering tour (E with CUDA's
# default wait), 24 cells per GPU.
MEASURED_TWELFTH = ("H200 x1, vLLM 0.26.0, 2026-12-02, twelfth session: runs B-F (the main job, the walk as one "
                    "covering tour), 24 cells per GPU")
# The thirteenth session's runs B-G: the main job with each zygote's imported objects frozen (E and F
# without), 24 cells per GPU; B was the machine's first whole run, after four weight-sync cells.
MEASURED_THIRTEENTH = ("H200 x1, vLLM 0.26.0, 2026-12-02, thirteenth session: runs B-G (the main job, faster "
                       "starts: the zygote's objects frozen, except in E and F), 24 cells per GPU")
# The fourteenth session's runs B, C, D and G (no E or F): the main job with Triton's key in the zygote, the gauge parsed alone
# and no autoloaded pytest plugins; B on a fresh machine, C, D and G consecutive, 24 cells per GPU.
MEASURED_FOURTEENTH = ("H200 x1, vLLM 0.26.0, 2026-12-02, fourteenth session: runs B, C, D and G (the main job), "
                       "24 cells per GPU")
GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
NVML_GRANULE = 2 * MiB  # cuMem maps and unmaps device memory in 2 MiB granules
PAGE = 4 * KiB  # VmRSS counts whole pages


@dataclasses.dataclass(frozen=True)
class Noise:
    """What healthy servers showed: the largest value measured for an upper bound (the smallest for a
    lower bound), over `runs` matrix runs of `cells`. per_cell: the same for a bound's per_cell keys."""
    value: float
    runs: int
    cells: str
    source: str
    per_cell: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Threshold:
    name: str
    value: float
    unit: str
    layer: str
    source: str
    per_cell: dict = dataclasses.field(default_factory=dict)
    noise: Noise | None = None  # required for the mechanism layer
    granule: float | None = None  # the measurement's resolution, where the noise is 0
    strict: bool = False  # measured < value (a bound of one granule over a noise of 0), not <=

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

    def noise_at(self, key: str | None) -> float | None:
        """The healthy extreme behind the bound of a per_cell key (None: the default value)."""
        if self.noise is None:
            return None
        return self.noise.per_cell.get(key, self.noise.value) if key else self.noise.value

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
    Threshold("level1_bytes_fraction_max", 0.35, "fraction of awake bytes", MECHANISM,
              f"{MEASURED_3}: 0.216-0.261 (graph highest)",
              noise=Noise(0.2614, 3, "every cell", MEASURED_3)),
    Threshold("level2_bytes_fraction_max", 0.35, "fraction of awake bytes", MECHANISM,
              f"{MEASURED_3}: 0.232-0.262; level 2 holds what level 1 does once weights are not backed up",
              noise=Noise(0.262, 3, "every cell", MEASURED_3)),
    Threshold("weights_wake_bytes_fraction_max", 0.5, "fraction of awake bytes", MECHANISM,
              f"{MEASURED_3}: 0.379-0.398: weights back, 2 GiB KV cache still released",
              noise=Noise(0.398, 3, "every cell", MEASURED_3)),
    Threshold("level1_residue_bytes_max", 1 * GiB, "bytes", MECHANISM,
              f"{MEASURED_3}: eager 840957952-866123776 bytes, graph 941621248-952107008 (the resident "
              "CUDA-graph pool, #45648)",
              per_cell={"graph": 1.15 * GiB},
              noise=Noise(866123776, 3, "every cell", MEASURED_3, per_cell={"graph": 952107008})),
    Threshold("wake_restore_bytes_max", 256 * MiB, "bytes (woken - awake: growth)", MECHANISM,
              f"{MEASURED_RL}: growth at most 94 MiB (98566144 bytes, settled per process), median -2 MiB; "
              "a full wake remaps the same pools, growth beyond is a leak",
              noise=Noise(98566144, 5, "60 cells", MEASURED_RL)),
    Threshold("wake_shortfall_bytes_max", 128 * MiB, "bytes (awake - woken: shortfall)", MECHANISM,
              f"{MEASURED} and {MEASURED_TODAY}: graph cells come back to the same bytes or 98566144 bytes "
              "(94 MiB) short after a staged wake (the sampler's blocks in torch's caching allocator, which a "
              "sleep empties; the same 94 MiB shows as growth when the awake reading had none); eager cells "
              "371195904 bytes (354 MiB) lower on MRV1 and MRV2 alike, the activation blocks torch's caching "
              "allocator held before the sleep emptied it",
              per_cell={"eager": 400 * MiB},
              noise=Noise(98566144, 3, "every cell", f"{MEASURED}; {MEASURED_TODAY}",
                          per_cell={"eager": 371195904})),
    Threshold("weights_wake_bytes_rel_error_max", 0.15, "fraction of checkpoint tensor bytes", MECHANISM,
              f"{MEASURED_3}: 0.030-0.072 of the 498641000 checkpoint tensor bytes",
              noise=Noise(0.0725, 3, "every cell", MEASURED_3)),
    Threshold("sleep_freed_kv_fraction_min", 0.95, "fraction of SLEEPWAKE_KV_CACHE_BYTES", MECHANISM,
              f"{MEASURED_3}: 1.048-1.42 x the KV cache freed (weights and allocator cache go too)",
              noise=Noise(1.048, 3, "every cell", MEASURED_3)),
    Threshold("memory_settle_s_max", 10.0, "s", CONTRACT,
              "a contract, not a measurement: a sleep or wake is over when its call answers, so NVML's "
              "per-process bytes must stop moving (three readings within one granule, at least one "
              "memory_settle_poll_s apart) well inside this; a release still trickling after 10 s is a "
              "defect whatever its size. Healthy readings settle at the first look or after one span "
              "(measured per reading: memory_settle_s in measurements.jsonl)"),
    # The leak pair, in the order the leak-cycle test checks them: a steady leak shows in the median
    # step (one jump does not move it), a jump shows in the spread. Healthy servers move neither by a
    # single granule, so each bound is one granule, strict: any leak NVML can see fails.
    Threshold("leak_bytes_per_cycle_max", NVML_GRANULE, "bytes (median of the cycle-to-cycle steps)",
              MECHANISM, f"{MEASURED}, {MEASURED_RL} and {MEASURED_1201}: 0 bytes of growth per cycle in every "
              "cell", noise=Noise(0, 8, "every cell", f"{MEASURED}; {MEASURED_RL}; {MEASURED_1201}"),
              granule=NVML_GRANULE, strict=True),
    Threshold("cycle_bytes_flat_max", NVML_GRANULE, "bytes (max - min over cycles 2..10)", MECHANISM,
              f"{MEASURED}, {MEASURED_RL} and {MEASURED_1201}: spread and growth 0 bytes over 10 cycles in "
              "every cell", noise=Noise(0, 8, "every cell", f"{MEASURED}; {MEASURED_RL}; {MEASURED_1201}"),
              granule=NVML_GRANULE, strict=True),
    # --- immediacy: device-wide NVML bytes, read once, right after the call returns --------------
    Threshold("sleep_freed_immediate_kv_fraction_min", 0.95, "fraction of SLEEPWAKE_KV_CACHE_BYTES",
              MECHANISM,
              f"{MEASURED_RL}: 1.241-1.425 x the KV cache freed at the first reading (n=40); read without any "
              "wait under the GPU's exclusive memory phase, so a release that lands after /sleep answers "
              "fails", noise=Noise(1.241, 5, "60 cells", MEASURED_RL)),
    Threshold("wake_shortfall_immediate_bytes_max", 128 * MiB, "bytes (used before the sleep - first "
              "reading after the wake)", MECHANISM,
              f"{MEASURED_RL}: -2 MiB to 94 MiB in every cell (n=40; eager no lower than graph at the first "
              "device-wide reading)", noise=Noise(98566144, 5, "60 cells", MEASURED_RL)),
    # --- host memory: VmRSS of the server's process tree (lib/host_memory.py) --------------------
    Threshold("host_copy_weights_ratio_min", 1.2, "host bytes added by the first level-1 sleep / checkpoint "
              "tensor bytes", MECHANISM,
              f"{MEASURED_RL}: 1.440-1.519 (MRV1 1.44-1.45, MRV2 1.52; n=20): the weights pool copied to "
              "pinned blocks rounded up by PyTorch's caching host allocator. Less is a weight not backed up "
              "(garbage after wake)", noise=Noise(1.44, 5, "60 cells", MEASURED_RL)),
    Threshold("host_copy_weights_ratio_max", 1.8, "host bytes added by the first level-1 sleep / checkpoint "
              "tensor bytes", MECHANISM,
              f"{MEASURED_RL}: at most 1.519 (n=20). More is a second copy",
              noise=Noise(1.519, 5, "60 cells", MEASURED_RL)),
    Threshold("level2_host_bytes_max", 11 * MiB, "bytes (host bytes asleep at level 2 - awake)", MECHANISM,
              f"{MEASURED_RL}: 1.8-3.0 MB (n=20): level 2 copies no weights (device_allocator/"
              "sleep_mode_backend.py CuMemBackend.suspend: offload_tags=() unless level 1), gpu_worker.py "
              "Worker.sleep saves only the model's buffers to CPU; the rest is API-server heap noise",
              noise=Noise(3.0e6, 5, "60 cells", MEASURED_RL)),
    Threshold("host_leak_bytes_per_cycle_max", 32 * KiB,
              "bytes (median of the cycle-to-cycle steps; RssAnon + RssShmem)", MECHANISM,
              f"{MEASURED_RL} and {MEASURED_1201}: median steps 0-8 KiB: every level-1 sleep after the first "
              "reuses the pinned blocks PyTorch's caching host allocator kept (known divergence "
              "host_copy_cached_after_wake)",
              noise=Noise(8 * KiB, 6, "60 cells", f"{MEASURED_RL}; {MEASURED_1201}")),
    Threshold("host_cycle_flat_max", 352 * KiB, "bytes (max - min over cycles 2..10; RssAnon + RssShmem)",
              MECHANISM,
              f"{MEASURED_RL}: 40-88 KiB over cycles 2..10 (n=40); as host_leak_bytes_per_cycle_max, for a "
              "one-off jump (a second copy pinned once). Over allocated pages, not VmRSS: on the H200 "
              "(2026-12-01, MRV2-eager, a healthy server) the engine core's RssFile fell 1.6 MiB between "
              "cycles 6 and 7 (the page cache reclaiming library pages) while RssAnon grew 49 KiB over "
              "cycles 2..10 and RssShmem not at all", noise=Noise(88 * KiB, 5, "60 cells", MEASURED_RL)),
    # --- output --------------------------------------------------------------------------------
    Threshold("logprob_drift_max", 1e-2, "nats (absolute, per token)", CONTRACT,
              "a contract: level-1 sleep copies weights back bit-exact and a push loads the same file "
              "(measured drift 0 after level 1, at most 1.4e-4 after weight pushes, "
              f"{MEASURED_RL}); 1e-2 tolerates kernel nondeterminism only"),
    # --- requests end --------------------------------------------------------------------------
    Threshold("request_completion_s_max", 60.0, "s", CONTRACT,
              "a contract, not a measurement: a hang detector. A 16-token greedy request on the synthetic "
              "model ends in well under 1 s on the H200 (test.log timings); one that does not end in 60 s "
              "hangs (#45326). Also each HTTP call's timeout"),
    Threshold("race_timeout_s", 120.0, "s", CONTRACT,
              "a contract, not a measurement: a hang detector for the streaming burst of a generate/sleep "
              "race (768 tokens x 8 requests end in seconds); #45520 killed the engine behind a 200 and "
              "#45326 left requests open forever"),
    Threshold("abort_s_max", 10.0, "s", CONTRACT,
              "a contract: sleep?mode=abort ends the requests in flight before it returns (the abort "
              "outputs are sent first, v1/engine/core.py pause_scheduler), so the stream ends within the "
              "time its last chunk takes to arrive; 10 s separates that from a drain of 768 tokens x 4 "
              f"choices or a hang (healthy at most 0.043 s over 240 readings from /sleep to the stream's end, "
              f"{MEASURED_BRACKETED}; 0.44 s over 78 readings to the sleep's answer plus the wait after it, "
              f"{MEASURED_TODAY})"),
    Threshold("held_request_window_s", 2.0, "s", CONTRACT,
              "observation window: a request held by a partial wake must stay pending this long "
              "(#44483); 2 s is ~100x the time the request takes when scheduled"),
    # --- latency (median of repeats) -----------------------------------------------------------
    Threshold("sleep_s_max", 0.4, "s", MECHANISM,
              f"{MEASURED_BRACKETED}: medians 0.033-0.201 s, each sleep timed inside its FREE phase beside "
              f"neighbours; 0.056-0.151 s ({MEASURED_CALLS}); 0.018-0.107 s in an exclusive window held for "
              f"the whole test ({MEASURED_3})"
              f"; 0.107-0.202 s ({MEASURED_ELEVENTH}); up to 0.135-0.254 s a run ({MEASURED_THIRTEENTH}, 0.254 s in B)",
              noise=Noise(0.254, 6, "every cell", MEASURED_THIRTEENTH)),
    # 0.25 s until the seventh session's runs (healthy extreme 0.214 s). Since the tenth, only samples
    # taken with no neighbour in a start step: one `bazel test` of the whole suite (run E) put the MRV2
    # cells' wakes beside start steps all the time, at medians of 0.352-0.414 s, and failed 0.30 s.
    Threshold("wake_s_max", 0.30, "s", MECHANISM,
              f"{MEASURED_TENTH}: medians 0.044-0.179 s of the full wakes judged with no neighbour in a "
              f"start step (oracle.bounded_median), each timed inside its ALLOCATE phase; all samples together, before the split: "
              f"0.026-0.214 s ({MEASURED_BRACKETED}); 0.020-0.069 s in an exclusive window ({MEASURED_3}); "
              f"graph mode no slower than eager on this model; 0.083-0.162 s ({MEASURED_ELEVENTH})",
              noise=Noise(0.179, 4, "every cell", MEASURED_TENTH)),
    Threshold("staged_wake_s_max", 0.30, "s", MECHANISM,
              f"{MEASURED_TENTH}: medians 0.040-0.099 s for wake weights + wake kv_cache judged with no "
              f"neighbour in a start step; all together: 0.036-0.226 s ({MEASURED_BRACKETED}); 0.025-0.062 s in "
              f"an exclusive window ({MEASURED_3}); 0.107-0.146 s ({MEASURED_ELEVENTH}); 0.042-0.199 s "
              f"({MEASURED_TWELFTH}); 0.068-0.212 s ({MEASURED_FOURTEENTH}, 0.212 s in C)",
              noise=Noise(0.212, 4, "every cell", MEASURED_FOURTEENTH)),
    # The same medians when most of a test's samples ran beside a neighbour's start step (a weight load,
    # a profile run, a graph capture share the GPU's copy engines and driver with the wake).
    Threshold("wake_beside_start_s_max", 0.60, "s", MECHANISM,
              f"{MEASURED_TENTH}: medians 0.137-0.377 s of full wakes beside a neighbour's start step (0.352 "
              f"and 0.377 s in run E's MRV2 cells, every sample beside one); 0.166-0.199 s ({MEASURED_ELEVENTH}); "
              f"up to 0.162-0.479 s a run ({MEASURED_THIRTEENTH}, 0.479 s in C: with faster starts more wakes "
              f"land beside one)",
              noise=Noise(0.479, 6, "every cell", MEASURED_THIRTEENTH)),
    Threshold("staged_wake_beside_start_s_max", 0.60, "s", MECHANISM,
              f"{MEASURED_TENTH}: medians 0.134-0.414 s for wake weights + wake kv_cache beside a "
              f"neighbour's start step (0.368 and 0.414 s in run E's MRV2 cells); 0.171-0.182 s ({MEASURED_ELEVENTH})",
              noise=Noise(0.414, 4, "every cell", MEASURED_TENTH)),
    Threshold("cycle_s_max", 1.5, "s", MECHANISM,
              f"{MEASURED_BRACKETED}: medians 0.096-0.512 s for sleep + wake + a 16-token request, the three "
              f"calls' own times; 0.10-0.485 s ({MEASURED_CALLS}); 0.078-0.47 s in an exclusive window "
              f"({MEASURED_3}); 0.283-0.624 s ({MEASURED_ELEVENTH}, 0.624 s in run E); up to 0.364-0.670 s a "
              f"run ({MEASURED_THIRTEENTH}, 0.670 s in B)",
              noise=Noise(0.670, 6, "every cell", MEASURED_THIRTEENTH)),
    # --- waiting: how often a test looks (observation windows, which oracles rely on, are above) ---
    Threshold("poll_s", 0.05, "s", WAIT,
              "measure.wait_until: each look is one or two loopback HTTP calls (/load, /metrics, "
              "/is_sleeping) or an NVML read, a few ms each, so a wait ends within 0.05 s of its "
              "condition at a few percent of one core; the timeouts, not the poll, are the bounds"),
    Threshold("hold_sample_s", 0.1, "s", WAIT,
              "measure.assert_holds samples its predicate this often for the whole window "
              "(held_request_window_s decides how long the test waits); a request that finishes "
              "inside the window is caught at the next sample, so a failure is reported <= 0.1 s late"),
    Threshold("memory_settle_poll_s", 0.25, "s", WAIT,
              "memory.settled_gpu_bytes: three NVML readings spanning at least one poll must agree "
              "within 2 MiB (or the expected value is reached at once). NVML's per-process bytes may "
              "trail an unmap; how long was never measured, so the span stays 0.25 s (shortening it "
              "would shorten the evidence the memory oracles read)"),
    Threshold("health_poll_s", 0.05, "s", WAIT,
              "the launcher's GET /health during a start (ServerConfig.health_poll_s, set by the "
              "fixtures): vLLM 0.26.0 binds its port early (api_server.py setup_server) but listens "
              "only once the engine is up, so until then a look is a refused loopback connect (<1 ms); "
              "0.25 s before, which cost up to 0.25 s of every start (a warm start is ~6 s)"),
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


class UnsupportedVersionError(ValueError):
    """The server runs a vLLM release KNOWN_DIVERGENCES was not checked against."""


@dataclasses.dataclass(frozen=True)
class Pin:
    """A divergence entry looked up for the running release: what the pinning test must see."""
    entry: KnownDivergence
    version: str

    @property
    def applies(self) -> bool:
        return self.version in self.entry.versions

    @property
    def expected(self):
        return self.entry.observed if self.applies else self.entry.documented

    def describe(self) -> str:
        e = self.entry
        if self.applies:
            return (f"per known divergence {e.name} of vLLM {self.version} ({e.reason}). If vLLM now "
                    f"behaves as documented, drop {self.version} from the entry's versions in "
                    "thresholds.KNOWN_DIVERGENCES")
        return (f"as documented: vLLM {self.version} is not among the releases with known divergence "
                f"{e.name} ({', '.join(e.versions)}); if it diverges too, list it there with the reason")


KNOWN_DIVERGENCES = {d.name: d for d in [
    KnownDivergence(
        name="gauge_awake_while_partially_asleep",
        documented={1: metrics.GAUGE_LEVEL1, 2: metrics.GAUGE_LEVEL2},  # by the level slept at
        observed={1: metrics.GAUGE_AWAKE, 2: metrics.GAUGE_AWAKE},
        versions=("0.24.0", "0.25.0", "0.26.0"),
        reason=("vllm/v1/engine/async_llm.py:943 (0.24.0, 0.25.0 and 0.26.0 alike) AsyncLLM.wake_up calls "
                "logger_manager.record_sleep_state(0, 0) after every wake_up, partial or not (and also "
                "when the executor ignored an unknown tag), so vllm:engine_sleep_state reads awake "
                "(1,0,0) while /is_sleeping stays true until every tag is resident (core.py wake_up/"
                "is_sleeping: 0.26.0 lines 898-918, 0.24.0/0.25.0 lines 799-819); seen on the H200 "
                "with 0.26.0"),
    ),
    KnownDivergence(
        name="sleep_level_out_of_range_accepted",
        documented={"status": 400, "is_sleeping": False, "gauge": metrics.GAUGE_AWAKE,
                    "weights_discarded": False},
        observed={"status": 200, "is_sleeping": True, "gauge": metrics.GAUGE_LEVEL0,
                  "weights_discarded": True},
        versions=("0.24.0", "0.25.0", "0.26.0"),
        reason=("seen on the H200 with 0.26.0 (probe, 2026-11-29): /sleep?level=3 answers 200; the router "
                "only does int(level) (serve/dev/sleep/api_router.py:26 in all three releases) and only "
                "level == 1 offloads the weights (0.24.0 v1/worker/gpu_worker.py:176, 0.25.0/0.26.0 "
                "device_allocator/sleep_mode_backend.py:125), so level 3 discards them like level 2 "
                "while the gauge reads (0,0,0) (v1/metrics/loggers.py record_sleep_state knows levels 1 "
                "and 2 only: 0.24.0/0.25.0 line 1231, 0.26.0 line 1268); a plain wake then serves "
                "garbage until reload_weights"),
    ),
    KnownDivergence(
        name="reset_prefix_cache_result_unreported",
        documented=True,  # {"success": true} from an idle server
        observed=None,  # an empty 200: the client cannot tell whether the reset happened
        versions=("0.24.0", "0.25.0"),
        reason=("0.24.0 and 0.25.0: serve/dev/cache/api_router.py:43 returns Response(status_code=200) "
                "and drops the engine's bool (\"we currently do not check if the prefix cache is "
                "successfully reset in the API server\"); 0.26.0 returns {\"success\": bool} (line 44), "
                "false while running requests hold blocks"),
    ),
    KnownDivergence(
        name="reload_without_path_loads_last_pushed",
        documented="checkpoint A",  # the checkpoint the server started on
        observed="checkpoint B",  # the checkpoint last pushed with weights_path
        versions=("0.24.0", "0.25.0", "0.26.0"),
        reason=("from the source, not yet seen on the H200: v1/worker/gpu_model_runner.py "
                "GPUModelRunner.reload_weights documents 'Use path of original model if neither is "
                "provided', but a call with weights_path sets self.model_config.model = weights_path "
                "(0.24.0 line 5426, 0.25.0 line 5477, 0.26.0 line 5518; MRV2's runner, v1/worker/gpu/"
                "model_runner.py, calls the same method in all three), so a later reload_weights() without "
                "a path (the plain level-2 recovery) loads the last pushed checkpoint, not the one the "
                "server started on"),
    ),
    KnownDivergence(
        name="full_wake_remaps_resident_pool",
        # /wake_up without tags after a wake of one tag: its answer, and whether it leaves the server usable.
        documented={"status": 200},
        observed={"status": 500},
        versions=("0.24.0", "0.25.0", "0.26.0"),
        reason=("found by the state walk on the H200 with 0.26.0 (2026-12-01, all four runner x mode cells: "
                "sleep level 1, wake_up(tags=weights), wake_up() -> HTTP 500 'CUDA Error: invalid argument at "
                "cumem_allocator.cpp:169'): v1/executor/abstract.py Executor.wake_up passes tags=None on to the "
                "workers (0.24.0, 0.25.0, 0.26.0 line 351), and device_allocator/cumem.py CuMemAllocator.wake_up "
                "maps every allocation again when tags is None, the ones already resident included (0.24.0 "
                "lines 229-232, 0.25.0 and 0.26.0 lines 294-297; data.is_asleep is set but never read), so "
                "cuMemMap refuses the resident pool (cf. vllm-project/vllm#45565, closed unmerged). The "
                "executor keeps its sleeping tags, so the server stays asleep; with the KV cache resident and "
                "the weights asleep the weights are mapped before the refusal, and no later wake succeeds"),
    ),
    KnownDivergence(
        name="host_copy_cached_after_wake",
        # host_memory.retention of the host bytes still held after the wake: the wake gives the
        # weights' host copy back (documented), or the process keeps a weight-sized block (observed).
        documented=host_memory.RELEASED,
        observed=host_memory.KEPT,
        versions=("0.24.0", "0.25.0", "0.26.0"),
        reason=("from the source, not yet seen on the H200: device_allocator/cumem.py CuMemAllocator.wake_up "
                "drops each cpu_backup_tensor (0.24.0 line 241, 0.25.0 and 0.26.0 line 307; allocated with "
                "pin_memory at 0.24.0 line 199, 0.25.0/0.26.0 line 261), but PyTorch's caching host allocator keeps freed pinned "
                "blocks for reuse, and none of the three releases empties it on a wake (their only "
                "torch._C._host_emptyCache call is in distributed/parallel_state.py "
                "cleanup_dist_env_and_memory, at shutdown; a later vLLM adds "
                "VLLM_SLEEP_MODE_RELEASE_HOST_MEMORY, vllm-project/vllm#55206, for #16663). So after its "
                "first level-1 sleep a server keeps a weight-sized block of host RAM, which the next sleep "
                "reuses"),
    ),
]}


def divergence(name: str, version: str) -> Pin:
    """The entry `name` looked up for the vLLM release `version` (the server's GET /version)."""
    try:
        entry = KNOWN_DIVERGENCES[name]
    except KeyError:
        raise KeyError(f"no known divergence {name!r}; known: {sorted(KNOWN_DIVERGENCES)}") from None
    public = releases.public(version)
    if public not in releases.SUPPORTED:
        raise UnsupportedVersionError(
            f"the server runs vLLM {version!r}, which the known divergences were not checked against "
            f"(supported: {', '.join(releases.SUPPORTED)}). Read its source for each entry of "
            "thresholds.KNOWN_DIVERGENCES, list the release where it diverges, then add it to "
            "releases.SUPPORTED.")
    return Pin(entry, public)
