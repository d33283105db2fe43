#!/usr/bin/env bash
# Runs the GPU matrix on a GPU runner: every cell of //tests/sleep_wake (or the targets given).
#
#   SLEEPWAKE_SLOTS_PER_GPU=N  cells sharing one GPU (default 1: a GPU per cell). Each cell sizes its
#                              KV cache explicitly, so sharing is safe for the synthetic model.
#   extra arguments            go to Bazel (targets, --test_filter, --config=remote-cache, ...)
#
# Bazel runs GPUs x slots cells at once; each cell leases a slot with a lock file (tools/launcher/
# gpu_lease.py) instead of Bazel's `exclusive` tag, which in Bazel 4.2.3 disables remote caching.
set -uo pipefail
cd "$(dirname "$0")/.."

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if ((gpus == 0)); then
  echo "run_matrix.sh: no NVIDIA GPU here (nvidia-smi -L lists none). The matrix starts real vLLM servers;" >&2
  echo "run it on a GPU runner. On this host, tools/test.sh runs every CPU test." >&2
  exit 1
fi
slots=${SLEEPWAKE_SLOTS_PER_GPU:-1}
targets=()
for a in "$@"; do [[ "$a" == //* || "$a" == :* ]] && targets+=("$a"); done
((${#targets[@]})) || set -- "$@" //tests/sleep_wake/...

echo "run_matrix.sh: $gpus GPU(s) x $slots slot(s) = $((gpus * slots)) cells at once"
bazel test --config=gpu --local_test_jobs=$((gpus * slots)) \
  --test_env=SLEEPWAKE_SLOTS_PER_GPU="$slots" "$@"
rc=$?
((rc == 4)) && { echo "run_matrix.sh: FAILED: no test target matched" >&2; exit 1; }
exit $rc
