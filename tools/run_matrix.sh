#!/usr/bin/env bash
# Runs the GPU matrix on a GPU runner: every cell of //tests/sleep_wake (or the targets given).
#
#   CUDA_VISIBLE_DEVICES=...   the GPUs this runner may use (indices or UUIDs); default: all of them.
#                              Cells lease only these (--test_env passes it through in --config=gpu).
#   SLEEPWAKE_SLOTS_PER_GPU=N  cells sharing one GPU. Default: sized from the GPUs' free memory and
#                              the cores (tools/launcher/slots.py says how); printed before the run.
#   SLEEPWAKE_START_MODE=...   auto (default): cells fork their servers from a zygote that imported
#                              vLLM once (tools/launcher/zygote_host.py, started here), else start
#                              them plainly; plain or zygote force one (docs/configuration.md).
#   SLEEPWAKE_KEEP_ZYGOTES_S=S how long the zygote host and its zygotes wait after the run for the
#                              next one, whose cells then fork from a zygote that has imported vLLM
#                              already (docs/design.md). Default 600; 0 stops them with the run.
#   SLEEPWAKE_REUSE_SERVERS=1  (default) a cell whose classes passed gives its server back, and the next
#                              cell of its runner x mode takes it over once its reset is checked
#                              (tests/core/server_reuse.py, tools/launcher/parking.py); 0 starts a
#                              server for every class.
#   SLEEPWAKE_RUN_HISTORY=F    the run history the main job's line is appended to after the run
#                              (tools/bench/history.py; default tools/bench/runs.jsonl); empty: none.
#   SLEEPWAKE_COMMIT=SHA       the commit that line names; default: git rev-parse HEAD of this tree.
#   extra arguments            go to Bazel (targets, --test_filter, --config=remote-cache, ...)
#
# Each vLLM release keeps its own results: the outputs of a run against vLLM X land in
# bazel-out/k8-fastbuild-vllm-X/ (--platform_suffix), which bazel-testlogs points at after the run;
# another release's results stay where they were (and its cache keys differ anyway, identity.txt).
#
# Bazel runs GPUs x slots cells at once; each cell leases a slot with a lock file (tools/launcher/
# gpu_lease.py) instead of Bazel's `exclusive` tag, which in Bazel 4.2.3 disables remote caching.
# Fails when a test fails, when no target matched, and when no test case ran at all (a --test_filter
# that matched nothing in any cell): tools/results/ran_tests.py reads this invocation's build events.
# Exits 5 (partial) when every test passed but a state walk cell that ran did not walk every pair of its
# door and run every terminal probe (a --test_filter or shard left shards out, SLEEPWAKE_WALK_REPLAY
# replayed one walk: tools/results/walk_gate.py, the report's --gate): such a run is never a green full one.
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

