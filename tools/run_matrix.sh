#!/usr/bin/env bash
# Runs the GPU matrix on a GPU runner: every cell of //tests/sleep_wake (or the targets given).
#
#   CUDA_VISIBLE_DEVICES=...   the GPUs this runner may use (indices or UUIDs); default: all of them.
#                              Cells lease only these (--test_env passes it through in --config=gpu).
#   SLEEPWAKE_SLOTS_PER_GPU=N  cells sharing one GPU. Default: sized from the GPUs' free memory and
#                              the cores (tools/launcher/slots.py says how); printed before the run.
#   extra arguments            go to Bazel (targets, --test_filter, --config=remote-cache, ...)
#
# Bazel runs GPUs x slots cells at once; each cell leases a slot with a lock file (tools/launcher/
# gpu_lease.py) instead of Bazel's `exclusive` tag, which in Bazel 4.2.3 disables remote caching.
# Fails when a test fails, when no target matched, and when no test case ran at all (a --test_filter
# that matched nothing in any cell): tools/ran_tests.py reads this invocation's build events.
set -uo pipefail
cd "$(dirname "$0")/.."

if ! plan=$(python3 -m tools.launcher.slots); then
  echo "run_matrix.sh: stopped before Bazel (see the line above). The matrix starts real vLLM servers:" >&2
  echo "run it on a GPU runner; on a host without a GPU, tools/test.sh runs every CPU test." >&2
  exit 1
fi
read -r gpus slots <<<"$plan"
targets=()
for a in "$@"; do [[ "$a" == //* || "$a" == :* ]] && targets+=("$a"); done
((${#targets[@]})) || set -- "$@" //tests/sleep_wake/...

# The events of this invocation only: a failed build must not leave an earlier run's to be read.
bep=.bazel-bep.json
rm -f "$bep"
echo "run_matrix.sh: $gpus GPU(s) x $slots slot(s) = $((gpus * slots)) cells at once"
bazel test --config=gpu --local_test_jobs=$((gpus * slots)) \
  --test_env=SLEEPWAKE_SLOTS_PER_GPU="$slots" --build_event_json_file="$PWD/$bep" "$@"
rc=$?
((rc == 4)) && { echo "run_matrix.sh: FAILED: no test target matched" >&2; exit 1; }
if ((rc == 0)) && ! python3 tools/ran_tests.py "$bep"; then
  echo "run_matrix.sh: FAILED: no test case ran (see above)" >&2
  exit 1
fi
echo "run_matrix.sh: summary of the cells: python3 tools/matrix_report.py"
exit $rc
