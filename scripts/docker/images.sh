#!/usr/bin/env bash
# `make images` (offline): veri/os-base (or $BASE_OS_IMAGE), veri/base, veri/base-codex-agent, veri/runtime — from
# vendor/ only. Each is skipped when its inputs have not changed. veri/base-claude-agent (Claude Code, under
# Anthropic's terms) is built apart, only where it is needed: images-claude-agent.sh.
set -euo pipefail
here=$(dirname "$0")
VENDOR=${VENDOR:-vendor}
PREFIX=${IMAGE_PREFIX:-veri}
CODEX_VERSION=${CODEX_VERSION:?}

os=$("$here/os-base.sh")

# Wheels and tarballs are served to the builds on 127.0.0.1 (SERVE), not sent in their contexts.
PARENTS=$os BUILD_ARGS="OS_IMAGE=$os" SERVE="wheels=$VENDOR/wheels/base" \
  "$here/build-image.sh" "$PREFIX/base" base-images/base/Dockerfile base-images/base LICENSE
EXTRA_CA="" PARENTS="$PREFIX/base" BUILD_ARGS="BASE_IMAGE=$PREFIX/base
CODEX_VERSION=$CODEX_VERSION" SERVE="npm=$VENDOR/npm-codex" \
  "$here/build-image.sh" "$PREFIX/base-codex-agent" base-images/codex-agent/Dockerfile
EXTRA_CA="" PARENTS=$os BUILD_ARGS="OS_IMAGE=$os" SERVE="wheels=$VENDOR/wheels/runtime" \
  "$here/build-image.sh" "$PREFIX/runtime" services/runtime.Dockerfile pyproject.toml LICENSE docs/licences.md services
