#!/usr/bin/env bash
# A look at the report as a browser draws it, for a person (CI checks the layout: //tools/report/unit:browser_test): headless Chromium,
# no network, a throwaway profile, one PNG.
#
#   tools/report/screenshot.sh [PAGE.html] [OUT.png] [WIDTHxHEIGHT]
#
# Default PAGE: the report of the test fixture (tools/report/unit/testdata/testlogs), written to a temp dir.
# Needs Debian's chromium (apt-get install -y chromium). Then look at OUT.png.
set -euo pipefail
cd "$(dirname "$0")/../.."

browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
  echo "screenshot.sh: no chromium on PATH; install it (apt-get install -y chromium) and rerun" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
page=${1:-}
if [[ -z "$page" ]]; then
  page="$tmp/report.html"
  python3 -m tools.report tools/report/unit/testdata/testlogs --out "$page" --no_bep >/dev/null
fi
[[ -f "$page" ]] || { echo "screenshot.sh: no page $page: write one first (python3 -m tools.report)" >&2; exit 1; }
out=${2:-$PWD/report.png}
size=${3:-1400x2000}

"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$tmp/profile" --hide-scrollbars --screenshot="$out" --window-size="${size/x/,}" \
  "file://$(realpath "$page")" >"$tmp/chromium.log" 2>&1 || { cat "$tmp/chromium.log" >&2; exit 1; }
[[ -s "$out" ]] || { echo "screenshot.sh: chromium wrote no $out; its log:" >&2; cat "$tmp/chromium.log" >&2; exit 1; }
echo "screenshot: $out ($size of $page)"
