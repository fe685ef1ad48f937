#!/usr/bin/env bash
# `make images-gpu` (offline): veri/vllm, also tagged veri/trainer-gpu — the GPU path's stack (vLLM, CUDA
# torch, TRL, transformers at services/veri/gpu/stack/gpu-stack.txt) + veri, from vendor/wheels/gpu and
# vendor/debs/gpu (make vendor-gpu). Two builds, as for the CPU twin (images-vllm-cpu.sh): the venv
# (veri/vllm-gpu-deps, ~9 GB: its build fetches the wheels from a loopback server whose port is new each
# time, so docker's layer cache could not keep it) and veri/vllm FROM it (+ veri, editable, --no-deps:
# the policy loads veri's vLLM worker extension, the trainer runs veri train). Each is skipped when its
# inputs are unchanged. Building needs no GPU; running needs the NVIDIA container toolkit and a driver
# for CUDA 13 (torch 2.13's PyPI build).
set -euo pipefail
here=$(dirname "$0")
VENDOR=${VENDOR:-vendor}
PREFIX=${IMAGE_PREFIX:-veri}
VLLM_VERSION=${VLLM_VERSION:?}
for d in "$VENDOR/wheels/gpu" "$VENDOR/debs/gpu"; do
  [ -s "$d/lock.txt" ] || { echo "images-gpu: no $d: run make vendor-gpu (online) first" >&2; exit 1; }
done
os=$("$here/os-base.sh")
old_deps=$(docker image inspect -f '{{.Id}}' "$PREFIX/vllm-gpu-deps" 2>/dev/null || true)
old_trainer=$(docker image inspect -f '{{.Id}}' "$PREFIX/trainer-gpu" 2>/dev/null || true)
old_vllm=$(docker image inspect -f '{{.Id}}' "$PREFIX/vllm" 2>/dev/null || true)

EXTRA_CA="" PARENTS=$os BUILD_ARGS="OS_IMAGE=$os
VLLM_VERSION=$VLLM_VERSION" SERVE="wheels=$VENDOR/wheels/gpu debs=$VENDOR/debs/gpu" \
  "$here/build-image.sh" "$PREFIX/vllm-gpu-deps" services/vllm-gpu-deps.Dockerfile
EXTRA_CA="" PARENTS="$PREFIX/vllm-gpu-deps" BUILD_ARGS="DEPS_IMAGE=$PREFIX/vllm-gpu-deps" \
  "$here/build-image.sh" "$PREFIX/vllm" services/vllm.Dockerfile pyproject.toml LICENSE \
  docs/licences.md services

[ -z "${DIGESTS_TO:-}" ] || exit 0  # the digests only (build-image.sh)

# The trainer's name for the same image (no second copy). Images the tags no longer name go, unless
# a container still uses them.
now=$(docker image inspect -f '{{.Id}}' "$PREFIX/vllm")
docker tag "$PREFIX/vllm" "$PREFIX/trainer-gpu"
for old in "$old_trainer" "$old_vllm" "$old_deps"; do
  [ -z "$old" ] || [ "$old" = "$now" ] || [ "$old" = "$(docker image inspect -f '{{.Id}}' "$PREFIX/vllm-gpu-deps")" ] \
    || docker image rm "$old" >/dev/null 2>&1 || true
done
echo "images-gpu: $PREFIX/vllm = $PREFIX/trainer-gpu ($(docker image inspect -f '{{.Size}}' "$now" | awk '{printf "%.2f GB", $1/1e9}'))"
