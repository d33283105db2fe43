#!/usr/bin/env bash
# Downloads, here (a machine with PyPI), the wheels that tools/remote_exec/h200_remote_slice.sh installs
# on the GPU machine (Python 3.12, no index), into the git-ignored folder .whl-remote/ that the device
# call carries: `carry: [".whl-remote"]`. Hash-checked against third_party/remote_exec/requirements-h200.lock.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEST=.whl-remote
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF "/$DEST/" "$exclude" 2>/dev/null || echo "/$DEST/" >> "$exclude"
mkdir -p "$DEST"
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any \
    -d "$DEST" -r third_party/remote_exec/requirements-h200.lock
echo "h200_wheels: $(ls "$DEST"/*.whl | wc -l) wheels, $(du -cb "$DEST"/*.whl | tail -1 | awk '{printf "%.1f MiB", $1/1048576}') in $DEST (a device call carries at most 64 MiB with the work tree)"
