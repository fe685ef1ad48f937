#!/usr/bin/env bash
# os-base.sh — prints the OS base image every veri image is FROM, importing it first when needed:
# $BASE_OS_IMAGE (local or pullable), else veri/os-base from vendor/os/rootfs.tar (offline; skipped
# when its packages have not changed). Every image target calls it (make images, images-vllm-cpu,
# images-gpu). Messages go to stderr.
# The import is keyed by what the OS *is*: the debootstrap inputs, the package database and the apt
# sources, not the tarball's bytes (every debootstrap run stamps new mtimes and logs). So a fresh
# `make vendor` of the same packages keeps veri/os-base, and every image built FROM it, as they are.
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
  digest=$( { cat "$VENDOR/os/.inputs"; tar -xOf "$VENDOR/os/rootfs.tar" ./var/lib/dpkg/status \
    ./etc/apt/sources.list 2>/dev/null || true; } | sha256sum | cut -c1-32)
  if [ -n "${DIGESTS_TO:-}" ]; then
    echo "$os $digest" >>"$DIGESTS_TO"  # build-image.sh's dry run: nothing imported
  elif [ "$(docker image inspect -f '{{index .Config.Labels "org.veri.inputs"}}' "$os" 2>/dev/null)" != "$digest" ]; then
    start=$SECONDS
    docker import --change "LABEL org.veri.inputs=$digest" --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["/bin/bash"]' "$VENDOR/os/rootfs.tar" "$os" >/dev/null
    echo "os-base: $os imported in $((SECONDS - start)) s" >&2
  fi
fi
echo "$os"
