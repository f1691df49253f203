#!/usr/bin/env bash
# The one command that runs every test: installs missing host packages, prepares the kernel
# environment and the code-interpreter-v1 template (both cached), then runs the workspace's unit and
# end-to-end tests (which start the real agent, the real server, real sandboxes and kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/kernel-env.sh
export LIZARD_KERNEL_ENV="$PWD/target/kernel-env"
cargo build --workspace --locked
target/debug/lizard template build code-interpreter-v1 --data-dir "$PWD/target/lizard-data"
export LIZARD_TEMPLATES_FROM="$PWD/target/lizard-data"
cargo test --workspace --locked "$@"
