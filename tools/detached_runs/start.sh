#!/usr/bin/env bash
# Starts runs of the main job one after another in a process session of their own, and returns at once:
# for a remote GPU box reached over a session that may end before a run does (ssh that drops, a CI step or
# a notebook with a time limit). Each run's console, exit code and results land in
# $SLEEPWAKE_RUNS_DIR/NAME (default /tmp/runs), saved before the next run overwrites them (save.sh), with
# the line the main job added to the run history (NAME/runs.jsonl); collect.sh waits for one and packs it.
# They run in a copy of this tree, $SLEEPWAKE_RUNS_DIR/.tree, so that editing or syncing this tree
# meanwhile cannot change a run under way.
#
#   tools/detached_runs/start.sh "NAME setup [ARGS]" "NAME matrix [ARGS]" ...
#
#   NAME     letters, digits, '_' and '-'
#   setup    tools/setup.sh ARGS (install, then the main job; the newcomer's command)
#   matrix   tools/run_matrix.sh ARGS (the main job again, e.g. --nocache_test_results for a warm run)
# The runs inherit this command's environment (SLEEPWAKE_GPU_PYTHON, SLEEPWAKE_WHEELHOUSE, ...), and
# SLEEPWAKE_COMMIT names this tree's commit for the run history, since the copy is no git checkout.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/detached_runs/running_chain.sh
die() { echo "start.sh: $*" >&2; exit 2; }
# Absolute: runs.sh works in the copy below, collect.sh wherever it is called.
runs=$(realpath -m "${SLEEPWAKE_RUNS_DIR:-/tmp/runs}")
[[ $runs/ == "$PWD"/* ]] && die "SLEEPWAKE_RUNS_DIR=$runs lies in this tree, which is copied there: set one outside it"
(($#)) || die "no run given: start.sh \"NAME setup|matrix [ARGS]\" ..."
for spec in "$@"; do
  read -r name mode args <<<"$spec"
  [[ $name =~ ^[A-Za-z0-9_-]+$ ]] || die "\"$spec\": NAME must be letters, digits, '_' or '-'"
  case $mode in
    setup | matrix) ;;
    *) die "\"$spec\": the mode is setup or matrix (NAME MODE [ARGS])" ;;
  esac
done
mkdir -p "$runs"
if pid=$(running_chain "$runs"); then
  die "runs started earlier still go (pid $pid): collect them first; two chains would share the GPU"
fi
# A queued run must not answer with an earlier run's results of the same name before it starts.
for spec in "$@"; do read -r name _ <<<"$spec"; rm -rf "${runs:?}/$name"; done
export SLEEPWAKE_RUNS_DIR=$runs
commit=${SLEEPWAKE_COMMIT:-$(git rev-parse --short=7 HEAD 2>/dev/null)}
[[ -n $commit ]] && export SLEEPWAKE_COMMIT=$commit
# The runs go in a copy of this tree: a tree changed under a Bazel analysing it (a sync of a newer tree,
# an edit) finds files missing. Copied over the last copy, not into an empty one, at the same path: what an earlier chain's runs left there (user.bazelrc, Bazel's output base, keyed
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
