#!/usr/bin/env bash
# `make vendor` (online): vendor-npm.sh OUT PKG... — npm tarballs of the packages (a CLI and its
# linux-x64 native package: Claude Code into vendor/npm, Codex into vendor/npm-codex) into OUT, with
# a sha256 lock. Skipped when the lock matches.
set -euo pipefail
OUT=${1:?out folder}
shift
PKGS=("${@:?packages}")
if [ "$(cat "$OUT/.inputs" 2>/dev/null)" = "${PKGS[*]}" ] && (cd "$OUT" && sha256sum --quiet -c lock.txt) 2>/dev/null; then
  echo "vendor-npm: $OUT is up to date"; exit 0
fi
"$(dirname "$0")/../host-packages.sh" "make vendor" "npm=command -v npm"  # Debian's npm: node and npm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "vendor-npm: npm pack ${PKGS[*]}"
# Its own throwaway cache: ~/.npm would keep a second copy of the native binaries (150-300 MB).
npm pack --silent --cache "$tmp/.npm-cache" --pack-destination "$tmp" "${PKGS[@]}" >/dev/null
rm -rf "$tmp/.npm-cache"
chmod 755 "$tmp" && rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && mv "$tmp" "$OUT" && trap - EXIT
(cd "$OUT" && sha256sum -- *.tgz >lock.txt)
echo "${PKGS[*]}" >"$OUT/.inputs"
echo "vendor-npm: $OUT ($(du -sh "$OUT" | cut -f1))"
