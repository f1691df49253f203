#!/usr/bin/env bash
# Install CRIU (checkpoint/restore in user space) for exact hibernation, without touching the host's
# packages: Debian bookworm's criu 3.17 fails on current kernels, so this makes a minbase root of
# Debian testing holding `criu` (4.2.x) and the helpers it executes (`ip` from iproute2 for network
# namespaces, nftables/iptables for network locking), in DIR (default target/criu), and a wrapper
# DIR/criu that runs that root's criu through that root's own dynamic loader and library path (under
# chroot its mount-tree checks fail: it must see the host's /proc and mount table).
# Debian packages only. CRIU itself is rebuilt from Debian's source of release $criu_version with the
# patches in scripts/criu-patches/ (each says why), in a throw-away build root of the same suite
# (compilers and -dev packages never enter DIR/root), and installed over the packaged binary.
# Idempotent: a stamp records the package list, the release and the patches; a matching stamp whose
# wrapper runs is a no-op; anything else is rebuilt from scratch. Needs root (debootstrap).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${LIZARD_CRIU_DIR:-$here/target/criu}}
suite=forky
packages="criu,iproute2,nftables,iptables"
mirror=${LIZARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
criu_version=4.2.1
criu_orig_sha256=29ec0ee09e296479fe7048c80980e8ef1d0684d0b0204c2b101dfea19f6725b9
build_packages="build-essential,pkgconf,libbsd-dev,libcap-dev,libgnutls28-dev,libnet1-dev,libnftables-dev,libnl-3-dev,libprotobuf-c-dev,libprotobuf-dev,protobuf-c-compiler,protobuf-compiler,uuid-dev,python3"
patches=$(cat "$here"/scripts/criu-patches/*.patch | sha256sum | cut -c1-16)
stamp="$suite $packages wrappers-2 criu-$criu_version patches-$patches"
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ] && "$dir/criu" --version >/dev/null 2>&1; then
  exit 0
fi
echo "installing CRIU (Debian $suite) into $dir" >&2
rm -rf "$dir"
mkdir -p "$dir"
chmod 0755 "$dir"
# Bookworm's debootstrap has no script for testing: it builds testing with its sid script.
debootstrap --variant=minbase --include="$packages" "$suite" "$dir/root" "$mirror" /usr/share/debootstrap/scripts/sid >"$dir/debootstrap.log" 2>&1 || {
  tail -n 30 "$dir/debootstrap.log" >&2
  exit 1
}
rm -rf "$dir/root/var/cache/apt/archives"/*.deb
# The patched CRIU: Debian's source of the release (checked against Debian's own checksum), built in
# a root of the same suite, so it links against exactly the libraries of DIR/root.
echo "building CRIU $criu_version with $(ls "$here"/scripts/criu-patches | wc -l) patch(es)" >&2
build=$dir/build
debootstrap --variant=minbase --include="$build_packages" "$suite" "$build" "$mirror" /usr/share/debootstrap/scripts/sid >"$dir/debootstrap-build.log" 2>&1 || {
  tail -n 30 "$dir/debootstrap-build.log" >&2
  exit 1
}
orig=criu_$criu_version.orig.tar.xz
curl -fsS --retry 3 -o "$build/$orig" "$mirror/pool/main/c/criu/$orig"
echo "$criu_orig_sha256  $build/$orig" | sha256sum -c --quiet -
mkdir "$build/src"
tar -xJf "$build/$orig" -C "$build/src"
for p in "$here"/scripts/criu-patches/*.patch; do
  patch -s -p1 -d "$build/src/criu-$criu_version" <"$p"
done
# protoc finds its own include directory through /proc/self/exe.
mount -t proc proc "$build/proc"
trap 'umount "$build/proc" 2>/dev/null || true' EXIT
chroot "$build" make -s -C "/src/criu-$criu_version" -j"$(nproc)" criu >"$dir/build.log" 2>&1 || {
  tail -n 30 "$dir/build.log" >&2
  exit 1
}
umount "$build/proc"
trap - EXIT
install -m 0755 "$build/src/criu-$criu_version/criu/criu" "$dir/root/usr/sbin/criu"
rm -rf "$build"
# Each program runs through the root's own loader and libraries (never the host's: the root's glibc
# is newer); DIR/bin holds the helpers criu executes, first on its PATH.
wrap() { # wrap NAME PROGRAM-INSIDE-THE-ROOT OUT
  cat >"$3" <<WRAP
#!/bin/sh
root=\$(dirname "\$(readlink -f "\$0")")/$4root
exec "\$root/lib64/ld-linux-x86-64.so.2" --argv0 "$1" --library-path "\$root/lib/x86_64-linux-gnu:\$root/usr/lib/x86_64-linux-gnu" "\$root$2" "\$@"
WRAP
  chmod 0755 "$3"
}
mkdir -p "$dir/bin"
for tool in ip nft iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore \
  iptables-legacy-save iptables-legacy-restore ip6tables-legacy-save ip6tables-legacy-restore; do
  wrap "$tool" "$(chroot "$dir/root" readlink -f "/usr/sbin/$tool")" "$dir/bin/$tool" ../
done
wrap criu /usr/sbin/criu "$dir/criu.real" ""
# The host's /proc and mount table stay visible (criu's checks need them; under chroot they fail).
cat >"$dir/criu" <<'WRAP'
#!/bin/sh
# criu of the Debian root next to this file (see scripts/criu.sh), its helpers first on PATH.
here=$(dirname "$(readlink -f "$0")")
PATH="$here/bin:$PATH" exec "$here/criu.real" "$@"
WRAP
chmod 0755 "$dir/criu"
"$dir/criu" --version >&2
echo "$stamp" >"$dir/.stamp"
echo "CRIU ready: $dir/criu" >&2
