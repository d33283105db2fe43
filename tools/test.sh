#!/usr/bin/env bash
# Runs every test this host can run: `bazel test //...` in the default (CPU) configuration, where the
# GPU cells are filtered out by their `gpu` tag. Extra arguments go to Bazel (e.g. --config=gpu on a
# GPU runner, --test_filter=..., --config=disk-cache). SLEEPWAKE_REMOTE_CACHE=http://host:port adds
# --config=remote-cache with that URL; SLEEPWAKE_REMOTE_EXECUTOR=grpc[s]://host:port adds --config=remote
# with that executor (SLEEPWAKE_REMOTE_INSTANCE: its instance name; the pools' properties come from
# SLEEPWAKE_GPU_POOL_PROPERTIES, see docs/remote.md). Exits non-zero when a test fails, when
# no test target matched, and when no test case ran at all (a --test_filter that matched nothing in
# any target): tools/results/ran_tests.py reads this invocation's build events. Exits 5 (partial) when
# every test passed but a state walk cell that ran (the fake tier's, on a CPU) did not walk every pair of
# its door and run every terminal probe (a --test_filter left shards out, SLEEPWAKE_WALK_REPLAY replayed one
# walk: tools/results/walk_gate.py): such a run is never a green full one.
set -uo pipefail
cd "$(dirname "$0")/.."

args=()
[[ -n "${CI:-}" ]] && args+=(--config=ci)
[[ -n "${SLEEPWAKE_REMOTE_CACHE:-}" ]] && args+=(--config=remote-cache "--remote_cache=$SLEEPWAKE_REMOTE_CACHE")
# After the caller's arguments: --config=remote must follow --config=gpu (which runs tests locally).
remote=()
[[ -n "${SLEEPWAKE_REMOTE_EXECUTOR:-}" ]] && remote+=(--config=remote "--remote_executor=$SLEEPWAKE_REMOTE_EXECUTOR")
[[ -n "${SLEEPWAKE_REMOTE_INSTANCE:-}" ]] && remote+=("--remote_instance_name=$SLEEPWAKE_REMOTE_INSTANCE")

# The events of this invocation only: a failed build must not leave an earlier run's to be read.
bep=.bazel-bep.json
rm -f "$bep"
bazel test "${args[@]}" --build_event_json_file="$PWD/$bep" "$@" "${remote[@]}" //...
rc=$?
case $rc in
  0) python3 tools/results/ran_tests.py "$bep" || { echo "test.sh: FAILED: no test case ran (see above)" >&2; rc=1; } ;;
  4) echo "test.sh: FAILED: Bazel found no test target to run (exit 4)" >&2; exit 1 ;;
  3) echo "test.sh: FAILED: some tests failed (exit 3); logs under bazel-testlogs/" >&2 ;;
  *) echo "test.sh: FAILED: bazel exited $rc" >&2 ;;
esac
# The state walk's gate: the walk cells this invocation ran, judged together (the report's --gate); only
# where its build events name one.
if ((rc == 0 || rc == 3)) && grep -q 'state_walk' "$bep" 2>/dev/null; then
  python3 -m tools.report bazel-testlogs --gate --bep="$bep"
  gate_rc=$?
  if ((gate_rc == 5 && rc == 0)); then
    echo "test.sh: PARTIAL (exit 5): every test passed, but a state walk cell is partial (see above)" >&2
    rc=5
  elif ((gate_rc != 0 && gate_rc != 5 && rc == 0)); then
    echo "test.sh: FAILED: the state walk's gate could not judge the run (see above)" >&2
    rc=1
  fi
fi
if [[ " $* " != *" --config=gpu "* ]]; then
  echo "test.sh: GPU cells (tag gpu) were not run on this configuration; on a GPU runner: tools/run_matrix.sh"
fi
exit $rc
