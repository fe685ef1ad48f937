#!/usr/bin/env bash
# vendor-wheels.sh OUT REQUIREMENTS... — `make vendor` (online): wheels for one image into OUT,
# exactly one resolution of the requirement files (a pyproject.toml counts as its [project]
# dependencies + build requirements), as binary wheels for the images' Python (VENDOR_PYTHON,
# default 3.11 = Debian bookworm) on manylinux x86_64, with
# OUT/requirements.txt (what to install) and OUT/lock.txt (sha256 of every wheel). Skipped when the
# inputs are unchanged and the lock matches. torch is always the CPU build (torch==V -> V+cpu; the
# PyTorch CPU index TORCH_INDEX_URL is asked only when the configured indexes lack it); a CUDA torch
# or nvidia-* wheel fails the step.
set -euo pipefail
OUT=${1:?out dir}; shift
PY=${VENDOR_PYTHON:-3.11}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
read -r -a PIP <<<"${PIP:-python3 -m pip}"

reqs=$(for f in "$@"; do
  case "$f" in
    *.toml) python3 -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))
print("\n".join(p["project"]["dependencies"] + p.get("build-system", {}).get("requires", [])))' "$f" ;;
    *) grep -v '^\s*\(#\|$\)' "$f" ;;
  esac
done)
torch_pin=$(sed -n 's/^torch\s*==\s*\([0-9.]*\)\s*$/\1/p' <<<"$reqs")
platforms=()
for m in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${m}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
inputs=$(printf 'python=%s\n%s\n' "$PY" "$reqs")
if [ "$(cat "$OUT/.inputs" 2>/dev/null)" = "$inputs" ] && (cd "$OUT" && sha256sum --quiet -c lock.txt) 2>/dev/null; then
  echo "vendor-wheels: $OUT is up to date"; exit 0
fi

mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp -d "${OUT%/}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' "$reqs" >"$tmp/requirements.txt"
: >"$tmp/constraints.txt"
[ -z "$torch_pin" ] || echo "torch==$torch_pin+cpu" >"$tmp/constraints.txt"
download() {
  "${PIP[@]}" download -q --disable-pip-version-check -d "$tmp" --only-binary=:all: "${platforms[@]}" \
    --python-version "$PY" --implementation cp --abi "cp${PY/./}" \
    -r "$tmp/requirements.txt" -c "$tmp/constraints.txt" "$@" 2>&1 | { grep -v 'is ignored: it is neither' >&2 || true; }
  return "${PIPESTATUS[0]}"
}
echo "vendor-wheels: $OUT ($(wc -l <"$tmp/requirements.txt") requirements, python $PY)"
if ! download; then
  [ -n "$torch_pin" ] || exit 1
  echo "vendor-wheels: retrying with the PyTorch CPU index $TORCH_INDEX_URL" >&2
  download --extra-index-url "$TORCH_INDEX_URL"
fi
rm "$tmp/constraints.txt"
if find "$tmp" -name '*.whl' -printf '%f\n' | grep -E '^nvidia_|^torch-[^+]*-|^torch-.*\+cu' >&2; then
  echo "vendor-wheels: refusing a CUDA torch / nvidia wheels (above) in $OUT" >&2; exit 1
fi
(cd "$tmp" && sha256sum -- *.whl >lock.txt)
printf '%s\n' "$inputs" >"$tmp/.inputs"
chmod 755 "$tmp"
rm -rf "$OUT" && mv "$tmp" "$OUT" && trap - EXIT
echo "vendor-wheels: $OUT ($(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1))"
