#!/usr/bin/env bash
# `make images-gpu` (offline): veri/vllm and veri/trainer-gpu FROM it, from vendor/wheels/gpu and
# vendor/debs/gpu (make vendor-gpu). Building needs no GPU; running them needs the NVIDIA container
# toolkit and a driver for CUDA 13 (torch 2.13's PyPI build). Each is skipped when its inputs are unchanged.
set -euo pipefail
here=$(dirname "$0")
VENDOR=${VENDOR:-vendor}
PREFIX=${IMAGE_PREFIX:-veri}
VLLM_VERSION=${VLLM_VERSION:?}
for d in "$VENDOR/wheels/gpu" "$VENDOR/debs/gpu"; do
  [ -s "$d/lock.txt" ] || { echo "images-gpu: no $d: run make vendor-gpu (online) first" >&2; exit 1; }
done
os=$("$here/os-base.sh")
serve="wheels=$VENDOR/wheels/gpu debs=$VENDOR/debs/gpu"
EXTRA_CA="" PARENTS=$os BUILD_ARGS="OS_IMAGE=$os
VLLM_VERSION=$VLLM_VERSION" SERVE=$serve \
  "$here/build-image.sh" "$PREFIX/vllm" services/vllm.Dockerfile
EXTRA_CA="" PARENTS="$PREFIX/vllm" BUILD_ARGS="VLLM_IMAGE=$PREFIX/vllm" SERVE=$serve \
  "$here/build-image.sh" "$PREFIX/trainer-gpu" services/trainer-gpu.Dockerfile pyproject.toml services
