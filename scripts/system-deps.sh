#!/usr/bin/env bash
# Install the Debian packages Lizard needs on the host (only what is missing): debootstrap builds
# the sandbox template's root filesystem; e2fsprogs (mkfs.ext4) makes each sandbox's disk image and
# each volume; mount (util-linux's mount and umount) loop-mounts volumes; slirp4netns and nftables
# give sandboxes internet egress when a create asks for it. Needs root (sandboxes need it anyway).
set -euo pipefail
need=()
for pkg in debootstrap e2fsprogs mount slirp4netns nftables; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
