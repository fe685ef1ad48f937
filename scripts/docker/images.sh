#!/usr/bin/env bash
# `make images` (offline): veri/os-base (or $BASE_OS_IMAGE), veri/base, veri/base-claude-agent,
# veri/runtime — from vendor/ only. Each is skipped when its inputs have not changed.
set -euo pipefail
here=$(dirname "$0")
VENDOR=${VENDOR:-vendor}
PREFIX=${IMAGE_PREFIX:-veri}
CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION:?}

if [ -n "${BASE_OS_IMAGE:-}" ]; then
  os=$BASE_OS_IMAGE
  docker image inspect "$os" >/dev/null 2>&1 || docker pull "$os" \
    || { echo "images: BASE_OS_IMAGE=$os is neither local nor pullable (docker load it first)" >&2; exit 1; }
else
  os=$PREFIX/os-base
  [ -s "$VENDOR/os/rootfs.tar" ] || { echo "images: no $VENDOR/os/rootfs.tar: run make vendor (online) first" >&2; exit 1; }
  digest=$(cat "$VENDOR/os/.inputs" "$VENDOR/os/rootfs.tar" | sha256sum | cut -c1-32)
  if [ "$(docker image inspect -f '{{index .Config.Labels "org.veri.inputs"}}' "$os" 2>/dev/null)" = "$digest" ]; then
    echo "images: $os is up to date"
  else
    start=$SECONDS
    docker import --change "LABEL org.veri.inputs=$digest" --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["/bin/bash"]' "$VENDOR/os/rootfs.tar" "$os" >/dev/null
    echo "images: $os imported in $((SECONDS - start)) s"
  fi
fi

# Wheels and tarballs are served to the builds on 127.0.0.1 (SERVE), not sent in their contexts.
PARENTS=$os BUILD_ARGS="OS_IMAGE=$os" SERVE="wheels=$VENDOR/wheels/base" \
  "$here/build-image.sh" "$PREFIX/base" base-images/base/Dockerfile base-images/base
EXTRA_CA="" PARENTS="$PREFIX/base" BUILD_ARGS="BASE_IMAGE=$PREFIX/base
CLAUDE_CODE_VERSION=$CLAUDE_CODE_VERSION" SERVE="npm=$VENDOR/npm wheels=$VENDOR/wheels/claude-agent" \
  "$here/build-image.sh" "$PREFIX/base-claude-agent" base-images/claude-agent/Dockerfile
EXTRA_CA="" PARENTS=$os BUILD_ARGS="OS_IMAGE=$os" SERVE="wheels=$VENDOR/wheels/runtime" \
  "$here/build-image.sh" "$PREFIX/runtime" services/runtime.Dockerfile pyproject.toml services
