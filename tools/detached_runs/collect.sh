#!/usr/bin/env bash
# Waits up to SECS for run NAME (start.sh) to end, prints its console's tail and puts everything it saved
# under DEST (default $OUT) as NAME.tgz, or NAME.tgz.0 ... when over 15 MB: at most 8 files of 15 MB, what
# a device call brings back (runs collected in one call share that).
#
#   tools/detached_runs/collect.sh NAME [SECS] [DEST]
#
# Exits 0 when the run ended (its own exit code is printed), 1 while it still runs after SECS, 2 when its
# results do not fit, 3 at once when no run of that name is there or coming: a machine that was taken
# back starts empty, and waiting on it would spend the lease for nothing.
set -uo pipefail
(($#)) || { echo "usage: collect.sh NAME [SECS] [DEST]" >&2; exit 2; }
runs=${SLEEPWAKE_RUNS_DIR:-/tmp/runs}
name=$1 secs=${2:-500} dest=${3:-${OUT:-.}}
d=$runs/$name
end=$(($(date +%s) + secs))
source "$(dirname "$0")/running_chain.sh"
running() { running_chain "$runs" >/dev/null; }
if [[ ! -d $d ]] && ! running; then
  echo "collect.sh: no run $name in $runs and none running: this machine is not the one that started it"
  exit 3
fi
while [[ ! -e $d/rc ]] && (($(date +%s) < end)); do
  running || [[ -e $d/rc ]] || { echo "collect.sh: $name has no exit code and nothing runs: it was killed or never queued"; exit 3; }
  sleep 2
done
tail -c 6000 "$d/console.log" 2>/dev/null
if [[ ! -e $d/rc ]]; then
  echo "collect.sh: $name still runs after $secs s: collect it again, at once (an idle machine is taken back)"
  exit 1
fi
mkdir -p "$dest"
bundle=$dest/$name.tgz
tar czf "$bundle" -C "$runs" "$name" || { echo "collect.sh: could not pack $d into $bundle" >&2; exit 2; }
if (($(stat -c %s "$bundle") > 15000000)); then
  split -b 15000000 -d -a 1 "$bundle" "$bundle." && rm "$bundle" || { echo "collect.sh: could not split $bundle" >&2; exit 2; }
fi
files=$(find "$dest" -type f | wc -l)
if ((files > 8)); then
  echo "collect.sh: $dest holds $files files, more than the 8 a call brings back: collect $name in a call of its own" >&2
  exit 2
fi
echo "collect.sh: $name exit $(cat "$d/rc"), $(awk -v a="$(cat "$d/began")" -v b="$(cat "$d/ended")" 'BEGIN { printf "%.1f", b - a }') s; $(cd "$dest" && ls "$name".tgz* | tr '\n' ' ')"
