#!/usr/bin/env bash
# load.sh BUNDLE.tar [DIR] — `make load BUNDLE=...`: restores a `make bundle` archive on a box with no
# network. On a fresh box (no checkout yet) run it straight from the archive:
#   tar -xOf veri-bundle.tar veri-bundle/load.sh | bash -s -- veri-bundle.tar /opt/veri
# Steps: unpack, check every file's sha256, docker load the images, the repo at the bundle's commit
# into DIR (a git checkout is left as it is), vendor/ (and build/models with MODELS=1) into DIR, and
# DIR/.venv from the vendored runtime wheels (no index) when there is none. Then, in DIR, `make images`
# (up to date: nothing rebuilt) and `make train` need no registry. Prints sizes and times.
set -euo pipefail
BUNDLE=$(realpath "${1:?usage: load.sh BUNDLE.tar [DIR]}")
DIR=$(realpath -m "${2:-.}")
[ -f "$BUNDLE" ] || { echo "load: no file $BUNDLE" >&2; exit 2; }
command -v docker >/dev/null || { echo "load: no docker on this box (install it first: make docker)" >&2; exit 1; }
mkdir -p "$DIR"
stage=$(mktemp -d "$DIR/.load.XXXXXX")
trap 'rm -rf "$stage"' EXIT
took() { echo "$((SECONDS - $1)) s"; }
gb() { awk -v n="$1" 'BEGIN { printf "%.2f GB", n / 1e9 }'; }

start=$SECONDS
tar -xf "$BUNDLE" -C "$stage"
b=$stage/veri-bundle
[ -f "$b/manifest.json" ] && [ -f "$b/SHA256SUMS" ] || { echo "load: $BUNDLE is not a make bundle archive" >&2; exit 2; }
echo "load: unpacked $(gb "$(stat -c %s "$BUNDLE")") in $(took $start)"
start=$SECONDS
(cd "$b" && sha256sum --quiet -c SHA256SUMS) || { echo "load: $BUNDLE is damaged (sha256 above): copy it again" >&2; exit 1; }
echo "load: $(wc -l <"$b/SHA256SUMS") files match their sha256 ($(took $start))"

start=$SECONDS
docker load -q -i "$b/images.tar" | sed 's/^/load: /'
rm "$b/images.tar"
echo "load: images loaded in $(took $start)"

commit=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["commit"])' "$b/manifest.json")
if [ -e "$DIR/.git" ]; then
  echo "load: $DIR is a git checkout: left as it is (the bundle holds commit ${commit:0:12})"
else
  tar -xf "$b/repo.tar" -C "$DIR"
  echo "load: the repo at ${commit:0:12} in $DIR"
fi
rm -rf "$DIR/vendor.old"
[ ! -e "$DIR/vendor" ] || mv "$DIR/vendor" "$DIR/vendor.old"
mv "$b/vendor" "$DIR/vendor"
rm -rf "$DIR/vendor.old"
echo "load: vendor/ in $DIR/vendor ($(du -sh "$DIR/vendor" | cut -f1))"
if [ -d "$b/models" ]; then
  mkdir -p "$DIR/build/models"
  cp -a "$b/models/." "$DIR/build/models/"
  echo "load: models in $DIR/build/models: $(ls "$b/models" | tr '\n' ' ')"
fi

# The host's veri CLI (make train runs it) from the runtime image's own wheels: no index needed.
if [ ! -x "$DIR/.venv/bin/veri" ]; then
  start=$SECONDS
  wheels=$DIR/vendor/wheels/runtime
  want=$(sed -n 's/^python=//p' "$wheels/.inputs")
  have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$want" = "$have" ] || { echo "load: the vendored wheels are for python $want, this box has $have:" \
    "make a venv in $DIR/.venv with veri installed, or make the bundle with VENDOR_PYTHON=$have" >&2; exit 1; }
  # Debian's python3 makes a venv only with python3-venv (ensurepip); no network here to install it from.
  python3 -c 'import ensurepip' 2>/dev/null || { echo "load: python3 has no ensurepip: apt-get install" \
    "python3-venv (from your Debian mirror or installation media), then rerun" >&2; exit 1; }
  python3 -m venv "$DIR/.venv"
  (cd "$DIR" && PIP_NO_INDEX=1 .venv/bin/pip install -q --no-cache-dir --find-links "$wheels" -r "$wheels/requirements.txt" \
    && PIP_NO_INDEX=1 .venv/bin/pip install -q --no-cache-dir --no-deps --no-build-isolation -e .)
  touch "$DIR/.venv/.installed"
  echo "load: $DIR/.venv (veri's CLI) from the vendored wheels in $(took $start)"
fi
echo "load: done; in $DIR: make images (nothing to rebuild), then make train CONFIG=..."
