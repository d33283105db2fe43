#!/usr/bin/env bash
# One runner x mode slice of the GPU cells (one cell per class: 15), executed remotely through
# a REAPI engine that runs on the GPU machine itself: PostgreSQL + BuildGrid, one CPU worker (the
# checkpoint generator) and one GPU worker per cell (the stand-in bots of tools/remote_exec/testing),
# and the Bazel client, all in one device call. Then `bazel clean` and the same `bazel test` again,
# which must be served from the engine's action cache ("Executed 0 out of N", "remote cache hit").
#
#   tools/remote_exec/h200_remote_slice.sh [RUNNER] [MODE]        # default: mrv1 eager
#
# Needs on the GPU machine what tools/run_matrix.sh needs there (Bazel 4.2.3 on PATH or $BAZEL; vLLM
# 0.26.0 behind SLEEPWAKE_GPU_PYTHON, default /opt/sleepwake/gpu-python from tools/setup.sh
# --install-only), plus the wheels of third_party/remote_exec/requirements-h200.lock in .whl-remote/:
# run tools/remote_exec/h200_wheels.sh here and carry ".whl-remote" (59.3 MiB). No index is needed
# there; the wheels are hash-checked. Results go to $OUT (bazel output, test logs, engine logs).
set -euo pipefail
cd "$(dirname "$0")/../.."

runner=${1:-mrv1}
mode=${2:-eager}
BAZEL=${BAZEL:-bazel}
GPU_PYTHON=${SLEEPWAKE_GPU_PYTHON:-/opt/sleepwake/gpu-python}
WHEELS=${SLEEPWAKE_REMOTE_WHEELS:-.whl-remote}
LOCK=third_party/remote_exec/requirements-h200.lock
WORK=/tmp/sleepwake-remote-exec
SITE=$WORK/site
BIN=$WORK/bin
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$BIN" "$OUT"

say() { echo "h200_remote_slice: $*"; }
die() { echo "h200_remote_slice: ERROR: $*" >&2; exit 1; }

# --- BuildGrid for this machine's python3, in its own --target folder -------------------------------
lock_sha=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [[ "$(cat "$SITE/.lock-sha256" 2>/dev/null)" != "$lock_sha" ]]; then
  [[ -d $WHEELS ]] || die "no $WHEELS/: run tools/remote_exec/h200_wheels.sh where PyPI is reachable and carry it"
  rm -rf "$SITE"
  python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --require-hashes \
      --target "$SITE" --find-links "$WHEELS" -r "$LOCK" || die "could not install $LOCK from $WHEELS"
  echo "$lock_sha" > "$SITE/.lock-sha256"
fi
# The engine runs BuildGrid as BIN/python3 and BIN/bgd (engine/buildgrid.py); the site goes first on
# their path only, so the GPU cells' Python is untouched.
cat > "$BIN/python3" <<EOF
#!/bin/sh
PYTHONPATH="$SITE\${PYTHONPATH:+:\$PYTHONPATH}" exec $(command -v python3) "\$@"
EOF
cat > "$BIN/bgd" <<EOF
#!/bin/sh
exec "$BIN/python3" -c 'import sys; from buildgrid.server.app import cli; sys.argv[0] = "bgd"; sys.exit(cli())' "\$@"
EOF
chmod +x "$BIN/python3" "$BIN/bgd"
# What the requirements-h200.lock header assumes the image provides (aiohttp, requests, ...) must import.
"$BIN/python3" -c 'import buildgrid.server.app.settings.parser, buildgrid.server.client.cas, psycopg2' ||
  die "BuildGrid does not import with $(command -v python3) and $SITE (a package the image lacks? see $LOCK)"
PG_BIN=$SITE/pgserver/pginstall/bin
[[ -x $PG_BIN/postgres ]] || die "$PG_BIN/postgres is missing (pgserver wheel)"

# --- The pools: properties measured here, one GPU worker per cell -----------------------------------
gpu_props=$("$GPU_PYTHON" tools/remote_exec/pool_properties.py) || die "$GPU_PYTHON tools/remote_exec/pool_properties.py failed"
say "GPU pool: $gpu_props"
mapfile -t targets < <("$BAZEL" query --noshow_progress "filter('_${runner}_${mode}\$', tests(//tests/sleep_wake:sleep_wake))")
((${#targets[@]})) || die "no cell matches _${runner}_${mode}"
workers=(--worker="cpu-0:OSFamily=Linux,gpu=none")
for i in $(seq 1 ${#targets[@]}); do workers+=(--worker="gpu-$i:$gpu_props"); done

rm -rf "$WORK/engine"
python3 -m tools.remote_exec.engine.local_engine --workdir="$WORK/engine" --buildgrid_python="$BIN/python3" \
    --pg_bin="$PG_BIN" "${workers[@]}" > "$WORK/engine.out" 2>&1 &
engine_pid=$!
collect() {
  kill "$engine_pid" 2>/dev/null && wait "$engine_pid" || true
  tar -czf "$OUT/engine-logs.tgz" -C "$WORK" engine.out engine/logs 2>/dev/null || true
  tar -czhf "$OUT/testlogs.tgz" --exclude='*.zip' bazel-testlogs/tests/sleep_wake 2>/dev/null || true
}
trap collect EXIT
for _ in $(seq 600); do
  grep -q '^READY ' "$WORK/engine.out" 2>/dev/null && break
  kill -0 "$engine_pid" 2>/dev/null || die "the engine stopped: $(tail -20 "$WORK/engine.out")"
  sleep 0.5  # polling the engine's READY line: it has no other readiness signal
done
url=$(sed -n 's/^READY //p' "$WORK/engine.out")
[[ -n $url ]] || die "the engine was not ready in 300 s: $(tail -20 "$WORK/engine.out")"
say "engine $url with ${#targets[@]} GPU workers; cells: ${targets[*]}"

# --- The slice, twice: executed by the GPU workers, then served from the engine's cache --------------
flags=(--config=gpu --config=remote "--remote_executor=$url" --remote_instance_name=main
       "--repo_env=SLEEPWAKE_GPU_PYTHON=$GPU_PYTHON" "--repo_env=SLEEPWAKE_GPU_POOL_PROPERTIES=$gpu_props"
       "--test_env=SLEEPWAKE_SLOTS_PER_GPU=${#targets[@]}" "--jobs=$((${#targets[@]} + 4))"
       --color=no --curses=no --test_output=errors --test_summary=short)
rc=0
"$BAZEL" test "${flags[@]}" "${targets[@]}" 2>&1 | tee "$OUT/bazel-remote-run.txt" || rc=$?
# Without the local output tree and action cache, only the engine's action cache can answer the rerun.
"$BAZEL" clean 2>&1 | tee "$OUT/bazel-clean.txt"
"$BAZEL" test "${flags[@]}" "${targets[@]}" 2>&1 | tee "$OUT/bazel-remote-rerun.txt" || rc=$((rc ? rc : $?))
if ! grep -q "Executed 0 out of ${#targets[@]} tests" "$OUT/bazel-remote-rerun.txt" ||
   ! grep -q "remote cache hit" "$OUT/bazel-remote-rerun.txt"; then
  say "FAILED: the rerun after bazel clean executed cells again instead of taking them from the engine's cache"
  ((rc)) || rc=1
fi
exit $rc
