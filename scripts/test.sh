#!/usr/bin/env bash
# The one command that runs every test: prepares the kernel environment if needed, then runs the
# workspace's unit and end-to-end tests (which start the real agent and real kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/kernel-env.sh
export LIZARD_KERNEL_ENV="$PWD/target/kernel-env"
cargo test --workspace --locked "$@"
