#!/usr/bin/env bash
# bench/gpu_check.sh — the GPU path, checked on a box with >= 1 NVIDIA GPU, offline: the vendored wheels
# and images are there (make vendor-gpu online once, then make images-gpu), no network needed.
# For each weight-sync backend the GPUs allow (filesystem always; nccl with 2+), on the tiny model:
# `make train` (the vLLM policy on the GPUs of the plan, the proxy, 2 GRPO steps), then prints the step
# split, the sync seconds, TRL's importance-sampling ratio (served vs trainer logprobs), whether the
# served logprobs moved with the weights, and proxy vs direct throughput (target >= 0.95).
#   bench/gpu_check.sh            on the GPUs
#   DEVICE=cpu bench/gpu_check.sh the same checks on the CPU twin (veri/vllm-cpu): how this script is tested
# Put the figures in docs/benchmarks.md ("The GPU path's checks").
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
VERI=.venv/bin/veri
out=build/gpu-check
project=veri-gpu-check
mkdir -p "$out"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
make --no-print-directory -s venv tiny-model
[ -f build/models/tiny-vllm/config.json ] || "$VERI" model tiny-vllm --out build/models/tiny-vllm >/dev/null

if [ "$DEVICE" = cuda ]; then
  command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: this needs an NVIDIA GPU (DEVICE=cpu for the CPU twin)" >&2; exit 1; }
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
  [ "$gpus" -ge 1 ] || { echo "gpu_check: nvidia-smi lists no GPU" >&2; exit 1; }
  for image in veri/vllm veri/trainer-gpu; do
    docker image inspect "$image" >/dev/null 2>&1 \
      || { echo "gpu_check: no image $image: make vendor-gpu (online, once), then make images-gpu" >&2; exit 1; }
  done
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
  backends=filesystem
  [ "$gpus" -lt 2 ] || backends="filesystem nccl"
else
  backends=filesystem
fi

for sync in $backends; do
  config=$out/job-$DEVICE-$sync.yaml
  sed -e "s/^device: .*/device: $DEVICE/" -e "s/^weight_sync: .*/weight_sync: $sync/" \
      -e "s/^vllm_data_parallel_size: .*/vllm_data_parallel_size: $([ "$DEVICE" = cuda ] && echo auto || echo 2)/" \
      config/url_extract_vllm_cpu.yaml >"$config"
  name=check-$DEVICE-$sync-$(date +%s)
  export VERI_PROJECT=$project VERI_STATE_DIR=$PWD/$out/state VERI_ROLLOUTS_NETWORK=$project-rollouts
  # Free host ports: a stack of `make up` (8000, 8300) may be running next to this check.
  export VERI_PROXY_PORT=${VERI_PROXY_PORT:-$(free_port)} VERI_CONSOLE_PORT=${VERI_CONSOLE_PORT:-$(free_port)}
  echo "== $DEVICE, weight sync $sync: make train ($config)"
  started=$SECONDS
  make --no-print-directory train CONFIG="$config" NAME="$name" >"$out/$name.log" 2>&1 \
    || { tail -40 "$out/$name.log"; echo "gpu_check: make train failed (log: $out/$name.log)" >&2; make -s down; exit 1; }
  echo "make train: $((SECONDS - started)) s (log: $out/$name.log)"
  .venv/bin/python bench/gpu_check_report.py "$VERI_STATE_DIR/jobs/$name" build/models/tiny-vllm 2>/dev/null
  # proxy vs direct, from inside the stack's control network (the trainer's image has the bench's deps)
  settings=$("$VERI" stack-env "$config" 2>/dev/null)
  eval "$settings"
  compose=$(make -s -f Makefile -f - print-compose <<<$'print-compose:\n\t@echo $(COMPOSE)')
  VERI_CONTROL_TOKEN=$(cat "$VERI_STATE_DIR/control_token") $compose -p "$project" run --rm -T \
    -e VERI_CONTROL_TOKEN trainer python bench/vllm_throughput.py --proxy-url http://proxy:8000 --sessions 16 \
    2>/dev/null | tail -4
  make --no-print-directory -s down
done