# The release the GPU toolchain's Python serves (user.bazelrc, written by tools/setup.sh).
gpu_python=${SLEEPWAKE_GPU_PYTHON:-$(sed -n 's/^build:gpu --repo_env=SLEEPWAKE_GPU_PYTHON=//p' user.bazelrc 2>/dev/null | tail -1)}
# Its build (version + digest of the installed files) also re-keys @sleepwake_gpu: a vLLM replaced
# under a running Bazel server would otherwise keep the old identity.txt until the server restarts.
suffix=()
if [[ -n "$gpu_python" ]] && build=$("$gpu_python" -c 'import hashlib, importlib.metadata as m
d = m.distribution("vllm"); print(d.version, hashlib.sha256((d.read_text("RECORD") or "").encode()).hexdigest()[:16])' 2>/dev/null); then
  release=${build%% *}
  suffix=(--platform_suffix="vllm-$release" --repo_env=SLEEPWAKE_GPU_FINGERPRINT="vllm-${build// /+}")
  echo "run_matrix.sh: vLLM $release ($gpu_python); results under bazel-out/k8-fastbuild-vllm-$release"
fi

# Cells fork their servers from zygotes this host keeps (a zygote started inside a test would die
# with it: Bazel kills what a test leaves behind). A host left by an earlier run serves again, unless
# it runs another checkout's code (--replace_other_code); the cells wait for it (--await_s), since one
# that finds none starts its server plainly.
history=${SLEEPWAKE_RUN_HISTORY-tools/bench/runs.jsonl}
keep_s=${SLEEPWAKE_KEEP_ZYGOTES_S:-600}
if [[ ! "$keep_s" =~ ^[0-9]+$ ]]; then
  echo "run_matrix.sh: SLEEPWAKE_KEEP_ZYGOTES_S=$keep_s is not a whole number of seconds; set one (0 stops" \
    "the zygotes with the run) or unset it for 600" >&2
  exit 2
fi
lock_dir=${SLEEPWAKE_LOCK_DIR:-/tmp/sleepwake-gpu-locks}; mkdir -p "$lock_dir"
# Fresh: no earlier run on this host (since its /tmp was last emptied) has left its zygotes, caches and
# Bazel outputs behind; the mark is left at the end of every run. The run record says which.
machine_state=fresh; [[ -e "$lock_dir/matrix-ran" ]] && machine_state=warm
# Each GPU's memory-phase trace (gpu_lease.trace_path) describes this run only; the last run's is kept.
for t in "$lock_dir"/gpu*.memory.trace.jsonl "$lock_dir/waves.jsonl"; do [[ -e "$t" ]] && mv -f "$t" "$t.prev"; done
# Its own session: a Ctrl-C of this run does not reach it. It exits keep_s after its last zygote and
# request (0: when this script's exit kills it).
PYTHONPATH="$PWD" setsid python3 -m tools.launcher.zygote_host --lock_dir "$lock_dir" --idle_s "$keep_s" \
  --replace_other_code </dev/null >>"$lock_dir/zygote-host.log" 2>&1 &
host_pid=$!
keep=()
if ((keep_s)); then
  # Each zygote's own wait for its next server. The golden actions' servers fork from the zygote of the
  # cells' key too, and the first to ask creates it: without the same wait as an action's environment a
  # zygote a golden action created exits 60 s after the goldens (config.zygote_idle_s), and the cells
  # that come later, or the next run, import vLLM again (docs/design.md). Like the slot count, another
  # wait re-keys every action that takes the default shell environment: the goldens, the checkpoints.
  keep=(--test_env=SLEEPWAKE_ZYGOTE_IDLE_S="$keep_s" --action_env=SLEEPWAKE_ZYGOTE_IDLE_S="$keep_s")
  echo "run_matrix.sh: the zygote host waits ${keep_s} s after this run for the next (SLEEPWAKE_KEEP_ZYGOTES_S)"
else
  trap 'kill "$host_pid" 2>/dev/null' EXIT
fi
PYTHONPATH="$PWD" python3 -m tools.launcher.zygote_host --lock_dir "$lock_dir" --await_s 40 ||
  echo "run_matrix.sh: no zygote host answered on $lock_dir within 40 s (see $lock_dir/zygote-host.log);" \
    "cells start their servers plainly" >&2

# Waves: the state walk's GPU shards first, in a `bazel test` of their own, then every other GPU cell. Why:
# each shard sleeps and wakes ~380 times, and beside the other cells every one of their server starts
# holds the GPU's allocation phase for seconds while each walk sleep waits for it: in one invocation
# the walk's shards spent twice the share of their time waiting on memory phases as alone
# (docs/design.md). Longest cells first. Arguments that choose tags themselves
# (--test_tag_filters) run as one invocation.
# Each wave's tags go on the command line with --config=gpu's own filter (.bazelrc) appended: a second
# --config setting the same option would make Bazel warn on every run. The walk wave selects
# gpu_state_walk, which only the walk's GPU cells carry (tools/defs.bzl gpu_class_tag): Bazel selects a
# target having any positive tag of the filter, and `state_walk` is the fake tier's walk's tag too.
gpu_tags=$(sed -n 's/^test:gpu --test_tag_filters=//p' .bazelrc | tail -1)
waves=("--test_tag_filters=gpu_state_walk${gpu_tags:+,$gpu_tags}" "--test_tag_filters=gpu,-gpu_state_walk${gpu_tags:+,$gpu_tags}")
names=(walk rest)
# The CPU-only targets (no `gpu` tag: the fake tier, the unit tests, the reuse equivalence, the engine tier
# when asked for) run in neither GPU wave but beside them, from the start, in a `bazel test` of their own
# on a quarter of the cores, niced below the cells. Inside a wave each held one of its test jobs, and Bazel
# starts tests in an order of its own: a fake walk started last ran alone for two minutes at the walk
# wave's end, and the rest wave ended on the reuse equivalence (docs/design.md). One Bazel server runs one
# command at a time, so theirs runs in an output base of its own, without convenience symlinks (the
# report finds its results through its build events). The report says where they ran, and whether they
# stayed off the GPU job's critical path, counted from the build events.
cpu_filter="--test_tag_filters=-gpu${gpu_tags:+,$gpu_tags}"
for a in "$@"; do
  [[ "$a" == --test_tag_filters* ]] || continue
  waves=("") names=("") cpu_filter=""
  # A filter choosing the walk's GPU shards alone runs them as the walk wave does, no more at once than the
  # cores: with a job per slot plus the waiters, 23 shards ran at once on an H100's 16 cores.
  positive=$(tr ',' '\n' <<<"${a#--test_tag_filters=}" | grep -v '^-' | sort -u | paste -sd, -)
  [[ "$positive" == gpu_state_walk ]] && names=(walk)
done
cpu_jobs=$(($(nproc) / 4)); ((cpu_jobs)) || cpu_jobs=1
cpu_bep=.bazel-bep-wave-cpu.json cpu_log="$lock_dir/cpu-only.log" cpu_pid=""
# Bazel runs at most --jobs actions at once (default: the cores), tests included. Test jobs: one per slot;
# a GPU cell started beyond the slots waits for its lease, which keeps the GPUs at gpus x slots cells.
# Where one invocation runs the CPU targets too (the caller's own tag filters), a quarter of the cores more
# for them, so they never hold a job a GPU cell could use (the cells left a third of the cores idle:
# docs/design.md).
test_jobs=$((gpus * slots))
[[ -z "$cpu_filter" ]] && test_jobs=$((test_jobs + cpu_jobs))
reuse=${SLEEPWAKE_REUSE_SERVERS:-1}
if [[ "$reuse" != 0 && "$reuse" != 1 ]]; then
  echo "run_matrix.sh: SLEEPWAKE_REUSE_SERVERS=$reuse: say 1 (the default) to hand servers on between cells," \
    "0 to start one for every class" >&2
  exit 2
fi
# With reuse, cells waiting for a slot are the ones a given-back server can go to (a parked server
# of a configuration nobody waits for is evicted soon, parking.EVICT_AFTER_S): half a slot's worth more of them gives
# each of the four runner x mode configurations a few waiting cells. They only poll.
((reuse)) && test_jobs=$((test_jobs + gpus * slots / 2))
jobs=$(nproc); ((test_jobs > jobs)) && jobs=$test_jobs
# The walk wave runs no more tests at once than the host has cores: each shard's server steps as fast as
# its core allows, so beside more shards than cores every step slows, and a shard started beyond the slots
# waits for a lease inside its own time; one not yet started waits in Bazel's queue instead. Below the
# cores, the slots. docs/design.md.
walk_jobs=$((gpus * slots)); ((walk_jobs > $(nproc))) && walk_jobs=$(nproc)
walk_note=""; ((${#waves[@]} > 1)) && walk_note=" ($walk_jobs in the walk wave)"
echo "run_matrix.sh: $gpus GPU(s) x $slots slot(s) = $((gpus * slots)) cells at once$walk_note"
# The host's CPU time while Bazel ran, busy against idle+iowait (/proc/stat): whether cores or the GPU's
# memory phases bound the slots (tools/launcher/slots.py gives each cell a core).
cpu_times() { awk '/^cpu /{t=0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6}' /proc/stat; }
cpu_before=$(cpu_times)
# ... and by kind of process (the servers, Bazel, the tests' own processes): tools/bench/host_cpu.py.
PYTHONPATH="$PWD" python3 -m tools.bench.host_cpu --while_alive $$ >"$lock_dir/host-cpu.txt" 2>&1 &
host_cpu=$!
rc=0 matched=0 beps=() bep_names=() took=()
# An earlier run's wave files must not stand for this run's (a wave this run stops before would leave one).
rm -f .bazel-bep-wave*.json
if [[ -n "$cpu_filter" ]]; then
  if cpu_base=$(bazel info output_base 2>/dev/null) && [[ -n "$cpu_base" ]]; then
    cpu_base="$cpu_base-cpu-only"
    echo "run_matrix.sh: the CPU-only targets run beside the GPU waves in a bazel test of their own" \
      "($cpu_jobs at once, niced; output base $cpu_base; its output follows the waves')"
    # Its server inherits the client's niceness when this starts it, and so do its tests. Its CPUs are its
    # quarter too: a test that holds several (a `cpu:N` tag) runs with fewer others beside it.
    nice -n 10 bazel --output_base="$cpu_base" test --config=gpu "${suffix[@]}" --jobs="$cpu_jobs" \
      --local_test_jobs="$cpu_jobs" --local_cpu_resources="$cpu_jobs" --symlink_prefix=/ \
      --build_event_json_file="$PWD/$cpu_bep" "$cpu_filter" "$@" \
      </dev/null >"$cpu_log" 2>&1 &
    cpu_pid=$!
    trap 'kill "$cpu_pid" 2>/dev/null; ((keep_s)) || kill "$host_pid" 2>/dev/null' EXIT
  else
    echo "run_matrix.sh: \`bazel info output_base\` failed: the CPU-only targets run after the GPU waves," \
      "in a wave of their own" >&2
    waves+=("$cpu_filter") names+=(cpu)
  fi
fi
for i in "${!waves[@]}"; do
  wave=${waves[$i]}
  # The events of this invocation only: a failed build must not leave an earlier run's to be read.
  bep=.bazel-bep.json; ((${#waves[@]} > 1)) && bep=.bazel-bep-wave$((i + 1)).json
  rm -f "$bep"
  ((${#waves[@]} > 1)) && echo "run_matrix.sh: wave $((i + 1)) of ${#waves[@]} (${names[$i]}): $wave"
  wave_jobs=$test_jobs; [[ "${names[$i]}" == walk ]] && wave_jobs=$walk_jobs
  began=$(date +%s.%N)
  bazel test --config=gpu "${suffix[@]}" --jobs="$jobs" --local_test_jobs="$wave_jobs" \
    --test_env=SLEEPWAKE_SLOTS_PER_GPU="$slots" --action_env=SLEEPWAKE_SLOTS_PER_GPU="$slots" "${keep[@]}" \
    --test_env=SLEEPWAKE_REUSE_SERVERS="$reuse" --build_event_json_file="$PWD/$bep" ${wave:+"$wave"} "$@"
  wave_rc=$?
  ended=$(date +%s.%N)
  took+=("$(awk -v a="$began" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')")
  # When each wave ran, for the trace's summary per wave (tools/bench/phase_trace.py).
  ((${#waves[@]} > 1)) && printf '{"wave": "%s", "began": %s, "ended": %s}\n' "${names[$i]}" "$began" "$ended" \
    >>"$lock_dir/waves.jsonl"
  case $wave_rc in
    0 | 3) matched=1; beps+=("$bep") bep_names+=("${names[$i]}"); ((wave_rc > rc)) && rc=$wave_rc ;;
    4) ((${#waves[@]} > 1)) && echo "run_matrix.sh: wave $((i + 1)) has none of the targets asked for" \
         "(Bazel's \"No test targets were found\" above is this wave's); the other wave runs them" ;;
    # Some targets failed to build (--keep_going, .bazelrc), the rest ran: their results count, and the next
    # wave's own targets may build.
    1) beps+=("$bep") bep_names+=("${names[$i]}"); rc=1
       echo "run_matrix.sh: wave $((i + 1)): some targets failed to build (Bazel's errors above); the others ran" ;;
    *) rc=$wave_rc; break ;;  # a command-line or Bazel error: the next wave would fail the same way
  esac
done
# The CPU-only targets' own bazel test: the run waits for it (its results are the run's), which costs the
# run time only where it ends after the GPU waves (the report says which, from the build events).
cpu_wait_s=0
if [[ -n "$cpu_pid" ]]; then
  waited=$(date +%s.%N)
  wait "$cpu_pid"; cpu_rc=$?
  cpu_wait_s=$(awk -v a="$waited" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "run_matrix.sh: the CPU-only targets' bazel test (beside the GPU waves; $cpu_wait_s s after them):"
  cat "$cpu_log"
  case $cpu_rc in
    0 | 3) matched=1; beps+=("$cpu_bep"); ((cpu_rc > rc)) && rc=$cpu_rc ;;
    4) echo "run_matrix.sh: none of the targets asked for is CPU-only (Bazel's \"No test targets were found\"" \
         "above is their bazel test's)" ;;
    1) beps+=("$cpu_bep"); rc=1
       echo "run_matrix.sh: the CPU-only targets: some failed to build (Bazel's errors above); the others ran" ;;
    *) rc=$cpu_rc ;;
  esac
fi
((rc == 0 && !matched)) && rc=4
# Servers the last cells gave back wait for cells that are not coming: the GPU is free when this ends.
PYTHONPATH="$PWD" python3 -m tools.launcher.parking --lock_dir "$lock_dir" --evict_all
((${#took[@]} > 1)) && echo "run_matrix.sh: bazel test took" \
  "$(printf '%s\n' "${took[@]}" | awk '{ t += $1 } END { printf "%.1f", t }') s in ${#took[@]} waves (${took[*]} s)"
read -r t0 i0 <<<"$cpu_before"; read -r t1 i1 <<<"$(cpu_times)"
((t1 > t0)) && echo "run_matrix.sh: host CPUs busy $(( 100 * (t1 - t0 - (i1 - i0)) / (t1 - t0) ))% of" \
  "$(nproc) during bazel test"
kill -TERM "$host_cpu" 2>/dev/null; wait "$host_cpu" 2>/dev/null
if grep -q "^host CPU-s" "$lock_dir/host-cpu.txt" 2>/dev/null; then
  echo "run_matrix.sh: $(grep "^host CPU-s" "$lock_dir/host-cpu.txt" | tail -1)"
else
  echo "run_matrix.sh: the host's CPU by kind of process was not measured (see $lock_dir/host-cpu.txt)" >&2
fi
# What the cells waited for on each GPU (none written when every cell had a GPU to itself).
if compgen -G "$lock_dir/gpu*.memory.trace.jsonl" >/dev/null; then
  PYTHONPATH="$PWD" python3 -m tools.bench.phase_trace "$lock_dir" || true
fi
# The GPU units each wave ran at once: the walk wave's test jobs, the slots in the rest.
at_once=()
for i in "${!bep_names[@]}"; do
  n=$((gpus * slots)); [[ "${bep_names[$i]}" == walk ]] && n=$walk_jobs
  at_once+=("$n")
done
# Where the GPU cells' time went (starts, memory-phase waits, their own work), this run's results only,
# and the floors: each GPU wave at the units it ran at once, in turn; the whole host's CPU-s over the cores.
cells=bazel-testlogs/tests/sleep_wake
if ((${#bep_names[@]})) && [[ -d "$cells" ]]; then
  runs_args=()
  for i in "${!bep_names[@]}"; do runs_args+=(--bep="${beps[$i]}" --at_once="${at_once[$i]}"); done
  PYTHONPATH="$PWD" python3 -m tools.bench.bazel_runs "$cells" --slots=$((gpus * slots)) --cores="$(nproc)" \
    --host_cpu="$lock_dir/host-cpu.txt" "${runs_args[@]}" || true
fi
if ((rc == 4)); then
  echo "run_matrix.sh: FAILED: no test target matched" >&2
  rc=1
elif ((rc == 0)) && ! python3 tools/results/ran_tests.py "${beps[@]}"; then
  echo "run_matrix.sh: FAILED: no test case ran (see above)" >&2
  rc=1
fi
# Every wave's build events, so that a cell an earlier run left in bazel-testlogs is told apart (stale).
bep_args=(); for b in "${beps[@]}"; do bep_args+=(--bep="$b"); done
((${#bep_args[@]})) || bep_args=(--no_bep)
# The state walk's gate: a walk cell that ran must have walked every pair of its door and run every probe,
# whatever its shards' own verdicts (tools/results/walk_gate.py); else the run is partial, not green.
# Only where a walk cell is among this run's results (its build events name it).
gate_rc=0
if ((${#beps[@]})) && grep -q 'state_walk' "${beps[@]}" 2>/dev/null; then
  python3 -m tools.report bazel-testlogs --gate "${bep_args[@]}"
  gate_rc=$?
fi
if ((gate_rc == 5 && rc == 0)); then
  echo "run_matrix.sh: PARTIAL (exit 5): every test passed, but a state walk cell is partial (see above)" >&2
  rc=5
elif ((gate_rc != 0 && gate_rc != 5 && rc == 0)); then
  echo "run_matrix.sh: FAILED: the state walk's gate could not judge the run (see above)" >&2
  rc=1
fi
# The run as one JSON record (tools/bench/run_record.py), with the verdict this script exits with.
# Each GPU wave's build events with its name, the CPU-only targets' apart: the replay's units (replay.py).
record=$PWD/sleepwake-run.json
rm -f "$record"  # an earlier run's must not stand for this one's (the history and the report read it)
record_args=()
for i in "${!bep_names[@]}"; do
  record_args+=(--bep="${beps[$i]}" --wave_name="${bep_names[$i]:-all}" --at_once="${at_once[$i]}")
done
for t in "${took[@]}"; do record_args+=(--wave_s="$t"); done
[[ " ${beps[*]} " == *" $cpu_bep "* ]] && record_args+=(--cpu_bep="$cpu_bep")
record_args+=(--cpu_wait_s="$cpu_wait_s" --slots_per_gpu="$slots" --host_cpu="$lock_dir/host-cpu.txt" --lock_dir="$lock_dir")
if PYTHONPATH="$PWD" python3 -m tools.bench.run_record "$cells" --out "$record" --gpus="$gpus" \
  --cores="$(nproc)" --rc="$rc" --machine_state="$machine_state" "${record_args[@]}"; then
  # The main job's line of the run history (tools/bench/history.py): only a run of the whole matrix (no
  # targets and no filters of yours), so that the history compares like with like.
  main_job=1
  ((${#targets[@]})) && main_job=0
  for a in "$@"; do [[ "$a" == --test_filter* || "$a" == --test_tag_filters* ]] && main_job=0; done
  if ((main_job)) && [[ -n "$history" ]]; then
    commit=${SLEEPWAKE_COMMIT:-$(git rev-parse --short=7 HEAD 2>/dev/null)}
    if [[ -z "$commit" ]]; then
      echo "run_matrix.sh: no line in $history: this tree is no git checkout; set SLEEPWAKE_COMMIT to the" \
        "commit it holds, or append sleepwake-run.json with python3 -m tools.bench.history" >&2
    else
      PYTHONPATH="$PWD" python3 -m tools.bench.history append "$record" --commit "$commit" \
        --date "$(date -u +%F)" --history "$history" ||
        echo "run_matrix.sh: no line in $history (see the line above); the test results stand" >&2
    fi
  fi
else
  echo "run_matrix.sh: no run record (see the line above); the test results stand" >&2
fi
touch "$lock_dir/matrix-ran"
# The run as a page beside bazel-testlogs and as text in the log, the cells that failed or prove nothing
# first (tools/report); it shows the results, it never decides them (the gate above did: its exit 5 for a
# partial walk is this script's already). The run record, for where the run's time went and its replay on
# 8 GPUs.
[[ -f "$record" ]] && bep_args+=(--record="$record")
# The run history it draws is the one the main job's line went to.
report_rc=0
python3 -m tools.report bazel-testlogs --out "$PWD/sleepwake-report.html" --text "${bep_args[@]}" \
  ${history:+--history="$history"} || report_rc=$?
((report_rc != 0 && report_rc != 5)) && echo "run_matrix.sh: no report (see the line above); the test results stand" >&2
exit $rc
