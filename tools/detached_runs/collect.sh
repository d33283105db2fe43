#!/usr/bin/env bash
# Waits up to SECS for run NAME (start.sh) to end, prints its console's tail and packs everything it saved
# into DEST/NAME.tgz (default DEST: the current directory), for one copy back (scp, rsync). With
# SLEEPWAKE_COLLECT_PART_BYTES=N the bundle is split into NAME.tgz.0, NAME.tgz.1, ... of at most N bytes
# each, for a transfer that limits a file's size (join them with cat).
#
#   tools/detached_runs/collect.sh NAME [SECS] [DEST]
#
# Exits 0 when the run ended (its own exit code is printed), 1 while it still runs after SECS, 2 when its
# results cannot be packed, 3 at once when no run of that name is there or coming: a box that was replaced
# starts empty, and waiting on it would wait for nothing.
set -uo pipefail
(($#)) || { echo "usage: collect.sh NAME [SECS] [DEST]" >&2; exit 2; }
runs=${SLEEPWAKE_RUNS_DIR:-/tmp/runs}
name=$1 secs=${2:-500} dest=${3:-.}
part=${SLEEPWAKE_COLLECT_PART_BYTES:-}
if [[ -n $part && ! $part =~ ^[1-9][0-9]*$ ]]; then
  echo "collect.sh: SLEEPWAKE_COLLECT_PART_BYTES=$part is not a number of bytes; set one, or unset it for one file" >&2
  exit 2
fi
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
  echo "collect.sh: $name still runs after $secs s: collect it again later"
  exit 1
fi
mkdir -p "$dest"
bundle=$dest/$name.tgz
rm -f "$bundle" "$bundle".[0-9]*
tar czf "$bundle" -C "$runs" "$name" || { echo "collect.sh: could not pack $d into $bundle" >&2; exit 2; }
if [[ -n $part ]] && (($(stat -c %s "$bundle") > part)); then
  split -b "$part" -d -a 1 "$bundle" "$bundle." && rm "$bundle" || { echo "collect.sh: could not split $bundle" >&2; exit 2; }
fi
echo "collect.sh: $name exit $(cat "$d/rc"), $(awk -v a="$(cat "$d/began")" -v b="$(cat "$d/ended")" 'BEGIN { printf "%.1f", b - a }') s; $(cd "$dest" && ls "$name".tgz* | tr '\n' ' ')"
