#!/usr/bin/env bash
# Build and start the Lizard server on 127.0.0.1:8787. On first use it installs the host packages it
# needs and builds the code-interpreter-v1 template (with a progress bar); later starts are instant.
# Extra arguments go to `lizard serve` (see `lizard serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/criu.sh
cargo build --release --locked -p lizard -p lizard-agent
exec target/release/lizard serve "$@"
