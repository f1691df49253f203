#!/usr/bin/env bash
# The one command that runs every test: installs missing host packages, prepares the kernel
# environment, the code-interpreter-v1 template and the SDK test environments (all cached), then runs
# the workspace's unit and end-to-end tests (real agent, server, sandboxes and kernels) and the SDK
# suites against a real server. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/system-deps.sh
scripts/kernel-env.sh
scripts/criu.sh
scripts/test-registries.sh
export LIZARD_KERNEL_ENV="$root/target/kernel-env"
cargo build --workspace --locked
target/debug/lizard template build code-interpreter-v1 --data-dir "$root/target/lizard-data"
export LIZARD_TEMPLATES_FROM="$root/target/lizard-data"
export LIZARD_BIN="$root/target/debug/lizard"
# CRIU was installed above: its end-to-end tests fail rather than skip should it be missing.
export LIZARD_REQUIRE_CRIU=1
# The local package registries (PyPI, npm) installed above, for the package-install tests.
export LIZARD_TEST_PYPISERVER="$root/target/test-registries/pypiserver-venv/bin/pypi-server"
export LIZARD_TEST_VERDACCIO="$root/target/test-registries/verdaccio/node_modules/.bin/verdaccio"
export LIZARD_TEST_WHEELS="$root/target/test-registries/wheels"

echo "== Rust: unit and end-to-end tests"
cargo test --workspace --locked "$@"

echo "== Python SDK"
if [ ! -x target/sdk-venv/bin/python ]; then python3 -m venv target/sdk-venv; fi
target/sdk-venv/bin/python -m pip install --quiet --disable-pip-version-check -r sdk/python/requirements-test.txt
# Reinstalled every run: the tests import the installed package, which must be this tree's.
target/sdk-venv/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./sdk/python
target/sdk-venv/bin/python -m pytest sdk/python/tests -q -p no:cacheprovider

echo "== TypeScript SDK"
(cd sdk/typescript && npm ci --no-audit --no-fund --silent && npm test)

echo "== MCP (the official MCP client SDKs, pinned, against lizard serve and lizard mcp)"
if [ ! -x target/mcp-venv/bin/python ]; then python3 -m venv target/mcp-venv; fi
target/mcp-venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/mcp/requirements.txt
(cd tests/mcp && npm ci --no-audit --no-fund --silent && npm test)

echo "== Web console (console/dist is the build of console/src; the console in headless Chromium against lizard serve)"
(cd console && npm ci --no-audit --no-fund --silent && npm test)
(cd tests/console && npm ci --no-audit --no-fund --silent && npm test)

echo "== E2B compatibility (E2B's own SDKs, pinned, unmodified)"
if [ ! -x target/e2b-venv/bin/python ]; then python3 -m venv target/e2b-venv; fi
target/e2b-venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/e2b/requirements.txt
# Older SDKs as people have pinned them (tests/e2b/versions/): a venv or node_modules each.
for req in tests/e2b/versions/python-*.txt; do
  venv="target/e2b-venv-$(basename "$req" .txt)"
  if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
done
for dir in tests/e2b/versions/js-*/; do (cd "$dir" && npm ci --no-audit --no-fund --silent); done
(cd tests/e2b && npm ci --no-audit --no-fund --silent && npm test)
