#!/usr/bin/env bash
# Starts runs one after another in a process session of their own, and returns at once: for a GPU machine
# reached call by call, where a call's processes end with it and a run outlasts a call (the main job on a
# fresh machine takes longer than one). Each run's console, exit code and results land in
# $SLEEPWAKE_RUNS_DIR/NAME (default /tmp/runs), saved before the next run overwrites them (save.sh);
# collect.sh waits for one and brings it back. They run in a copy of this tree, $SLEEPWAKE_RUNS_DIR/.tree.
#
#   tools/detached_runs/start.sh "NAME setup [ARGS]" "NAME matrix [ARGS]" "NAME release FOLDER" ...
#
#   NAME     letters, digits, '_' and '-'
#   setup    tools/setup.sh ARGS (install, then the main job; the newcomer's command)
#   matrix   tools/run_matrix.sh ARGS (the main job again, e.g. --nocache_test_results for a warm run)
#   release  another vLLM: FOLDER/bin/install.sh installs the parts it finds in /tmp/devcarry (the device
#            staging's format); the calls copy them to /tmp/stage-FOLDER (FOLDER without its leading
#            dot) and then touch READY there, which it waits for. It ends the old release's parked
#            servers and this lock dir's zygote host first.
# Environment for every run: /tmp/vllm-env.sh when present (the staging's install writes it) and
# SLEEPWAKE_WHEELHOUSE=.whl when that folder exists (python3 -m tools.deps.wheelhouse .whl).
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/detached_runs/running_chain.sh
die() { echo "start.sh: $*" >&2; exit 2; }
# Absolute: runs.sh works in the copy below, collect.sh wherever it is called.
runs=$(realpath -m "${SLEEPWAKE_RUNS_DIR:-/tmp/runs}")
[[ $runs/ == "$PWD"/* ]] && die "SLEEPWAKE_RUNS_DIR=$runs lies in this tree, which is copied there: set one outside it"
(($#)) || die "no run given: start.sh \"NAME setup|matrix [ARGS]\" | \"NAME release FOLDER\" ..."
for spec in "$@"; do
  read -r name mode args <<<"$spec"
  [[ $name =~ ^[A-Za-z0-9_-]+$ ]] || die "\"$spec\": NAME must be letters, digits, '_' or '-'"
  case $mode in
    setup | matrix) ;;
    release) [[ -f $args/bin/install.sh ]] || die "\"$spec\": no $args/bin/install.sh here: carry the staged folder's bin" ;;
    *) die "\"$spec\": the mode is setup, matrix or release (NAME MODE [ARGS])" ;;
  esac
done
mkdir -p "$runs"
if pid=$(running_chain "$runs"); then
  die "runs started earlier still go (pid $pid): collect them first; two chains would share the GPU"
fi
# A queued run must not answer with an earlier run's results of the same name before it starts.
for spec in "$@"; do read -r name _ <<<"$spec"; rm -rf "${runs:?}/$name"; done
export SLEEPWAKE_RUNS_DIR=$runs
# The runs go in a copy of this tree: each device call copies the caller's tree over this one, and a Bazel
# analysing meanwhile finds files missing (docs/remote.md). Copied over the last copy, not into an empty
# one, at the same path: what an earlier chain's runs left there (user.bazelrc, Bazel's output base, keyed
# by that path) keeps the next chain warm. What the last copy brought and this tree no longer has goes (a
# deleted test file would still be globbed). A dot name: no run's NAME can be it.
tree=$runs/.tree
listing=$runs/.tree.files
find . \( -path ./.git -o -path './bazel-*' \) -prune -o \( -type f -o -type l \) -print | LC_ALL=C sort >"$listing.new" ||
  die "could not list this tree's files (find's message above)"
mkdir -p "$tree" || die "could not make $tree: free space there, or set SLEEPWAKE_RUNS_DIR elsewhere"
if [[ -e $listing ]]; then
  LC_ALL=C comm -23 "$listing" "$listing.new" | (cd "$tree" && xargs -r -d '\n' rm -f --)
fi
tar -cf - -T "$listing.new" | tar -xf - -C "$tree" ||
  die "could not copy this tree to $tree (tar's message above): free space there, or set SLEEPWAKE_RUNS_DIR elsewhere"
mv -f "$listing.new" "$listing"
setsid nohup bash "$tree/tools/detached_runs/runs.sh" "$@" </dev/null >"$runs/runs.log" 2>&1 &
echo $! >"$runs/runs.pid"
echo "start.sh: $# run(s) started in the background; results in $runs/NAME (tools/detached_runs/collect.sh NAME)"
