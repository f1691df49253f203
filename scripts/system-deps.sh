#!/usr/bin/env bash
# Install the Debian packages Lizard needs on the host (only what is missing): debootstrap builds
# the sandbox template's root filesystem; e2fsprogs (mkfs.ext4) makes each sandbox's disk image and
# each volume; mount (util-linux's mount and umount) loop-mounts volumes; nftables (nft) and
# iproute2 (ip) point an egress sandbox's network namespace at the host's relay; chromium is the
# headless browser the web console's end-to-end tests drive (tests/console, through playwright-core:
# no browser download). Needs root (sandboxes need it anyway).
set -euo pipefail
need=()
for pkg in debootstrap e2fsprogs mount nftables iproute2 chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
