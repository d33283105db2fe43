#!/usr/bin/env bash
# Waits up to SECS for run NAME (start.sh) to end, prints its console's tail and copies its results to
# DEST (default $OUT/NAME) in at most 8 files of at most 15 MB (what a device call brings back).
#
#   tools/detached_runs/collect.sh NAME [SECS] [DEST]
#
# Exits 0 when the run ended (its own exit code is printed and in DEST/rc), 1 while it still runs after
# SECS, 3 at once when no run of that name is there or none is running to make one: a machine that was
# taken back starts empty, and waiting on it would spend the lease for nothing.
set -uo pipefail
runs=${SLEEPWAKE_RUNS_DIR:-/tmp/runs}
name=$1 secs=${2:-500} dest=${3:-${OUT:-.}/$1}
d=$runs/$name
end=$(($(date +%s) + secs))
running() { pgrep -f tools/detached_runs/runs.sh >/dev/null; }
if [[ ! -d $d ]] && ! running; then
  echo "collect.sh: no run $name in $runs and none running: this machine is not the one that started it"
  exit 3
fi
while [[ ! -e $d/rc ]] && (($(date +%s) < end)); do
  running || [[ -e $d/rc ]] || { echo "collect.sh: $name has no exit code and nothing runs: it was killed"; exit 3; }
  sleep 2
done
tail -c 6000 "$d/console.log" 2>/dev/null
if [[ ! -e $d/rc ]]; then
  echo "collect.sh: $name still runs after $secs s: collect it again, at once (an idle machine is taken back)"
  exit 1
fi
mkdir -p "$dest"
cp "$d/rc" "$d/console.log" "$dest/"
for f in xml.tgz misc.tgz; do [[ -e $d/$f ]] && cp "$d/$f" "$dest/"; done
[[ -e $d/sleepwake-run.json ]] && cp "$d/sleepwake-run.json" "$dest/run.json"
[[ -e $d/sleepwake-report.html ]] && cp "$d/sleepwake-report.html" "$dest/report.html"
if [[ -e $d/logs.tgz ]]; then
  if (($(stat -c %s "$d/logs.tgz") > 15000000)); then
    split -b 15000000 -d -a 1 "$d/logs.tgz" "$dest/logs.tgz.part"  # at most 2 parts keep 8 files
  else
    cp "$d/logs.tgz" "$dest/"
  fi
fi
echo "collect.sh: $name exit $(cat "$d/rc"), $(awk -v a="$(cat "$d/began")" -v b="$(cat "$d/ended")" 'BEGIN { printf "%.1f", b - a }') s; $(ls "$dest" | tr '\n' ' ')"
