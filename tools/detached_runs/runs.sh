#!/usr/bin/env bash
# The runs start.sh asked for, one after another (start.sh says what each spec means).
set -uo pipefail
cd "$(dirname "$0")/../.."
runs=${SLEEPWAKE_RUNS_DIR:-/tmp/runs}
lock_dir=${SLEEPWAKE_LOCK_DIR:-/tmp/sleepwake-gpu-locks}
[[ -e /tmp/vllm-env.sh ]] && source /tmp/vllm-env.sh
[[ -d .whl ]] && export SLEEPWAKE_WHEELHOUSE=$PWD/.whl
export PYTHONUNBUFFERED=1

# Stops the zygote host PID (it stops its zygotes on SIGTERM), killing it after 60 s; an exited host
# whose parent has not reaped it yet counts as stopped.
stop_host() {
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 300); do
    grep -qs '^State:[[:space:]]*[RSDT]' "/proc/$1/status" || return 0
    sleep 0.2
  done
  kill -KILL "$1" 2>/dev/null
  return 0
}
for spec in "$@"; do
  read -r name mode args <<<"$spec"
  d=$runs/$name
  rm -rf "$d" && mkdir -p "$d"
  # What an earlier run left must not pass for this one's when this one stops before writing its own.
  rm -f sleepwake-run.json sleepwake-report.html
  date +%s.%N >"$d/began"
  case $mode in
    setup) echo "== $name: tools/setup.sh $args" >"$d/console.log"; tools/setup.sh $args >>"$d/console.log" 2>&1; rc=$? ;;
    matrix) echo "== $name: tools/run_matrix.sh $args" >"$d/console.log"; tools/run_matrix.sh $args >>"$d/console.log" 2>&1; rc=$? ;;
    release)
      # The parts come in calls of their own, maybe while an earlier run is still going.
      staged=${SLEEPWAKE_STAGE_ROOT:-/tmp}/stage-${args#.}
      for _ in $(seq 900); do [[ -e $staged/READY ]] && break; sleep 1; done
      {
        [[ -e $staged/READY ]] || { echo "no READY mark in $staged after 900 s: copy the parts there, then touch it"; false; } &&
        # The old release's servers and zygotes go first: a parked server would serve it, and a zygote
        # refuses to fork once its files are replaced only after the first request finds out.
        PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 -m tools.launcher.parking --lock_dir "$lock_dir" --evict_all &&
        host=$(PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 -c 'import sys
from tools.launcher import zygote_host
answer = zygote_host.ping(sys.argv[1])
print(answer["pid"] if answer else "")' "$lock_dir") &&
        { [[ -z $host ]] || stop_host "$host"; } &&
        parts=${SLEEPWAKE_INSTALL_PARTS_DIR:-/tmp/devcarry} && mkdir -p "$parts" && cp "$staged"/part-* "$parts"/ &&
        bash "$args/bin/install.sh"
      } >"$d/console.log" 2>&1
      rc=$?
      [[ -e /tmp/vllm-env.sh ]] && source /tmp/vllm-env.sh ;;
  esac
  echo "$rc" >"$d/rc.pending"
  date +%s.%N >"$d/ended"
  [[ $mode == release ]] || bash tools/detached_runs/save.sh "$d" >>"$d/console.log" 2>&1
  mv "$d/rc.pending" "$d/rc"
done
