#!/usr/bin/env bash
# Installs everything sleepwake needs on a fresh Debian 12 / Ubuntu machine, then runs the main job.
#
#   tools/setup.sh                 install, then: on a GPU runner the whole matrix (tools/run_matrix.sh);
#                                  on a host without a GPU every test that can run there (tools/test.sh)
#   tools/setup.sh --install-only  install only (what .ci/run uses before tools/test.sh)
#   tools/setup.sh ARGS...         ARGS go to Bazel (e.g. --config=disk-cache, targets)
#
# Installs: Bazel (Debian's bazel-bootstrap 4.2.3) unless one is on PATH, nginx (the remote-cache test),
# chromium (the report's browser test), npm's buildifier at /opt/sleepwake/npm (//tools/lint, npm ci of
# third_party/npm, integrity-checked), and the suite's venv at /opt/sleepwake/venv from the hashed lock
# (pip --require-hashes). The venv
# sits at a fixed path because its interpreter path is part of every Python action's cache key.
# On a GPU runner it also installs the runner overlay (/opt/sleepwake/runner-overlay: the lock's
# packages that vLLM does not bring, e.g. pytest and absl-py) for the Python that has vLLM
# (SLEEPWAKE_GPU_PYTHON, default: the python3 on PATH; SLEEPWAKE_WHEELHOUSE: wheels for a runner
# without an index), writes /opt/sleepwake/gpu-python, a wrapper running that Python with the overlay,
# and points --config=gpu at it in user.bazelrc. Another vLLM: rerun with another SLEEPWAKE_GPU_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=/opt/sleepwake/venv
LOCK=third_party/python/requirements.lock
GPU_PYTHON_WRAPPER=/opt/sleepwake/gpu-python
OVERLAY=/opt/sleepwake/runner-overlay
NPM_TOOLS=/opt/sleepwake/npm
install_only=0
[[ "${1:-}" == "--install-only" ]] && { install_only=1; shift; }

say() { echo "setup: $*"; }
die() { echo "setup: ERROR: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (apt-get and /opt/sleepwake need it): sudo tools/setup.sh"

gpu_count=0
if command -v nvidia-smi >/dev/null; then
  gpu_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
# A GPU runner may have no package mirror: there the CPU-side pieces (nginx for the remote-cache
# test, the suite's venv) are optional, since the matrix runs under the runner's own Python.
optional() { if ((gpu_count > 0)); then say "WARNING: $* (skipped: only CPU tests need it)"; else die "$*"; fi; }

# What only CPU tests use (nginx, the CPU venv with its vLLM, the engine tier's release overlays,
# BuildGrid) is skipped on a GPU runner that cannot reach the package index: trying costs minutes of
# timeouts and the matrix needs none of it.
cpu_pieces=1
if ((gpu_count > 0)) && ! timeout 10 python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=8)' 2>/dev/null; then
  cpu_pieces=0
  say "GPU runner without a package index (pypi.org unreachable): installing what the matrix needs only;"
  say "skipped: nginx, chromium, $VENV, $NPM_TOOLS, the engine tier's release overlays and BuildGrid (CPU tests only)"
fi

