#!/usr/bin/env bash
# stage_fixtures.sh [OUT]: copies the public Harbor task folders the design note catalogues, byte for
# byte from their upstream commits, into OUT (default build/harbor-fixtures, git-ignored), and checks
# each file against the sha256 the catalogue recorded (SHA256SUMS beside this script).
# Needs the upstream repositories fetched (the search tool's `fetch`) under /work/.mirror.
set -euo pipefail
OUT=${1:-build/harbor-fixtures}
MIRROR=${MIRROR:-/work/.mirror}
here=$(cd "$(dirname "$0")" && pwd)
COOKBOOK=e093c9a860b988d9d74901010ddddb9c7f124f92   # harbor-framework/harbor-cookbook, 2026-04-22
repo=$MIRROR/harbor-framework+harbor-cookbook/repo
dest=$OUT/harbor-cookbook
rm -rf "$dest"; mkdir -p "$dest"
for task in simple-task multi-reward skills dns-blacklisting multi-step mcp-tools multi-container; do
  git --git-dir="$repo" archive "$COOKBOOK" "harbor_cookbook/recipes/$task" | tar -x -C "$dest" --strip-components=2
done
git --git-dir="$repo" show "$COOKBOOK:LICENSE" >"$dest/LICENSE"
# harbor-framework/harbor's examples/tasks, from an upstream commit (d735849, 2026-05-30) held by the
# public fork 15735640198/harbor (harbor-framework/harbor itself could not be fetched here).
HARBOR=d735849896b16783990eaf21de843addec4e7c74
repo=$MIRROR/15735640198+harbor/repo
dest=$OUT/harbor
rm -rf "$dest"; mkdir -p "$dest"
for task in hello-world hello-alpine hello-user hello-workdir hello-healthcheck; do
  git --git-dir="$repo" archive "$HARBOR" "examples/tasks/$task" 2>/dev/null | tar -x -C "$dest" --strip-components=2
done
git --git-dir="$repo" show "$HARBOR:LICENSE" >"$dest/LICENSE"
[ -s "$here/SHA256SUMS" ] && (cd "$OUT" && sha256sum -c --quiet "$here/SHA256SUMS") && echo "staged $(find "$OUT" -type f | wc -l) files in $OUT, sha256 as catalogued"
