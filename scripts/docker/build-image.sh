#!/usr/bin/env bash
# build-image.sh TAG DOCKERFILE PATH... — docker build of TAG from a context that holds only the
# given repo paths (+ the Dockerfile), sent as a tar stream: vendor/ and .venv are never sent whole.
# Skipped when the image exists with the same input digest (context + build args + the parent
# images' ids), kept in its label org.veri.inputs.
# Env: BUILD_ARGS ("K=V" lines), EXTRA_CA (PEM file: one CA or a whole bundle -> veri-extra-ca.pem at
# the context's root, see below), PARENTS (images whose ids are inputs), NETWORK (default none: these
# builds are offline), LOG_DIR, IMAGE_PREFIX (parents named <prefix>/... in BUILD_ARGS count as veri/...:
# their ids are the inputs, so a re-tagged set of images is up to date under any prefix),
# SERVE ("NAME=DIR ..."): folders served read-only on 127.0.0.1 for the build (build arg VENDOR_URL,
# fetched as $VENDOR_URL/NAME/...; the build then uses the host's network, still offline) instead
# of being sent in the context — no image-store copy of the wheels. Their contents are inputs.
# A rebuilt TAG's previous image is removed, so rebuilds do not pile up on the disk.
# The digest depends only on what goes into the image, never on where or how the tree was checked
# out: names, contents and git's idea of a mode (644 or 755: a git archive's 664, the umask's 600 and
# hard links all read the same), so `make load`'s tree finds the bundle's images up to date.
# DIGESTS_TO=FILE: append "TAG DIGEST" to FILE and build nothing (tests/sandbox/test_image_digest.py).
set -euo pipefail
here=$(dirname "$0")
TAG=$1 DOCKERFILE=$2; shift 2
NETWORK=${NETWORK:-none}
read -r -a serve <<<"${SERVE:-}"
LOG_DIR=${LOG_DIR:-build/docker}
paths=("$@")
covered=0
for p in "$@"; do case "$(realpath "$DOCKERFILE")" in "$(realpath "$p")"/*) covered=1 ;; esac; done
[ $covered = 1 ] || paths+=("$DOCKERFILE")
# The extra CA travels in the context as veri-extra-ca.pem (empty without one) to the Dockerfiles that
# COPY it (then RUN veri-add-extra-ca): not as a build argument, which a company's whole CA bundle
# (~200 KB) overflows ("Argument list too long": the kernel caps one argument at 128 KiB).
extra=$(mktemp -d)
cleanup() { rm -rf "$extra"; }
trap cleanup EXIT
ca_in=()
if grep -q 'veri-extra-ca\.pem' "$DOCKERFILE"; then
  if [ -n "${EXTRA_CA:-}" ]; then
    grep -q -- '-----BEGIN CERTIFICATE-----' "$EXTRA_CA" 2>/dev/null \
      || { echo "build-image: EXTRA_CA=$EXTRA_CA is not a PEM file of certificates (-----BEGIN CERTIFICATE-----)" >&2; exit 2; }
    cp "$EXTRA_CA" "$extra/veri-extra-ca.pem"
  else
    : >"$extra/veri-extra-ca.pem"
  fi
  chmod 644 "$extra/veri-extra-ca.pem"
  ca_in=(-C "$extra" veri-extra-ca.pem)
elif [ -n "${EXTRA_CA:-}" ]; then
  echo "build-image: EXTRA_CA is set but $DOCKERFILE never copies veri-extra-ca.pem: add" \
    "'COPY veri-extra-ca.pem /usr/local/share/ca-certificates/' and 'RUN veri-add-extra-ca' (base-images/README.md)" >&2
  exit 2
fi
# The one tar of both the digest and the build: normalized as git would (modes, no hard links), and
# without the caches and installs .gitignore ignores in any folder (git archive, so the bundle, never
# has them).
normalized=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX --hard-dereference)
ctx() { tar "${normalized[@]}" --exclude=node_modules --exclude=.venv \
  --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' --exclude='.inputs' --exclude=.ruff_cache \
  --exclude=.mypy_cache --exclude=.pytest_cache -c "${paths[@]}" "${ca_in[@]}"; }
args=()
while IFS= read -r kv; do [ -z "$kv" ] || args+=(--build-arg "$kv"); done <<<"${BUILD_ARGS:-}"
parent_ids=$(for p in ${PARENTS:-}; do docker image inspect -f '{{.Id}}' "$p" 2>/dev/null || true; done)
# Served folders: what make bundle carries of them (no logs, no half-written *.tmp.*: bundle.sh).
# Their content's sha256 (GBs of wheels: ~8 s a run) is kept in $LOG_DIR/served-digests under the
# folder's path and a listing of every entry's name, size, mtime and mode, as make trusts mtimes: a
# file changed, added or removed changes the listing and the content is hashed again.
served_digest() {
  local dir=$1 listing cache
  listing=$(cd "$dir" && find . \( -name .inputs -o -name '*.log' -o -name '*.tmp.*' \) -prune \
    -o -printf '%p %s %T@ %m %y\n' | LC_ALL=C sort | sha256sum | cut -c1-64)
  cache="$LOG_DIR/served-digests/$(printf '%s %s' "$(realpath "$dir")" "$listing" | sha256sum | cut -c1-32)"
  if [ -s "$cache" ]; then cat "$cache"; return; fi
  mkdir -p "$LOG_DIR/served-digests"
  if tar "${normalized[@]}" --exclude='.inputs' --exclude='*.log' --exclude='*.tmp.*' -C "$dir" -c . \
      | sha256sum >"$cache.tmp.$$"; then
    mv "$cache.tmp.$$" "$cache" && cat "$cache"
  else  # unreadable: no digest to keep, and one that matches no image (the build then says why)
    rm -f "$cache.tmp.$$"; echo "unhashed $dir $$"
  fi
}
served() { for kv in "${serve[@]}"; do echo "${kv%%=*}"; served_digest "${kv#*=}"; done; }
build_args=${BUILD_ARGS:-}
prefix=${IMAGE_PREFIX:-veri}
[ "$prefix" = veri ] || build_args=$(sed "s#=$prefix/#=veri/#" <<<"$build_args")
# (the empty line stands where the CA's text was: it is in the context now)
digest=$( { ctx | sha256sum; served; printf '%s\n' "$build_args" "" "$parent_ids" "$NETWORK"; } \
  | sha256sum | cut -c1-32)
if [ -n "${DIGESTS_TO:-}" ]; then echo "$TAG $digest" >>"$DIGESTS_TO"; exit 0; fi
if [ "$(docker image inspect -f '{{index .Config.Labels "org.veri.inputs"}}' "$TAG" 2>/dev/null)" = "$digest" ]; then
  echo "build-image: $TAG is up to date"; exit 0
fi
mkdir -p "$LOG_DIR"
log="$LOG_DIR/$(tr '/:' '__' <<<"$TAG").log"
echo "build-image: $TAG (log: $log)"
if [ ${#serve[@]} -gt 0 ]; then
  port_file=$(mktemp)
  python3 "$here/serve-vendor.py" "${serve[@]}" >"$port_file" &
  server=$!
  trap 'kill $server 2>/dev/null; rm -f "$port_file"; cleanup' EXIT
  for _ in $(seq 100); do [ -s "$port_file" ] && break; kill -0 $server 2>/dev/null || break; sleep 0.1; done
  port=$(head -1 "$port_file")
  [ -n "$port" ] || { echo "build-image: could not serve ${serve[*]} on 127.0.0.1" >&2; exit 1; }
  args+=(--build-arg "VENDOR_URL=http://127.0.0.1:$port")
  NETWORK=host
fi
previous=$(docker image inspect -f '{{.Id}}' "$TAG" 2>/dev/null || true)
start=$SECONDS
if ! ctx | docker build --network "$NETWORK" -f "$DOCKERFILE" -t "$TAG" \
    --label "org.veri.inputs=$digest" "${args[@]}" - >"$log" 2>&1; then
  tail -40 "$log" >&2; echo "build-image: $TAG failed (log: $log)" >&2
  if grep -q "no space left on device" "$log"; then
    echo "build-image: the disk is full ($(df -h "$(docker info -f '{{.DockerRootDir}}')" | awk 'NR==2{print $4}') free" \
      "for docker): docker image prune -f frees untagged images; scripts/disk-check.sh says what to remove" >&2
  elif [ ${#serve[@]} -gt 0 ] && grep -qiE "connection refused|failed to establish a new connection" "$log"; then
    echo "build-image: the build could not fetch the vendored files from 127.0.0.1:$port (it needs" \
      "docker build --network host to reach the host's loopback: rootful dockerd, no proxy for 127.0.0.1)" >&2
  fi
  exit 1
fi
now=$(docker image inspect -f '{{.Id}}' "$TAG")
# The replaced image; kept while another tag (the same image under another IMAGE_PREFIX), a
# container or a child image still uses it.
if [ -n "$previous" ] && [ "$previous" != "$now" ] \
    && [ "$(docker image inspect -f '{{len .RepoTags}}' "$previous" 2>/dev/null)" = 0 ]; then
  docker image rm "$previous" >/dev/null 2>&1 || true
fi
echo "build-image: $TAG built in $((SECONDS - start)) s, $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')"
