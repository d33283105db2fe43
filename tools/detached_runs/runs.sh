#!/usr/bin/env bash
# The runs start.sh asked for, one after another (start.sh says what each spec means).
set -uo pipefail
cd "$(dirname "$0")/../.."
runs=${SLEEPWAKE_RUNS_DIR:-/tmp/runs}
lock_dir=${SLEEPWAKE_LOCK_DIR:-/tmp/sleepwake-gpu-locks}
[[ -e /tmp/vllm-env.sh ]] && source /tmp/vllm-env.sh
[[ -d .whl ]] && export SLEEPWAKE_WHEELHOUSE=$PWD/.whl
export PYTHONUNBUFFERED=1
for spec in "$@"; do
  read -r name mode args <<<"$spec"
  d=$runs/$name
  rm -rf "$d" && mkdir -p "$d"
  date +%s.%N >"$d/began"
  case $mode in
    setup) echo "== $name: tools/setup.sh $args" >"$d/console.log"; tools/setup.sh $args >>"$d/console.log" 2>&1; rc=$? ;;
    matrix) echo "== $name: tools/run_matrix.sh $args" >"$d/console.log"; tools/run_matrix.sh $args >>"$d/console.log" 2>&1; rc=$? ;;
    release)
      staged=/tmp/stage-${args#.}
      # The parts come in calls of their own, maybe while an earlier run is still going.
      for _ in $(seq 900); do [[ -e $staged/READY ]] && break; sleep 1; done
      {
        [[ -e $staged/READY ]] || { echo "no READY mark in $staged after 900 s: copy the parts there, then touch it"; false; } &&
        PYTHONPATH=$PWD python3 -m tools.launcher.parking --lock_dir "$lock_dir" --evict_all &&
        { pkill -f tools.launcher.zygote_host; true; } &&
        mkdir -p /tmp/devcarry && cp "$staged"/part-* /tmp/devcarry/ && bash "$args/bin/install.sh"
      } >"$d/console.log" 2>&1
      rc=$?
      [[ -e /tmp/vllm-env.sh ]] && source /tmp/vllm-env.sh ;;
  esac
  echo "$rc" >"$d/rc.pending"
  date +%s.%N >"$d/ended"
  [[ $mode == release ]] || bash tools/detached_runs/save.sh "$d" >>"$d/console.log" 2>&1
  mv "$d/rc.pending" "$d/rc"
done
