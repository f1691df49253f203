#!/usr/bin/env bash
# Install the package registries that the end-to-end tests run on loopback, so that no test needs
# the internet: pypiserver (PyPI) into DIR/pypiserver-venv, from the pinned and hashed
# tests/registries/pypiserver/requirements.txt, and verdaccio (npm) into DIR/verdaccio with `npm ci`
# from the committed tests/registries/verdaccio/package{,-lock}.json (verdaccio 6.8.0: later
# releases want Node 22; node-fetch is overridden to 2.7.0, with which it installs). DIR defaults to
# target/test-registries; the real wheels of tests/registries/pypiserver/uv.txt into DIR/wheels
# (served by the tests' pypiserver next to the ones they build). Idempotent: each part keeps a stamp of the files it was installed from; a
# matching stamp whose program runs is a no-op, anything else is installed again from scratch.
# The tests find the programs through LIZARD_TEST_PYPISERVER and LIZARD_TEST_VERDACCIO (exported by
# scripts/test.sh; crates/lizard/tests/common/registries.rs).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$here/target/test-registries}
mkdir -p "$dir"

venv=$dir/pypiserver-venv
req=$here/tests/registries/pypiserver/requirements.txt
stamp="python-$(python3 -c 'import sys; print(sys.version.split()[0])') $(sha256sum <"$req" | cut -c1-16)"
if ! { [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$stamp" ] &&
  "$venv/bin/pypi-server" --version >/dev/null 2>&1; }; then
  echo "installing pypiserver into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --no-input --disable-pip-version-check --progress-bar off \
    --require-hashes -r "$req" >"$dir/pip.log" 2>&1 || {
    tail -n 30 "$dir/pip.log" >&2
    exit 1
  }
  echo "$stamp" >"$venv/.stamp"
fi

# Real wheels the tests serve besides the ones they build (uv), pinned and hashed.
wheels=$dir/wheels
req=$here/tests/registries/pypiserver/uv.txt
stamp=$(sha256sum <"$req" | cut -c1-16)
if ! { [ -f "$wheels/.stamp" ] && [ "$(cat "$wheels/.stamp")" = "$stamp" ]; }; then
  echo "downloading the test wheels into $wheels" >&2
  rm -rf "$wheels"
  mkdir -p "$wheels"
  "$venv/bin/python" -m pip download --quiet --no-input --disable-pip-version-check \
    --progress-bar off --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
    --python-version 3.14 --require-hashes -r "$req" -d "$wheels" >"$dir/wheels.log" 2>&1 || {
    tail -n 30 "$dir/wheels.log" >&2
    exit 1
  }
  echo "$stamp" >"$wheels/.stamp"
fi

vd=$dir/verdaccio
src=$here/tests/registries/verdaccio
stamp="node-$(node --version) $(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)"
if ! { [ -f "$vd/.stamp" ] && [ "$(cat "$vd/.stamp")" = "$stamp" ] &&
  "$vd/node_modules/.bin/verdaccio" --version >/dev/null 2>&1; }; then
  echo "installing verdaccio into $vd" >&2
  rm -rf "$vd"
  mkdir -p "$vd"
  cp "$src/package.json" "$src/package-lock.json" "$vd/"
  (cd "$vd" && npm ci --no-audit --no-fund --no-update-notifier --loglevel=error --cache "$vd/.npm-cache") \
    >"$dir/npm.log" 2>&1 </dev/null || {
    tail -n 30 "$dir/npm.log" >&2
    exit 1
  }
  rm -rf "$vd/.npm-cache"
  echo "$stamp" >"$vd/.stamp"
fi
