#!/usr/bin/env bash
# `make vendor` (online): the OS base as a rootfs tarball, vendor/os/rootfs.tar — debootstrap
# --variant=minbase of Debian $SUITE from the host's own apt mirror, with security updates and the
# few packages every veri image needs. `make images` imports it offline. Skipped when up to date.
set -euo pipefail
SUITE=${SUITE:-bookworm}
OUT=${1:-vendor/os}
INCLUDE=python3,python3-venv,ca-certificates,tini,procps,curl
read -r MIRROR SECURITY < <("$(dirname "$0")/debian-mirror.sh" "$SUITE")
# The mirror is not an input: the same tarball serves any machine (an air-gapped one has none).
inputs="suite=$SUITE include=$INCLUDE"
if [ -s "$OUT/rootfs.tar" ] && [ "$(cat "$OUT/.inputs" 2>/dev/null)" = "$inputs" ]; then
  echo "vendor-os: $OUT/rootfs.tar is up to date"; exit 0
fi
[ "$(id -u)" = 0 ] || { echo "vendor-os: debootstrap needs root (or set BASE_OS_IMAGE)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "vendor-os: install debootstrap (make docker)" >&2; exit 1; }

mkdir -p "$OUT"
root=$(mktemp -d /var/tmp/veri-rootfs.XXXXXX)
trap 'umount -R "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
echo "vendor-os: debootstrap $SUITE from $MIRROR (a few minutes)"
debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$root" "$MIRROR" >"$OUT/debootstrap.log" 2>&1 \
  || { tail -20 "$OUT/debootstrap.log" >&2; exit 1; }

{
  echo "deb $MIRROR $SUITE main"
  echo "deb $MIRROR $SUITE-updates main"
  [ "$SECURITY" = - ] || echo "deb $SECURITY $SUITE-security main"
} >"$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
chroot "$root" sh -ec 'export DEBIAN_FRONTEND=noninteractive
  apt-get update -q && apt-get -y -q upgrade && apt-get clean' >>"$OUT/debootstrap.log" 2>&1 \
  || { tail -20 "$OUT/debootstrap.log" >&2; exit 1; }
umount "$root/proc"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log
: >"$root/etc/resolv.conf"
echo "$SUITE" >"$root/etc/hostname"

tar --numeric-owner --xattrs -C "$root" -cf "$OUT/rootfs.tar.tmp" .
mv "$OUT/rootfs.tar.tmp" "$OUT/rootfs.tar"
echo "$inputs" >"$OUT/.inputs"
echo "mirror=$MIRROR security=$SECURITY date=$(date -u +%FT%TZ)" >"$OUT/info.txt"
echo "vendor-os: $OUT/rootfs.tar ($(du -h "$OUT/rootfs.tar" | cut -f1))"
