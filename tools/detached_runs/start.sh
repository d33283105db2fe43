#!/usr/bin/env bash
# Starts runs one after another in a process session of their own, and returns at once: for a GPU machine
# reached call by call, where a call's processes end with it and a run outlasts a call (the main job on a
# fresh machine takes longer than one). Each run's console, exit code and results land in
# $SLEEPWAKE_RUNS_DIR/NAME (default /tmp/runs), saved before the next run overwrites them (save.sh);
# collect.sh waits for one and brings it back.
#
#   tools/detached_runs/start.sh "NAME setup [ARGS]" "NAME matrix [ARGS]" "NAME release FOLDER" ...
#
#   setup    tools/setup.sh ARGS (install, then the main job; the newcomer's command)
#   matrix   tools/run_matrix.sh ARGS (the main job again, e.g. --nocache_test_results for a warm run)
#   release  another vLLM: FOLDER is one ../shared/device/stage.py staged (FOLDER/bin/install.sh), whose
#            parts the calls copied to /tmp/stage-FOLDER (FOLDER without its leading dot) with a READY
#            mark beside them, which it waits for; it ends the old release's parked servers and this
#            lock dir's zygote host, copies the parts where install.sh reads them (/tmp/devcarry), installs
# Environment for every run: /tmp/vllm-env.sh when present (stage.py's install writes it) and
# SLEEPWAKE_WHEELHOUSE=.whl when that folder exists (python3 -m tools.deps.wheelhouse .whl).
set -uo pipefail
cd "$(dirname "$0")/../.."
runs=${SLEEPWAKE_RUNS_DIR:-/tmp/runs}
mkdir -p "$runs"
for spec in "$@"; do
  read -r _ mode _ <<<"$spec"
  case $mode in setup | matrix | release) ;; *)
    echo "start.sh: \"$spec\": the mode is setup, matrix or release (NAME MODE [ARGS])" >&2; exit 2 ;;
  esac
done
export SLEEPWAKE_RUNS_DIR=$runs
setsid nohup bash tools/detached_runs/runs.sh "$@" </dev/null >"$runs/runs.log" 2>&1 &
echo "start.sh: $# run(s) started in the background; results in $runs/NAME (tools/detached_runs/collect.sh NAME)"
