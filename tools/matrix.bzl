"""The matrix, in one place: read by the Starlark macros (load("//tools:matrix.bzl", ...)) and by Python
(tools/matrix.py parses these literals), so that adding a runner, a mode, a class, a fake cell or a release
is one edit here plus what docs/extending.md lists; tools/unit/matrix_test.py fails when a place is missed.

Literals only (dicts, lists, strings, numbers): Python reads them with ast.literal_eval.
"""

# Model runner -> the value of VLLM_USE_V2_MODEL_RUNNER that selects it. The launcher sets it for every
# server, never inherited (left unset, vLLM picks V2 for dense models and an MRV1 cell would test MRV2),
# and checks the log: MRV2 writes LOG_MARKER_V2, MRV1 must not (tools/launcher/server.py).
RUNNERS = {
    "mrv1": "0",
    "mrv2": "1",
}

LOG_MARKER_V2 = "Using V2 Model Runner"

# Execution mode -> what the launcher passes vLLM (tools/launcher/config.py build_command).
EXECUTION_MODES = {
    "eager": ["--enforce-eager"],
    "graph": ["--max-cudagraph-capture-size", "32"],
}

# Front doors: how a cell drives vLLM. "http" is vLLM's OpenAI server, on every class x runner x mode;
# an in-process door (vllm.LLM, AsyncLLM, the objects TRL, NeMo-RL and verl hold) runs in the door host
# (tools/launcher/door_host.py), which answers the same HTTP API by calling the door's own methods, so the
# classes drive it unchanged. Door cells: <class>_<door>_<runner>_<mode>, tagged with the door.
FRONT_DOORS = [
    "http",
    "async_llm",
    "llm",
    "llm_colocate",
]

# In-process door -> the runner x mode cells it runs on. One cell each: the configuration vLLM 0.26.0 picks
# for a dense model when an RL framework builds the engine with its defaults (model runner V2, CUDA graphs);
# the runner and mode axes are the HTTP cells' to cover.
DOOR_CELLS = {
    "async_llm": ["mrv2_graph"],
    "llm": ["mrv2_graph"],
    "llm_colocate": ["mrv2_graph"],
}

# In-process door -> {class: why the class cannot run through it}. Every other class runs on the door's
# cells. A reason names what the class needs that the door lacks (tools/launcher/door_host.py CANNOT).
DOOR_EXCLUDED = {
    "async_llm": {},
    "llm": {
        "abort_parallel_sampling": "streams the choices and sends /sleep while they decode: vllm.LLM has no stream and runs one call at a time",
        "concurrent_race": "sleeps during a streaming burst: vllm.LLM has no stream and runs one call at a time",
        "scheduler_gate": "holds requests across partial wakes: vllm.LLM runs one call at a time, so no wake can be sent while one is held",
        "rl_recipes": "no RL framework holds vllm.LLM with its engine in a process of its own: TRL and NeMo-RL build it in their own process (the llm_colocate door)",
    },
    # vllm.LLM as TRL's colocate mode builds it: the same calls, one at a time, with no stream.
    "llm_colocate": {
        "abort_parallel_sampling": "streams the choices and sends /sleep while they decode: vllm.LLM has no stream and runs one call at a time",
        "concurrent_race": "sleeps during a streaming burst: vllm.LLM has no stream and runs one call at a time",
        "scheduler_gate": "holds requests across partial wakes: vllm.LLM runs one call at a time, so no wake can be sent while one is held",
    },
}

# In-process door -> excluded classes (DOOR_EXCLUDED) whose fake tier cell runs all the same: the class
# is ready for the door, and only its GPU cell is not yet in the matrix.
DOOR_FAKE_ONLY = {
    "async_llm": [],
    "llm": [],
    "llm_colocate": [],
}

# The suite's test classes: short name (used in cell names and tags) -> the file holding the class, in
# //tests/sleep_wake.
SLEEP_WAKE_CLASSES = {
    "abort_parallel_sampling": "test_abort_parallel_sampling.py",
    "concurrent_race": "test_concurrent_race.py",
    "error_paths": "test_error_paths.py",
    "flags": "test_sleep_wake_flags.py",
    "host_memory": "test_host_memory.py",
    "immediacy": "test_sleep_wake_immediacy.py",
    "latency": "test_sleep_wake_latency.py",
    "logprobs_precision": "test_logprobs_precision.py",
    "memory_leak_cycle": "test_memory_leak_cycle.py",
    "output_correctness": "test_output_correctness.py",
    "physical_memory": "test_physical_memory.py",
    "prefix_cache_levels": "test_prefix_cache_levels.py",
    "rl_recipes": "test_rl_recipes.py",
    "scheduler_gate": "test_scheduler_gate.py",
    "staged_wake_cycles": "test_staged_wake_cycles.py",
    "state_walk": "test_state_walk.py",
    "weight_sync": "test_weight_sync.py",
}

