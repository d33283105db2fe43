"""The catalogue's mutants the fake tier cannot re-create, with the reason: data about the fake
(tests/sleep_wake/fakes/fake_defects.py re-creates every other mutant), kept in the core because the
mutant tier's walk-reach survey (tests/mutants/walk_reach.py) reads it too, and no tier imports another
(//tools/lint:tier_imports_test). tests/sleep_wake/fakes/unit/fake_tier_unit_test.py checks it against
the catalogue and the fake's defects.
"""

NOT_RE_CREATED = {
    # The plugin's doors.py: mutants of code only an in-process door runs.
    **dict.fromkeys(
        (
            "llm_collective_rpc_drops_kwargs",
            "llm_is_sleeping_stale",
            "llm_sleep_ignores_level",
            "llm_sleep_skips_gauge",
            "llm_wake_up_drops_tags",
        ),
        "a mutant of vllm.LLM's own code (LLMEngine, in the door host's process): the fake answers as the "
        "door host would, but runs no LLM or LLMEngine code to re-create it in",
    ),
    **dict.fromkeys(
        ("inproc_sleep_accepts_wait", "inproc_sleep_keeps_prefix_cache"),
        "a mutant of the in-process engine's own code (InprocClient, EngineCore.pause_scheduler, in the "
        "llm_colocate door host's process): the fake has no in-process door to run it in "
        "(tests/mutants/defs.bzl refuses a fake door mutant)",
    ),
    "abort_delayed": (
        "the fake models no path between the engine and the front end, so nothing of its own (KV cache, "
        "copy bandwidth, token delay: 768 tokens take ~1.5 s) gives the abort's lateness a size; the "
        "plugin's 15 s is written against abort_s_max, which a fake defect's size must never be"
    ),
    "slow_first_request": (
        "the fake's forward pass costs only its token delay; it has no model of what a "
        "first forward after a wake would redo (kernels, graphs), so no size to give it"
    ),
    "slower_wake": (
        "sized for the bound of wakes beside a GPU neighbour's start step, which never judges on "
        "the fake (no lease, no neighbours); slow_wake re-creates the same defect for the other"
    ),
    "slower_staged_wake": (
        "sized for the bound of staged wakes beside a neighbour's start step, which never "
        "judges on the fake; slow_staged_wake re-creates the same defect for the other"
    ),
}
