"""Which catalogued mutants the state walk reaches: each mutant's fake re-creation against the walk class
alone (all its shards, stopping at the first oracle failure), judged by the oracle ids its cases carry.

    python3 -m tests.mutants.walk_reach MODEL_DIR MODEL_B_DIR --out docs/walk-reach.md

(MODEL_DIR: bazel-bin/tools/checkpoints/synthetic_qwen3_small, MODEL_B_DIR: ..._small_b; run from the workspace
root with the venv's python3 after `bazel build //tools/checkpoints:all
//tests/sleep_wake/goldens:golden_a_fake_mrv2_eager //tests/sleep_wake/goldens:golden_b_fake_mrv2_eager`: the
walk compares with the fake cell's goldens of A and B, GOLDENS.) The page lists, per mutant, the oracles of
the walk that fired, or why nothing did. The mutants written for the walk (walk.py, waiting.py) are killed
by their catalogued ids in //tests/mutants:fake_mutants; this is the rest of the catalogue.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import sleepwake_mutants

from tests.core import oracle, verdict
from tests.core.not_re_created import NOT_RE_CREATED
from tests.mutants import stop_on_kill

WALK_FILE = "tests/sleep_wake/test_state_walk.py"
# Why the walk cannot see these; a mutant that survives or errors without a reason here fails the survey.
OUT_OF_REACH = {
    "abort_leaves_choices_running": "the walk's requests in flight are single-choice; n>1 in flight during an "
    "abort is abort_parallel_sampling's",
    "leak_once": "a one-off leak below wake_restore_bytes_max (the fake's: one weight tensor, 43 MiB) is inside "
    "the walk's band of an awake state; the spread over cycles is memory_leak_cycle's",
    "weights_wake_maps_more": "one extra tensor (the fake's: 43 MiB) mapped by a weights wake stays inside the "
    "walk's band for that state, which is relative to the awake bytes read once, not to "
    "the bytes asleep the moment before; physical_memory measures the mapped delta",
    "engine_dies_on_sleep_during_decode": "the engine dies at the walk's first sleep during decode: what fails "
    "next fails on a dead server, which the verdict counts as errored; "
    "concurrent_race kills it by the liveness oracles its entry allows",
    "wake_awake_tag_aborts": "its one symptom is the wake's 500 (api.status), a liveness oracle that this survey, "
    "judging by every oracle without the entry's fails_as, does not count; error_paths "
    "kills it",
}
# Not run: the walk bounds no latency (the latency class does); a slow sleep or wake only makes it slower.
NOT_RUN = {"slow_sleep", "slow_wake", "slow_staged_wake", "slower_wake", "slower_staged_wake", "slow_first_request"}
FILES = {"state_walk": WALK_FILE}
# The walk's goldens of A and B on the fake's MRV2-eager cell (tests/sleep_wake/goldens' actions).
GOLDENS = {
    "SLEEPWAKE_GOLDEN_A": "bazel-bin/tests/sleep_wake/goldens/golden_a_fake_mrv2_eager.json",
    "SLEEPWAKE_GOLDEN_B": "bazel-bin/tests/sleep_wake/goldens/golden_b_fake_mrv2_eager.json",
}


def reach(mutant: str, model: str, model_b: str, work: str) -> verdict.ClassResult:
    junit = os.path.join(work, f"{mutant}.xml")
    env = dict(
        os.environ,
        SLEEPWAKE_RUNNER="mrv2",
        SLEEPWAKE_EXECUTION_MODE="eager",
        SLEEPWAKE_MODEL=os.path.join(model, "config.json"),
        SLEEPWAKE_MODEL_B=os.path.join(model_b, "config.json"),
        SLEEPWAKE_SERVER_MODULE="tests.sleep_wake.fakes.fake_server",
        TEST_UNDECLARED_OUTPUTS_DIR=os.path.join(work, mutant),
        PYTHONPATH=os.getcwd() + ":tests/mutants/plugin",
        **{name: os.path.abspath(path) for name, path in GOLDENS.items()},
    )
    env[sleepwake_mutants.ENV] = mutant
    env[stop_on_kill.ENV] = ",".join(oracle.ORACLES)  # any oracle of the walk is a reach
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            WALK_FILE,
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.mutants.stop_on_kill",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit2",
            f"--basetemp={os.path.join(work, mutant + '-tmp')}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    cases = verdict.parse_junit(junit) if os.path.exists(junit) else []
    return verdict.judge_classes(cases, ["state_walk"], FILES, {"state_walk": tuple(oracle.ORACLES)})["state_walk"]


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the fake cells' checkpoint dir (synthetic_qwen3_small)")
    parser.add_argument("model_b", help="its checkpoint B dir (synthetic_qwen3_small_b)")
    parser.add_argument("--out", help="write the markdown page here too")
    args = parser.parse_args(argv[1:])
    written = sum("state_walk" in m.kills for m in sleepwake_mutants.MUTANTS.values())
    rows = [
        "# Which mutants the state walk reaches",
        "",
        "Generated by `python3 -m tests.mutants.walk_reach` on the fake tier (each mutant's re-creation "
        "against `state_walk` alone, MRV2-eager, stopping at the first oracle failure). *reached*: an "
        "oracle of the walk fired; *survived*: none did, and the reason below says why the walk cannot "
        f"see it; the {written} mutants written for the walk are killed by their catalogued ids in "
        "`//tests/mutants:fake_mutants` and on the GPU (`//tests/mutants:mutants`); those of the walk's newer "
        "regions are in the section after the table.",
        "",
        "| mutant | the walk's verdict | oracles that fired |",
        "|---|---|---|",
    ]
    unexplained = []
    with tempfile.TemporaryDirectory() as work:
        for name, m in sorted(sleepwake_mutants.MUTANTS.items()):
            if "state_walk" in m.kills:
                continue
            if name in NOT_RE_CREATED or name in NOT_RUN:
                why = "the fake cannot re-create it" if name in NOT_RE_CREATED else "the walk bounds no latency"
                rows.append(f"| `{name}` | not run: {why} | - |")
                print(rows[-1], flush=True)
                continue
            r = reach(name, args.model, args.model_b, work)
            fired = sorted({o for ids in r.oracles for o in ids})
            verdict_text = {"killed": "reached"}.get(r.verdict, r.verdict)
            if r.verdict != "killed":
                if name not in OUT_OF_REACH:
                    unexplained.append(name)
                verdict_text += f": {OUT_OF_REACH.get(name, 'NO REASON GIVEN')}"
            rows.append(f"| `{name}` | {verdict_text} | {', '.join(f'`{o}`' for o in fired) or '-'} |")
            print(rows[-1], flush=True)
    text = "\n".join(rows) + "\n"
    if args.out:
        # The sections after the table (from the first "## " heading) are kept by hand: the kills of the
        # mutants written for the walk, which their own targets show.
        kept = ""
        if os.path.exists(args.out):
            with open(args.out, encoding="utf-8") as f:
                old = f.read()
            at = old.find("\n## ")
            kept = old[at:] if at >= 0 else ""
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + kept)
    if unexplained:
        print(
            f"walk_reach: {unexplained} escape the walk without a reason in OUT_OF_REACH: add one, or "
            "make the walk reach them",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
