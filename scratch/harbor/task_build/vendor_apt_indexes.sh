#!/usr/bin/env bash
# vendor_apt_indexes.sh OUT: the signed apt indexes (InRelease + Packages.xz, also under by-hash/) of
# the suites veri/os-base's sources.list names, as the mirror serves them, into OUT/<host>/<path>.
# With the .debs veri's vendor-debs.sh collects, a proxy can then answer an unmodified
# `apt-get update && apt-get install` in a task's Dockerfile offline (build_proxy.py).
set -euo pipefail
OUT=$1
get() { mkdir -p "$OUT/$(dirname "$1")"; curl -fsS "http://$1" -o "$OUT/$1"; }
for suite in debian/dists/bookworm debian/dists/bookworm-updates debian-security/dists/bookworm-security; do
  get "deb.debian.org/$suite/InRelease"
  get "deb.debian.org/$suite/main/binary-amd64/Packages.xz"
  sha=$(sha256sum "$OUT/deb.debian.org/$suite/main/binary-amd64/Packages.xz" | cut -d' ' -f1)
  mkdir -p "$OUT/deb.debian.org/$suite/main/binary-amd64/by-hash/SHA256"
  cp "$OUT/deb.debian.org/$suite/main/binary-amd64/Packages.xz" "$OUT/deb.debian.org/$suite/main/binary-amd64/by-hash/SHA256/$sha"
done
du -sh "$OUT"
