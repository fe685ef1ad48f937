#!/usr/bin/env bash
# build-image.sh TAG DOCKERFILE PATH... — docker build of TAG from a context that holds only the
# given repo paths (+ the Dockerfile), sent as a tar stream: vendor/ and .venv are never sent whole.
# Skipped when the image exists with the same input digest (context + build args + the parent
# images' ids), kept in its label org.veri.inputs.
# Env: BUILD_ARGS ("K=V" lines), EXTRA_CA (PEM file -> build arg EXTRA_CA_CERT), PARENTS (images
# whose ids are inputs), NETWORK (default none: these builds are offline), LOG_DIR.
set -euo pipefail
TAG=$1 DOCKERFILE=$2; shift 2
NETWORK=${NETWORK:-none}
LOG_DIR=${LOG_DIR:-build/docker}
paths=("$@")
covered=0
for p in "$@"; do case "$(realpath "$DOCKERFILE")" in "$(realpath "$p")"/*) covered=1 ;; esac; done
[ $covered = 1 ] || paths+=("$DOCKERFILE")
ctx() { tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' --exclude='.inputs' -c "${paths[@]}"; }
args=()
while IFS= read -r kv; do [ -z "$kv" ] || args+=(--build-arg "$kv"); done <<<"${BUILD_ARGS:-}"
ca=""
if [ -n "${EXTRA_CA:-}" ]; then ca=$(cat "$EXTRA_CA"); args+=(--build-arg "EXTRA_CA_CERT=$ca"); fi
parent_ids=$(for p in ${PARENTS:-}; do docker image inspect -f '{{.Id}}' "$p" 2>/dev/null || true; done)
digest=$( { ctx | sha256sum; printf '%s\n' "${BUILD_ARGS:-}" "$ca" "$parent_ids" "$NETWORK"; } | sha256sum | cut -c1-32)
if [ "$(docker image inspect -f '{{index .Config.Labels "org.veri.inputs"}}' "$TAG" 2>/dev/null)" = "$digest" ]; then
  echo "build-image: $TAG is up to date"; exit 0
fi
mkdir -p "$LOG_DIR"
log="$LOG_DIR/$(tr '/:' '__' <<<"$TAG").log"
echo "build-image: $TAG (log: $log)"
start=$SECONDS
if ! ctx | docker build --network "$NETWORK" -f "$DOCKERFILE" -t "$TAG" \
    --label "org.veri.inputs=$digest" "${args[@]}" - >"$log" 2>&1; then
  tail -40 "$log" >&2; echo "build-image: $TAG failed (log: $log)" >&2; exit 1
fi
echo "build-image: $TAG built in $((SECONDS - start)) s, $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')"