missing=()
command -v bazel >/dev/null || missing+=(bazel-bootstrap)
if ((cpu_pieces)); then
  [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
  command -v chromium >/dev/null || missing+=(chromium)  # //tools/report/unit:browser_test draws the report
  command -v npm >/dev/null || missing+=(npm)  # buildifier, from npm's registry (third_party/npm)
  [[ -x /usr/bin/python3 ]] || missing+=(python3)
  /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
fi
if ((${#missing[@]})); then
  say "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o Acquire::Retries=1 -o Acquire::http::Timeout=20)
  if apt-get "${apt_opts[@]}" update -q && apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "${missing[@]}"; then
    :
  elif command -v bazel >/dev/null; then
    optional "apt-get could not install ${missing[*]}"
  else
    die "apt-get could not install ${missing[*]}: this host must reach the Debian package mirror"
  fi
fi
# nginx is installed for its binary only; the remote-cache test starts its own on loopback.
if command -v systemctl >/dev/null && systemctl is-active --quiet nginx 2>/dev/null; then
  systemctl stop nginx || true
fi

if ((cpu_pieces)); then
  lock_sha=$(sha256sum "$LOCK" | cut -d' ' -f1)
  if [[ "$(cat "$VENV/.lock-sha256" 2>/dev/null)" != "$lock_sha" ]]; then
    say "building $VENV from $LOCK (sha256 ${lock_sha:0:16})"
    rm -rf "$VENV"
    if /usr/bin/python3 -m venv "$VENV" &&
       "$VENV/bin/pip" install -q --disable-pip-version-check --retries 2 --no-deps --require-hashes -r "$LOCK"; then
      echo "$lock_sha" > "$VENV/.lock-sha256"
    else
      optional "could not build $VENV from $LOCK (is PyPI reachable?)"
    fi
  else
    say "$VENV is current (lock sha256 ${lock_sha:0:16})"
  fi

  # buildifier for //tools/lint: @bazel/buildifier carries its binaries in the package (no install
  # script downloads anything), pinned with its integrity hash in third_party/npm/package-lock.json.
  npm_sha=$(cat third_party/npm/package.json third_party/npm/package-lock.json | sha256sum | cut -d' ' -f1)
  if [[ "$(cat "$NPM_TOOLS/.lock-sha256" 2>/dev/null)" != "$npm_sha" ]]; then
    say "installing $NPM_TOOLS from third_party/npm (sha256 ${npm_sha:0:16})"
    rm -rf "$NPM_TOOLS" && mkdir -p "$NPM_TOOLS" && cp third_party/npm/package.json third_party/npm/package-lock.json "$NPM_TOOLS/"
    if (cd "$NPM_TOOLS" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); then
      echo "$npm_sha" > "$NPM_TOOLS/.lock-sha256"
    else
      optional "could not install $NPM_TOOLS with npm ci (is registry.npmjs.org reachable?)"
    fi
  fi

  # BuildGrid and PostgreSQL for the remote-execution test (its own hashed lock and venv).
  tools/remote_exec/install.sh ||
    optional "tools/remote_exec/install.sh failed: //tools/remote_exec/unit:remote_exec_test needs BuildGrid and PostgreSQL"

  # Other vLLM releases for the engine tier on CPU (//tests/engine's per-release targets): each a
  # hash-checked overlay on the venv holding the pins that release changes (tools/deps/version_overlay.py
  # says which), put first on the path by those targets.
  for overlay_lock in third_party/python/vllm-*.overlay.lock; do
    release=$(basename "$overlay_lock" .overlay.lock)
    target=/opt/sleepwake/$release
    sha=$(sha256sum "$overlay_lock" | cut -d' ' -f1)
    [[ "$(cat "$target/.lock-sha256" 2>/dev/null)" == "$sha" ]] && continue
    say "installing $target from $overlay_lock (sha256 ${sha:0:16})"
    rm -rf "$target"
    if [[ -x "$VENV/bin/pip" ]] && "$VENV/bin/pip" install -q --disable-pip-version-check --retries 2 --no-deps \
         --require-hashes --target "$target" -r "$overlay_lock"; then
      echo "$sha" > "$target/.lock-sha256"
    else
      optional "could not install $target from $overlay_lock (is PyPI reachable?)"
    fi
  done
fi

if ((gpu_count > 0)); then
  gpu_python=${SLEEPWAKE_GPU_PYTHON:-$(command -v python3)}
  "$gpu_python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' ||
    die "$gpu_python cannot import vllm: install vLLM for it, or set SLEEPWAKE_GPU_PYTHON to a Python that has it"
  # The suite's own packages (pytest, absl-py, ...) come from the lock, hash-checked, as an overlay
  # first on the runner's path; what vLLM itself needs stays the runner's, except what the overlay's
  # packages need and this runner's vLLM came without (tools/deps/runner_overlay.py: --with_missing,
  # asked of the runner's Python without the overlay).
  overlay_lock=$(mktemp)
  "$gpu_python" -m tools.deps.runner_overlay "$LOCK" --with_missing > "$overlay_lock" ||
    die "could not derive the runner overlay from $LOCK"
  overlay_sha=$(sha256sum "$overlay_lock" | cut -d' ' -f1)
  if [[ "$(cat "$OVERLAY/.lock-sha256" 2>/dev/null)" != "$overlay_sha" ]]; then
    say "installing the runner overlay $OVERLAY for $gpu_python (${SLEEPWAKE_WHEELHOUSE:+wheels from $SLEEPWAKE_WHEELHOUSE, }sha256 ${overlay_sha:0:16})"
    rm -rf "$OVERLAY"
    # SLEEPWAKE_WHEELHOUSE: a folder of wheels for a runner without a package index; hashes still apply.
    "$gpu_python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes --target "$OVERLAY" \
        ${SLEEPWAKE_WHEELHOUSE:+--no-index --find-links "$SLEEPWAKE_WHEELHOUSE"} -r "$overlay_lock" ||
      die "could not install the runner overlay with $gpu_python -m pip (no index? set SLEEPWAKE_WHEELHOUSE to a folder of the wheels in $overlay_lock)"
    echo "$overlay_sha" > "$OVERLAY/.lock-sha256"
  else
    say "$OVERLAY is current (sha256 ${overlay_sha:0:16})"
  fi
  rm -f "$overlay_lock"
  # Bazel runs tests with a clean environment; the wrapper carries the PYTHONPATH / LD_LIBRARY_PATH
  # that make vLLM importable here, at one fixed path (it is part of the cells' cache keys).
  cat > "$GPU_PYTHON_WRAPPER" <<WRAP
#!/bin/sh
# Written by tools/setup.sh: the GPU runner's Python with vLLM, for --config=gpu.
# The runner overlay first, then the runner's own path, then what Bazel's stub put there (runfiles).
export PYTHONPATH="$OVERLAY${PYTHONPATH:+:$PYTHONPATH}\${PYTHONPATH:+:\$PYTHONPATH}"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$gpu_python" "\$@"
WRAP
  chmod +x "$GPU_PYTHON_WRAPPER"
  # Everything a GPU cell imports, through the wrapper: a runner without one fails here, not in a cell.
  missing_modules=$("$GPU_PYTHON_WRAPPER" -c 'import importlib, importlib.util
mods = ["pytest", "absl", "pynvml", "numpy", "requests", "tokenizers", "safetensors", "psutil", "vllm", "torch"]
missing = [m for m in mods if importlib.util.find_spec(m) is None]
# Found is not importable: ray (imported by the weight-transfer push of vLLM) needs packages of its own.
for m in ["ray"]:
    try:
        importlib.import_module(m)
    except ImportError as e:
        missing.append(f"{m} ({e})")
print(" ".join(missing))') || die "$GPU_PYTHON_WRAPPER does not run"
  [[ -z "$missing_modules" ]] ||
    die "$gpu_python (with the overlay) cannot import: $missing_modules; vLLM's own dependencies must come with the runner's vLLM, the overlay's from the index or SLEEPWAKE_WHEELHOUSE (python3 -m tools.deps.wheelhouse DIR)"
  line="build:gpu --repo_env=SLEEPWAKE_GPU_PYTHON=$GPU_PYTHON_WRAPPER"
  grep -qxF "$line" user.bazelrc 2>/dev/null || echo "$line" >> user.bazelrc
  say "GPU runner: $gpu_count GPU(s); --config=gpu uses $GPU_PYTHON_WRAPPER -> $gpu_python + $OVERLAY"
fi

((install_only)) && { say "installed"; exit 0; }

if ((gpu_count > 0)); then
  exec tools/run_matrix.sh "$@"
fi
# The count comes from the matrix's one spec (tools/matrix.bzl), so it cannot fall behind a new class.
cells=$(python3 -c 'from tools.matrix import EXECUTION_MODES as m, RUNNERS as r, SLEEP_WAKE_CLASSES as c
print(len(r) * len(m) * len(c))' 2>/dev/null || echo "the")
say "no NVIDIA GPU on this host: running every CPU test; the $cells GPU cells of //tests/sleep_wake are"
say "left out (tag gpu) because they start real vLLM servers. Run them on a GPU runner: tools/setup.sh there."
exec tools/test.sh "$@"
