#!/usr/bin/env bash
# `make vendor` (online): npm tarballs of Claude Code VERSION and its linux-x64 native package into
# OUT, with a sha256 lock. Skipped when the lock matches.
set -euo pipefail
VERSION=${1:?claude code version}
OUT=${2:-vendor/npm}
PKGS=("@anthropic-ai/claude-code@$VERSION" "@anthropic-ai/claude-code-linux-x64@$VERSION")
if [ "$(cat "$OUT/.inputs" 2>/dev/null)" = "${PKGS[*]}" ] && (cd "$OUT" && sha256sum --quiet -c lock.txt) 2>/dev/null; then
  echo "vendor-npm: $OUT is up to date"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "vendor-npm: npm pack ${PKGS[*]}"
# Its own throwaway cache: ~/.npm would keep a second copy of the 180 MB binary.
npm pack --silent --cache "$tmp/.npm-cache" --pack-destination "$tmp" "${PKGS[@]}" >/dev/null
rm -rf "$tmp/.npm-cache"
chmod 755 "$tmp" && rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && mv "$tmp" "$OUT" && trap - EXIT
(cd "$OUT" && sha256sum -- *.tgz >lock.txt)
echo "${PKGS[*]}" >"$OUT/.inputs"
echo "vendor-npm: $OUT ($(du -sh "$OUT" | cut -f1))"
