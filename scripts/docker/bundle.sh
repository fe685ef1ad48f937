#!/usr/bin/env bash
# bundle.sh OUT.tar — `make bundle`: everything an air-gapped box needs, in one archive (plain tar: the
# wheels and layers inside are compressed already, or not worth 2 cores' time):
#   veri-bundle/manifest.json   what is inside: images (name, id, size), files (size, sha256), commit
#   veri-bundle/SHA256SUMS      the same sha256s, for sha256sum -c (load.sh checks them)
#   veri-bundle/load.sh         this repo's loader, runnable before anything is unpacked
#   veri-bundle/images.tar      docker save of the images (shared layers once)
#   veri-bundle/repo.tar        the repo at HEAD (git archive)
#   veri-bundle/vendor/...      the vendored wheels, npm tarballs and OS rootfs (GPU wheels with GPU=1)
#   veri-bundle/models/...      build/models (MODELS=1)
# Env: IMAGE_PREFIX, VENDOR, BUNDLE_IMAGES (default: veri's images that exist here; GPU ones with
# GPU=1), MODELS, GPU. Prints each part's size and time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$(realpath -m "${1:?usage: bundle.sh OUT.tar}")
PREFIX=${IMAGE_PREFIX:-veri}
VENDOR=${VENDOR:-vendor}
GPU=${GPU:-} MODELS=${MODELS:-}
repo=$(git rev-parse --show-toplevel)
[ -d "$VENDOR" ] || { echo "bundle: no $VENDOR/: run make vendor (online) first" >&2; exit 1; }
VENDOR=$(realpath --relative-to="$repo" "$VENDOR")
case $VENDOR in ../*) echo "bundle: VENDOR must lie inside the repo ($repo)" >&2; exit 2 ;; esac
cd "$repo"
commit=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] \
  || echo "bundle: note: the working tree has uncommitted changes; the bundle holds HEAD ($commit)" >&2

if [ -n "${BUNDLE_IMAGES:-}" ]; then
  read -r -a images <<<"$BUNDLE_IMAGES"
else
  images=()
  wanted=(os-base base base-claude-agent base-codex-agent runtime vllm-cpu trainer-cpu)
  [ -z "$GPU" ] || wanted+=(vllm trainer-gpu)
  for name in "${wanted[@]}"; do
    docker image inspect "$PREFIX/$name" >/dev/null 2>&1 && images+=("$PREFIX/$name")
  done
fi
for image in "${images[@]}"; do
  docker image inspect "$image" >/dev/null 2>&1 || { echo "bundle: no image $image (make images)" >&2; exit 1; }
done
[ ${#images[@]} -gt 0 ] || { echo "bundle: no $PREFIX/* images: run make images first" >&2; exit 1; }

mkdir -p "$(dirname "$OUT")"
stage=$(mktemp -d "$(dirname "$OUT")/.bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/veri-bundle"
b=$stage/veri-bundle
gb() { awk -v n="$1" 'BEGIN { printf "%.2f GB", n / 1e9 }'; }
took() { echo "$((SECONDS - $1)) s"; }

start=$SECONDS
docker save -o "$b/images.tar" "${images[@]}"
echo "bundle: images: ${images[*]}: $(gb "$(stat -c %s "$b/images.tar")") (docker save: $(took $start))"
start=$SECONDS
git archive --format=tar -o "$b/repo.tar" HEAD
cp "$here/load.sh" "$b/load.sh"
echo "bundle: repo at ${commit:0:12}: $(gb "$(stat -c %s "$b/repo.tar")")"

# vendor/ and the models go in by reference (tar reads them in place); the lists say what.
skip=(! -path '*.tmp.*' ! -name '*.log')  # half-written vendoring, debootstrap's log
[ -n "$GPU" ] || skip+=(! -path "$VENDOR/wheels/gpu/*")
vendor_files=$(find "$VENDOR" -type f "${skip[@]}" | sort)
model_files=""
[ -z "$MODELS" ] || model_files=$(find build/models -type f 2>/dev/null | sort)
[ -z "$MODELS" ] || [ -n "$model_files" ] || { echo "bundle: MODELS=1 but no build/models" >&2; exit 1; }
start=$SECONDS
{
  (cd "$b" && sha256sum images.tar repo.tar load.sh)
  [ -z "$vendor_files" ] || sha256sum $vendor_files | sed "s#  $VENDOR/#  vendor/#"
  [ -z "$model_files" ] || sha256sum $model_files | sed 's#  build/models/#  models/#'
} >"$b/SHA256SUMS"
echo "bundle: sha256 of every file: $(took $start)"

python3 - "$b" "$commit" "$PREFIX" "$VENDOR" "${images[@]}" <<'EOF'
import json, os, subprocess, sys, time
folder, commit, prefix, vendor, images = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
root = os.getcwd()
files = []
for line in open(os.path.join(folder, "SHA256SUMS")):
    digest, name = line.rstrip("\n").split("  ", 1)
    if name.startswith("vendor/"):
        path = os.path.join(root, vendor, name[len("vendor/"):])
    elif name.startswith("models/"):
        path = os.path.join(root, "build", name)
    else:
        path = os.path.join(folder, name)
    files.append({"path": name, "size": os.path.getsize(path), "sha256": digest})
inspect = json.loads(subprocess.run(["docker", "image", "inspect", *images], capture_output=True, check=True).stdout)
manifest = {
    "format": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
    "image_prefix": prefix,
    "images": [{"name": name, "id": info["Id"], "size": info["Size"]} for name, info in zip(images, inspect)],
    "files": files, "total_bytes": sum(f["size"] for f in files),
}
json.dump(manifest, open(os.path.join(folder, "manifest.json"), "w"), indent=1)
EOF

start=$SECONDS
parts=(-C "$stage" veri-bundle)
[ -z "$vendor_files" ] || parts+=(-C "$repo" --transform "s#^${VENDOR%/}/#veri-bundle/vendor/#" $vendor_files)
[ -z "$model_files" ] || parts+=(-C "$repo" --transform "s#^build/models/#veri-bundle/models/#" $model_files)
tar -cf "$OUT.tmp" "${parts[@]}"
mv "$OUT.tmp" "$OUT"
echo "bundle: $OUT: $(gb "$(stat -c %s "$OUT")") ($(wc -l <"$b/SHA256SUMS") files; written in $(took $start))"
echo "bundle: on the air-gapped box: tar -xOf $(basename "$OUT") veri-bundle/load.sh | bash -s -- $(basename "$OUT") DIR"
