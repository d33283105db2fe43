"""Which classes of classes.bzl the fake tier runs (on which fake cells), and which it cannot run.

Every class is in exactly one of the two dicts (tests/sleep_wake/unit/fake_tier_unit_test.py checks
it), so a new class must either run against the fake or say here why it cannot.

A cell is "<runner>_<mode>", or "<runner>_<mode>_vllm<version>" to serve that release's response
shapes (tests/sleep_wake/fakes/fake_vllm.py). The mutants' fake re-creations run on MRV2-eager in
//tests/mutants:fake_mutants.
"""

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
    "scheduler_gate": ["mrv1_eager"],
    "staged_wake_cycles": ["mrv1_eager"],
    # The walk's model checked against the fake: every shard's pairs, in one target.
    "state_walk": ["mrv1_eager"],
    "weight_sync": ["mrv1_eager"],
}

# class short name -> why the fake cannot run it (empty: the fake runs every class).
FAKE_TIER_EXCLUDED = {}
