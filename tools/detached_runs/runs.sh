#!/usr/bin/env bash
# The runs start.sh asked for, one after another (start.sh says what each spec means); after each, the
# lines it added to the run history (tools/run_matrix.sh appends the main job's) and what it left in the
# workspace (save.sh) go to its folder before the next run overwrites them.
set -uo pipefail
cd "$(dirname "$0")/../.."
runs=${SLEEPWAKE_RUNS_DIR:-/tmp/runs}
history=${SLEEPWAKE_RUN_HISTORY-tools/bench/runs.jsonl}
export PYTHONUNBUFFERED=1

for spec in "$@"; do
  read -r name mode args <<<"$spec"
  d=$runs/$name
  rm -rf "$d" && mkdir -p "$d"
  # What an earlier run left must not pass for this one's when this one stops before writing its own.
  rm -f sleepwake-run.json sleepwake-report.html
  before=0; [[ -n $history && -f $history ]] && before=$(wc -l <"$history")
  date +%s.%N >"$d/began"
  case $mode in
    setup) echo "== $name: tools/setup.sh $args" >"$d/console.log"; tools/setup.sh $args >>"$d/console.log" 2>&1; rc=$? ;;
    matrix) echo "== $name: tools/run_matrix.sh $args" >"$d/console.log"; tools/run_matrix.sh $args >>"$d/console.log" 2>&1; rc=$? ;;
  esac
  echo "$rc" >"$d/rc.pending"
  date +%s.%N >"$d/ended"
  # Append these to your checkout's history: cat NAME/runs.jsonl >> tools/bench/runs.jsonl
  [[ -n $history && -f $history ]] && tail -n +$((before + 1)) "$history" >"$d/runs.jsonl"
  bash tools/detached_runs/save.sh "$d" >>"$d/console.log" 2>&1
  mv "$d/rc.pending" "$d/rc"
done
