#!/usr/bin/env bash
# `make images-claude-agent` (offline): veri/base-claude-agent, veri/base + Claude Code, from vendor/ only;
# skipped when its inputs have not changed. Claude Code is Anthropic's proprietary CLI, used under Anthropic's
# terms, which building this image accepts (docs/licences.md). So `make images` leaves it out: make train and
# make eval build it for a job whose bundle is FROM it (veri stack-env's VERI_BUNDLE_BASE_TARGET), make test
# for the tests that run Claude Code, make base-image for a base FROM it, and anyone by asking.
set -euo pipefail
here=$(dirname "$0")
VENDOR=${VENDOR:-vendor}
PREFIX=${IMAGE_PREFIX:-veri}
CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION:?}

EXTRA_CA="" PARENTS="$PREFIX/base" BUILD_ARGS="BASE_IMAGE=$PREFIX/base
CLAUDE_CODE_VERSION=$CLAUDE_CODE_VERSION" SERVE="npm=$VENDOR/npm wheels=$VENDOR/wheels/claude-agent" \
  "$here/build-image.sh" "$PREFIX/base-claude-agent" base-images/claude-agent/Dockerfile
