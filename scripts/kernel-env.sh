#!/usr/bin/env bash
# Prepare a kernel environment directory for the Lizard agent:
#   DIR/venv           Python venv with kernels/python/requirements.txt
#   DIR/node_modules   npm packages of kernels/js/package.json
# Idempotent: a stamp file records the hash of both specs; a matching stamp is a no-op.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${LIZARD_KERNEL_ENV:-$here/target/kernel-env}}
python=${LIZARD_BUILD_PYTHON:-python3}
spec_hash=$(cat "$here/kernels/python/requirements.txt" "$here/kernels/js/package.json" | sha256sum | cut -c1-16)
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$spec_hash" ]; then
  exit 0
fi
echo "preparing kernel environment in $dir" >&2
# Built in place (venvs record their absolute path); the stamp is written last,
# so an interrupted build is redone from scratch next time.
rm -rf "$dir"
mkdir -p "$dir"
"$python" -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install --quiet --progress-bar off -r "$here/kernels/python/requirements.txt"
cp "$here/kernels/js/package.json" "$dir/package.json"
(cd "$dir" && npm install --silent --no-audit --no-fund --omit=dev >/dev/null)
echo "$spec_hash" > "$dir/.stamp"
echo "kernel environment ready: $dir" >&2
