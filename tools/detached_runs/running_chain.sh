# Sourced by start.sh and collect.sh: running_chain RUNS_DIR succeeds, printing its pid, while the chain
# start.sh started there still runs; found by the pid it wrote, since a pattern would match any process
# that names the script.
running_chain() {
  local pid
  pid=$(cat "$1/runs.pid" 2>/dev/null) && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q detached_runs/runs.sh &&
    echo "$pid"
}
