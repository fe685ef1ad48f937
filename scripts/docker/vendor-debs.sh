#!/usr/bin/env bash
# vendor-debs.sh OUT PKG... — `make vendor-*` (online): the Debian packages PKG and whatever of their
# dependencies the OS base lacks, as .deb files into OUT, with OUT/packages.txt (install order does
# not matter: `dpkg -i` takes them together) and OUT/lock.txt. An image installs them offline from
# the build's loopback server (e.g. libnuma1: vLLM's CPU kernels link it; os-base stays minimal).
# "What the OS base lacks" is read from the vendored rootfs's dpkg status (vendor/os/rootfs.tar),
# or from BASE_OS_IMAGE's; packages come from the same Debian suite as the OS base (debian-mirror.sh).
# RECOMMENDS=true also takes their Recommends (what a plain `apt-get install` in a Dockerfile installs:
# `veri tasks vendor`). Skipped when the inputs are unchanged and the lock matches.
set -euo pipefail
OUT=${1:?out dir}; shift
[ $# -gt 0 ] || { echo "usage: vendor-debs.sh OUT PKG..." >&2; exit 2; }
SUITE=${SUITE:-bookworm}
VENDOR=${VENDOR:-vendor}
RECOMMENDS=${RECOMMENDS:-false}
here=$(dirname "$0")

mkdir -p "$(dirname "$OUT")"
tmp=$(realpath "$(mktemp -d "${OUT%/}.tmp.XXXXXX")")  # absolute: apt resolves relative paths in /etc/apt
trap 'rm -rf "$tmp"' EXIT
if [ -n "${BASE_OS_IMAGE:-}" ]; then
  docker run --rm --network none --entrypoint cat "$BASE_OS_IMAGE" /var/lib/dpkg/status >"$tmp/status"
else
  [ -s "$VENDOR/os/rootfs.tar" ] || { echo "vendor-debs: no $VENDOR/os/rootfs.tar: run make vendor-os first" >&2; exit 1; }
  tar -xOf "$VENDOR/os/rootfs.tar" ./var/lib/dpkg/status >"$tmp/status"
fi
inputs=$(printf 'suite=%s packages=%s base=%s%s\n' "$SUITE" "$*" "$(sha256sum <"$tmp/status" | cut -c1-16)" "$([ "$RECOMMENDS" = false ] || echo " recommends")")
if [ "$(cat "$OUT/.inputs" 2>/dev/null)" = "$inputs" ] && (cd "$OUT" && sha256sum --quiet -c lock.txt) 2>/dev/null; then
  echo "vendor-debs: $OUT is up to date"; exit 0
fi

read -r MIRROR SECURITY < <("$here/debian-mirror.sh" "$SUITE")
mkdir -p "$tmp/lists/partial" "$tmp/archives/partial"
{
  echo "deb $MIRROR $SUITE main"
  echo "deb $MIRROR $SUITE-updates main"
  [ "$SECURITY" = - ] || echo "deb $SECURITY $SUITE-security main"
} >"$tmp/sources.list"
# The host's apt, pointed at the OS base's suite and dpkg status; nothing of the host's apt state is touched.
apt=(apt-get -q -o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o "Dir::State::Lists=$tmp/lists" -o "Dir::State::status=$tmp/status"
  -o "Dir::State::extended_states=$tmp/extended_states" -o "Dir::Cache=$tmp" -o "Dir::Cache::archives=$tmp/archives"
  -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Architecture=amd64 -o APT::Architectures::=amd64
  -o APT::Install-Recommends=$RECOMMENDS -o APT::Sandbox::User=root -o Debug::NoLocking=1)
echo "vendor-debs: $OUT ($*, from $MIRROR $SUITE)"
"${apt[@]}" update >"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; exit 1; }
"${apt[@]}" install -y --download-only "$@" >>"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; exit 1; }
mkdir "$tmp/out"
mv "$tmp"/archives/*.deb "$tmp/out/"
# apt names epoch'd versions with %3a, which would be unquoted on the way over HTTP: use _.
for f in "$tmp"/out/*%3a*.deb; do [ -e "$f" ] && mv "$f" "${f//%3a/_}"; done
(cd "$tmp/out" && ls -- *.deb >packages.txt && sha256sum -- *.deb >lock.txt)
printf '%s\n' "$inputs" >"$tmp/out/.inputs"
chmod 755 "$tmp/out"
rm -rf "$OUT" && mv "$tmp/out" "$OUT"
echo "vendor-debs: $OUT ($(wc -l <"$OUT/packages.txt") packages, $(du -sh "$OUT" | cut -f1))"
