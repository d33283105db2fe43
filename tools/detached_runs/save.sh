#!/usr/bin/env bash
# Saves into DIR what a finished run left in the workspace and the lock dir, before the next run
# overwrites it: the record, the report, the cells' test.xml and test.log that this run wrote (a cell it
# did not run keeps an earlier run's), the build events, the zygote host's and zygotes' logs (each
# zygote's key environment), the host's CPU and the memory-phase traces, every GPU cell's measurements
# (the readings tests/core/noise_floor.py merges into the noise data), the GPU walk shards' whole
# undeclared outputs (each walk step's time among them, and their server logs: what a slow shard spent
# its time on), and each mutant target's verdict files (its row, its inner shards' reports and pytest
# output: which oracle fired on what value), zipped by Bazel or not (a host without `zip`).
set -uo pipefail
cd "$(dirname "$0")/../.."
d=$1
lock_dir=${SLEEPWAKE_LOCK_DIR:-/tmp/sleepwake-gpu-locks}
mkdir -p "$d/misc"
cp -f sleepwake-run.json sleepwake-report.html "$d/" 2>/dev/null
if testlogs=$(readlink -f bazel-testlogs) && [[ -d $testlogs/tests ]]; then
  for kind in xml log; do
    (cd "$testlogs" && find -L tests -name "test.$kind" -newer "$d/began") >"$d/$kind.list"
    tar czf "$d/$kind.tgz" -C "$testlogs" -T "$d/$kind.list"
  done
  (cd "$testlogs" && find -L tests -path "*/state_walk_*/test.outputs" -not -path "*_fake_*" -newer "$d/began") >"$d/outputs.list"
  tar czf "$d/outputs.tgz" -C "$testlogs" -T "$d/outputs.list"
  rm -rf "$d/measurements" && mkdir "$d/measurements" &&
    python3 -m tools.detached_runs.keep_measurements "$testlogs" "$d/measurements" --newer "$d/began" &&
    tar czf "$d/measurements.tgz" -C "$d/measurements" .
  rm -rf "$d/measurements"
  rm -rf "$d/mutants" && mkdir "$d/mutants" &&
    python3 -m tools.detached_runs.keep_mutant_verdicts "$testlogs" "$d/mutants" --newer "$d/began" &&
    tar czf "$d/mutants.tgz" -C "$d/mutants" .
  rm -rf "$d/mutants"
fi
cp -f .bazel-bep*.json "$lock_dir"/zygote-*.log "$lock_dir"/host-cpu.txt "$lock_dir"/waves.jsonl \
  "$lock_dir"/gpu*.memory.trace.jsonl "$d/misc/" 2>/dev/null
tar czf "$d/misc.tgz" -C "$d" misc && rm -rf "$d/misc"
echo "save.sh: $(ls "$d" | tr '\n' ' ')"
