#!/usr/bin/env bash
# os-base.sh — prints the OS base image every veri image is FROM, importing it first when needed:
# $BASE_OS_IMAGE (local or pullable), else veri/os-base from vendor/os/rootfs.tar (offline; skipped
# when the tarball has not changed). The same steps as the start of images.sh, for the image targets
# that need only the OS base (make images-vllm-cpu, make images-gpu). Messages go to stderr.
set -euo pipefail
VENDOR=${VENDOR:-vendor}
PREFIX=${IMAGE_PREFIX:-veri}
if [ -n "${BASE_OS_IMAGE:-}" ]; then
  os=$BASE_OS_IMAGE
  docker image inspect "$os" >/dev/null 2>&1 || docker pull "$os" >&2 \
    || { echo "os-base: BASE_OS_IMAGE=$os is neither local nor pullable (docker load it first)" >&2; exit 1; }
else
  os=$PREFIX/os-base
  [ -s "$VENDOR/os/rootfs.tar" ] || { echo "os-base: no $VENDOR/os/rootfs.tar: run make vendor-os (online) first" >&2; exit 1; }
  digest=$(cat "$VENDOR/os/.inputs" "$VENDOR/os/rootfs.tar" | sha256sum | cut -c1-32)
  if [ "$(docker image inspect -f '{{index .Config.Labels "org.veri.inputs"}}' "$os" 2>/dev/null)" != "$digest" ]; then
    start=$SECONDS
    docker import --change "LABEL org.veri.inputs=$digest" --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["/bin/bash"]' "$VENDOR/os/rootfs.tar" "$os" >/dev/null
    echo "os-base: $os imported in $((SECONDS - start)) s" >&2
  fi
fi
echo "$os"
