#!/usr/bin/env bash
# Build and start the Lizard agent on this machine (outside a sandbox), preparing the kernel
# environment (Python venv with IPython & co., acorn for Node) on first use.
# Extra arguments go to lizard-agent, e.g. --listen 127.0.0.1:9000 --socket /tmp/agent.sock
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/kernel-env.sh
cargo build --release --locked -p lizard-agent
exec target/release/lizard-agent --kernel-env "$PWD/target/kernel-env" "$@"
