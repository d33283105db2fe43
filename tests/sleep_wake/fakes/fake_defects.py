"""The defects the fake engine can re-create, and their sizes.

All but the last carry the names of the mutant catalogue (tests/mutants/plugin/sleepwake_mutants
MUTANTS): the same bug, re-created by the fake instead of patched into vLLM, judged by the same harness
(tests/mutants/mutant_test.py). Where the fake measures what the plugin's patch changes (device and host
bytes, logprobs), the defect has the plugin's own size, read from its modules, so a kill on the fake
also says the bound catches the defect at the size the GPU run uses. Delays are shorter than the
plugin's, only just past their bound: the latency class waits them out at every sleep or wake.
"""

import sleepwake_mutants
from sleepwake_mutants import device_memory, host, weights

# Plugin sizes (the fake's device and host bytes are exact, as NVML's and /proc's are).
LEAK_PER_WAKE = device_memory.LEAK_PER_WAKE
LEAK_ONCE, LEAK_ONCE_AT_WAKE = device_memory.LEAK_ONCE, device_memory.LEAK_ONCE_AT_WAKE
KV_KEPT_FRACTION = device_memory.KV_KEPT_FRACTION
RESIDUE = device_memory.RESIDUE
LATE_RELEASE, LATE_REMAP, LATE_S = device_memory.LATE_RELEASE, device_memory.LATE_REMAP, device_memory.LATE_S
PINNED_LEAK_PER_SLEEP = host.PINNED_LEAK_PER_SLEEP
PINNED_JUMP, PINNED_JUMP_AT_SLEEP = host.PINNED_JUMP, host.PINNED_JUMP_AT_SLEEP
LATE_RESTORE_S = weights.LATE_RESTORE_S
# The drift the plugin's norm scaling gives on the seed-0 checkpoint (the catalogue's expected value).
LOGPROB_DRIFT = sleepwake_mutants.MUTANTS["weights_perturbed"].expected["logprob_drift_max"]
# Fake-only: above the 0.5 s sleep_s_max and 0.25 s wake_s_max on their own (the plugin's 0.9 s and
# 0.45 s would add ~20 s to every fake mutant run of the latency class).
SLOW_SLEEP_S = 0.6
SLOW_WAKE_S = 0.3
MiB = 1 << 20

DEFECTS = {
    "resume_on_partial_wake": "scheduling resumes after any wake (#44483 reverted, #44395)",
    "prefix_cache_kept": "sleep does not reset the prefix cache (#17103, #22726)",
    "prefix_cache_reset_on_level0": "a level-0 sleep resets the prefix cache",
    "reload_weights_noop": "reload_weights does nothing: level 2 wakes into garbage (#29341, #54235)",
    "reload_ignores_weights_path": "reload_weights ignores weights_path: a pushed checkpoint never arrives",
    "host_copy_predates_update": ("each wake restores the output projection as it was before the last "
                                  "push (a host copy taken before the update)"),
    "leak_per_wake": f"each wake of the executor leaks {LEAK_PER_WAKE // MiB} MiB (#21336, #36651)",
    "leak_once": f"wake {LEAK_ONCE_AT_WAKE} of the executor leaks {LEAK_ONCE // MiB} MiB, once",
    "kv_cache_kept_on_sleep": "sleep does not release the KV cache (#11743, #47654)",
    "kv_cache_partly_kept": f"sleep releases the KV cache but {KV_KEPT_FRACTION:.0%} of it",
    "residue_grows": f"{RESIDUE // MiB} MiB outside the pools from start-up on, resident at level 1",
    "late_release": f"/sleep answers with {LATE_RELEASE // MiB} MiB still held, released {LATE_S:g} s later",
    "late_remap": (f"/wake_up answers with {LATE_REMAP // MiB} MiB unmapped; they come back with the next "
                   "forward pass or sleep"),
    "late_restore": (f"/wake_up from level 1 answers with garbage weights, restored {LATE_RESTORE_S:g} s "
                     "later"),
    "level2_keeps_host_copy": "level 2 backs the weights up to pinned host memory like level 1",
    "host_copy_leaked": "the host copy stays referenced after the wake: each level-1 sleep pins a new one",
    "pinned_leak_per_sleep": f"each sleep of the executor pins {PINNED_LEAK_PER_SLEEP // MiB} MiB more",
    "pinned_jump_once": f"sleep {PINNED_JUMP_AT_SLEEP} of the executor pins {PINNED_JUMP // MiB} MiB, once",
    "is_sleeping_false_partial": "/is_sleeping is true only while both tags are asleep (#44483)",
    "gauge_not_updated": "/sleep does not write the sleep-state gauge",
    "slow_sleep": f"each sleep of the executor takes {SLOW_SLEEP_S:g} s longer",
    "slow_wake": f"each wake of the executor takes {SLOW_WAKE_S:g} s longer (#45648)",
    "weights_perturbed": (f"each weights wake shifts every logprob by {LOGPROB_DRIFT:g} nats; greedy "
                          "tokens unchanged (#21336)"),
    "engine_dies_on_sleep_during_decode": (
        "/sleep during decode answers 200 and the engine is dead (#45520). The plugin kills the core 0.3 s "
        "after the sleep; the fake, whose requests are faster, kills it as the sleep returns, so that no "
        "test can finish inside the delay and miss the death"),
    "wake_awake_tag_aborts": "waking an awake executor fails the call (#31618)",
    "abort_leaves_choices_running": (
        "sleep?mode=abort never reports the end of an n>1 request's child choices (#45326). vLLM's stream "
        "then stays open until the client gives up (60 s in the suite); the fake ends it at [DONE] with "
        "the children's finish_reason missing, which the same oracle rejects at once"),
    "sleep_drains_instead_of_aborting": "sleep?mode=abort waits for the requests in flight (mode wait)",
    "request_runs_while_asleep": "a request sent while the executor sleeps is scheduled at once",
    "staged_wake_loses_weights": "from the third weights-only wake on, the weights are garbage (#21336)",
    # Fake-only (FAKE_ONLY).
    "gauge_tracks_tags": ("the gauge keeps the sleep level until every tag is awake: the divergence "
                          "gauge_awake_while_partially_asleep fixed, which its pinning tests must notice"),
}

# Defects that are no mutant of the catalogue (unit/fake_tier_unit_test.py: every other one is).
FAKE_ONLY = ("gauge_tracks_tags",)
