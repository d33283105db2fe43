"""The suite's test classes: short name (used in cell names and tags) -> the file holding the class.

One definition, loaded by the matrix (tests/sleep_wake/BUILD.bazel) and the mutants
(tests/mutants/BUILD.bazel).
"""

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
    "scheduler_gate": "test_scheduler_gate.py",
    "staged_wake_cycles": "test_staged_wake_cycles.py",
    "state_walk": "test_state_walk.py",
    "weight_sync": "test_weight_sync.py",
}

# Classes split over Bazel shards, one pytest class per shard (test_state_walk.py defines SHARDS classes;
# tests/sleep_wake/walk/unit/plan_unit_test.py checks the two agree).
SHARD_COUNTS = {
    "state_walk": 6,
}