# Classes that compare with a checkpoint's golden on their cell -> the checkpoints ("a", "b"): their cells
# take each as data from a cached action (tests/sleep_wake/goldens, tools/goldens.bzl), taken by a fresh
# server on that checkpoint, and find it in SLEEPWAKE_GOLDEN_<A|B> (tools/defs.bzl cell_goldens).
GOLDEN_CLASSES = {
    # A's golden comes from the cell's own server before any push; B's must not come from a push.
    "weight_sync": ["b"],
    "rl_recipes": ["b"],
    # Both: the walk pushes A and B back and forth, so neither may be taken through a push it tests.
    "state_walk": ["a", "b"],
}

# Classes split over Bazel shards, one pytest class per shard (test_state_walk.py defines a cell's shards'
# classes): class short name -> {front door: {execution mode: shards}}, with a count for every door and mode
# the class's cells run on (tools/matrix.py shard_count; a class not listed runs unsplit). By door as well
# as mode because a door reaches its own pairs, so plans its own number of walks.
# The walk: a cell's tour is cut into one walk a shard (tests/core/walk/plan.py split), so a shard's time is
# its server's start plus its walk. Each count is the fewest shards whose longest walk, by the steps' GPU
# seconds (tests/core/walk/step_seconds.json), is no longer than the longest shard of the plan before the
# tour (two walks of at most 40 steps), which kept a cell's longest shard, its server's start included,
# within the minute its issue asks of it (docs/design.md, "What was tried"), and at least one a terminal
# probe (tests/core/walk/unit/plan_unit_test.py checks both).
SHARD_COUNTS = {
    "state_walk": {
        "http": {"eager": 93, "graph": 94},
        "async_llm": {"graph": 105},
        "llm": {"graph": 40},
        "llm_colocate": {"graph": 38},
    },
}

# Server settings (tools/launcher/config.py ServerConfig) a class's GPU cells start with beyond the cell's,
# set as SLEEPWAKE_<NAME> (tools/defs.bzl): weight_sync's native push way needs vLLM's own weight-transfer
# backend, auto where the runner's release has it (tests/core/cells.py resolves it; none before 0.26.0).
CLASS_SERVER_SETTINGS = {
    "weight_sync": {"weight_transfer": "auto"},
}

# The most shards Bazel (4.2) lets a test have: above it the target fails analysis ("Having more than 50 shards
# is indicative of poor test organization"). A class split finer (SHARD_COUNTS) gets the fewest Bazel shards
# that run its shards' classes in equal numbers (tools/defs.bzl, tools/matrix.py bazel_shard_count): each
# Bazel shard runs its classes one after another (tools/pytest_bridge's assign_groups deals them round robin),
# the later ones on the server the first gives back.
BAZEL_MAX_SHARDS = 50

# The vLLM releases the suite supports: the known divergences (tests/core/thresholds.py) were
# checked against each one's source. SUITE_RELEASE is the venv's pin (third_party/python/requirements.in,
# the engine tier's reference); every other one has an overlay third_party/python/vllm-<v>.overlay.lock and
# its own engine tier target.
RELEASES = [
    "0.24.0",
    "0.25.0",
    "0.26.0",
]

SUITE_RELEASE = "0.26.0"

# The fake tier (//tests/sleep_wake:fake): which classes run against the fake server, on which fake
# cells, and which cannot run, with the reason. A cell is "<runner>_<mode>", or
# "<runner>_<mode>_vllm<version>" to serve that release's response shapes (tests/sleep_wake/fakes/
# fake_vllm.py). Every class is in exactly one of the two dicts.
FAKE_TIER_CELLS = {
    "abort_parallel_sampling": ["mrv1_eager"],
    "concurrent_race": ["mrv1_eager"],
    # 0.24.0: the divergence pins of the misuse tests are looked up for that release too.
    "error_paths": ["mrv1_eager", "mrv1_eager_vllm0.24.0"],
    # 0.25.0: /reset_prefix_cache answers an empty 200 there (the level-2 recovery calls it).
    "flags": ["mrv1_eager", "mrv1_eager_vllm0.25.0"],
    "host_memory": ["mrv1_eager"],
    "immediacy": ["mrv1_eager"],
    "latency": ["mrv1_eager"],
    "logprobs_precision": ["mrv1_eager"],
    "memory_leak_cycle": ["mrv1_eager"],
    "output_correctness": ["mrv1_eager"],
    # graph: the per-mode residue bound (the resident CUDA-graph pool) and MRV2's runner check.
    "physical_memory": ["mrv1_eager", "mrv2_graph"],
    "prefix_cache_levels": ["mrv1_eager"],
    "rl_recipes": ["mrv1_eager"],
    "scheduler_gate": ["mrv1_eager"],
    "staged_wake_cycles": ["mrv1_eager"],
    # The walk's model checked against the fake: every shard's pairs, in one target split as its GPU cells are.
    "state_walk": ["mrv1_eager"],
    "weight_sync": ["mrv1_eager"],
}

# class short name -> why the fake cannot run it (empty: the fake runs every class).
FAKE_TIER_EXCLUDED = {}
