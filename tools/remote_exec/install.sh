#!/usr/bin/env bash
# Installs what //tools/remote_exec/unit:remote_exec_test needs: Debian's PostgreSQL (the BuildGrid
# scheduler's database) and BuildGrid in its own venv, /opt/sleepwake/remote-exec-venv, built from the
# hashed lock third_party/remote_exec/requirements.lock with pip --require-hashes. Idempotent: the venv
# is rebuilt only when the lock's sha256 changes (the same key tools/setup.sh uses for the main venv).
# Run as root; tools/setup.sh calls it.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=/opt/sleepwake/remote-exec-venv
LOCK=third_party/remote_exec/requirements.lock
PG_BIN=/usr/lib/postgresql/15/bin

say() { echo "remote_exec/install: $*"; }
die() { echo "remote_exec/install: ERROR: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (apt-get and /opt/sleepwake need it): sudo $0"

missing=()
[[ -x $PG_BIN/postgres && -x $PG_BIN/initdb ]] || missing+=(postgresql-15)
[[ -x /usr/bin/python3 ]] || missing+=(python3)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v unshare >/dev/null || missing+=(util-linux)
if ((${#missing[@]})); then
  say "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o Acquire::Retries=1 -o Acquire::http::Timeout=20)
  apt-get "${apt_opts[@]}" update -q &&
    apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "${missing[@]}" ||
    die "apt-get could not install ${missing[*]}: this host must reach the Debian package mirror"
fi
# Only the binaries are used: the test starts its own server on loopback with a fresh cluster.
if command -v systemctl >/dev/null && systemctl is-active --quiet postgresql 2>/dev/null; then
  systemctl stop postgresql || true
fi

lock_sha=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [[ "$(cat "$VENV/.lock-sha256" 2>/dev/null)" == "$lock_sha" ]]; then
  say "$VENV is current (lock sha256 ${lock_sha:0:16})"
  exit 0
fi
say "building $VENV from $LOCK (sha256 ${lock_sha:0:16})"
rm -rf "$VENV"
/usr/bin/python3 -m venv "$VENV" || die "could not create $VENV with /usr/bin/python3 -m venv"
"$VENV/bin/pip" install -q --disable-pip-version-check --retries 2 --no-deps --require-hashes -r "$LOCK" ||
  die "could not install $LOCK into $VENV (is PyPI reachable?)"
"$VENV/bin/python3" -c 'import buildgrid.server.app, psycopg2' ||
  die "$VENV cannot import buildgrid and psycopg2 after installing $LOCK"
echo "$lock_sha" > "$VENV/.lock-sha256"
say "installed BuildGrid into $VENV"
