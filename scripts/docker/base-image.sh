#!/usr/bin/env bash
# base-image.sh --vendor DOCKERFILE   (make vendor-base-image; online, once)
# base-image.sh NAME DOCKERFILE       (make base-image; offline once vendored)
# A user's harness base, built like veri's own: the context is the Dockerfile's folder; a
# requirements.txt beside the Dockerfile is vendored as wheels into $VENDOR/wheels/base-images/<hash of
# it> (--vendor: pip download, the one online step) and served to the build on 127.0.0.1 (build arg
# VENDOR_URL: pip install --no-index --find-links "$VENDOR_URL/wheels/" -r "$VENDOR_URL/wheels/requirements.txt"),
# so the build itself needs no index. Env: VENDOR (absolute), EXTRA_CA, BUILD_ARGS, PARENTS, LOG_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vendor_only=0
if [ "${1:-}" = --vendor ]; then vendor_only=1; shift; else NAME=${1:?usage: base-image.sh NAME DOCKERFILE}; shift; fi
DOCKERFILE=${1:?usage: base-image.sh [--vendor] [NAME] DOCKERFILE}
[ -f "$DOCKERFILE" ] || { echo "base-image: no Dockerfile $DOCKERFILE" >&2; exit 2; }
VENDOR=$(realpath -m "${VENDOR:-vendor}")
folder=$(cd "$(dirname "$DOCKERFILE")" && pwd)
requirements=$folder/requirements.txt
wheels=""
if [ -f "$requirements" ]; then
  wheels=$VENDOR/wheels/base-images/$(sha256sum <"$requirements" | cut -c1-16)
fi
if [ $vendor_only = 1 ]; then
  [ -n "$wheels" ] || { echo "vendor-base-image: no requirements.txt beside $DOCKERFILE: nothing to vendor"; exit 0; }
  exec "$here/vendor-wheels.sh" "$wheels" "$requirements"
fi

serve=""
if [ -n "$wheels" ]; then
  "$here/vendor-wheels.sh" --check "$wheels" "$requirements" || {
    echo "base-image: the wheels of $requirements are not vendored (in $wheels): run" \
      "make vendor-base-image DOCKERFILE=$DOCKERFILE where PyPI is reachable (once), then build here" >&2
    exit 1
  }
  grep -q VENDOR_URL "$DOCKERFILE" || {
    echo "base-image: $DOCKERFILE has a requirements.txt beside it but never uses VENDOR_URL: install them with" \
      "'ARG VENDOR_URL' and 'RUN pip install --no-cache-dir --no-index --find-links \"\$VENDOR_URL/wheels/\"" \
      "-r \"\$VENDOR_URL/wheels/requirements.txt\"' (base-images/README.md)" >&2
    exit 2
  }
  serve="wheels=$wheels"
fi
cd "$folder"
SERVE=$serve NETWORK=${NETWORK:-none} exec "$here/build-image.sh" "$NAME" "$(basename "$DOCKERFILE")" .
