#!/usr/bin/env bash
# bench/gpu_check.sh — the GPU path, checked on a box with >= 1 NVIDIA GPU, offline: the vendored wheels
# and images are there (make vendor-gpu online once, then make images-gpu), no network needed.
# For each weight-sync backend the GPUs allow (filesystem always; nccl with 2+), on the tiny model:
# `make train` (the vLLM policy on the GPUs of the plan, the proxy, 2 GRPO steps), then the step split,
# the sync seconds, TRL's importance-sampling ratio (served vs trainer logprobs), whether the served
# logprobs moved with the weights, and proxy vs direct throughput (target >= 0.95). It ends with one
# summary table (GPUs, driver, plan, split, sync s and GB/s, IS ratio, memory freed by sleep mode,
# proxy/direct) to paste into an issue: docs/gpu.md ("When a GPU run fails") says what else to send.
# Then asynchronous training against the synchronous loop (2+ GPUs, or the CPU twin): the same job,
# a harness with a heavy-tailed tool (bench/bundles/slow_tool), 6 steps at max_staleness 0 and 1, and
# the line bench/async_step.py ends with (async/sync step time, staleness, reward, policy busy, dropped).
#   bench/gpu_check.sh            on the GPUs
#   DEVICE=cpu bench/gpu_check.sh the same checks on the CPU twin (veri/vllm-cpu): how this script is tested
#   PLAN_ONLY=1 bench/gpu_check.sh  only the jobs and their plans (veri stack-env): no image, no make train
#                                   (tests/appliance/test_gpu_check.py: 1, 2, 4, 8 stand-in GPUs)
# Put the figures in docs/benchmarks.md ("The GPU path's checks").
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
PLAN_ONLY=${PLAN_ONLY:-}
VERI=.venv/bin/veri
out=${GPU_CHECK_OUT:-build/gpu-check}
project=veri-gpu-check
mkdir -p "$out"
summary=$out/summary.jsonl
: >"$summary"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
make --no-print-directory -s venv tiny-model
[ -f build/models/tiny-vllm/config.json ] || "$VERI" model tiny-vllm --out build/models/tiny-vllm >/dev/null

gpus=0
if [ "$DEVICE" = cuda ]; then
  command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: this needs an NVIDIA GPU (DEVICE=cpu for the CPU twin)" >&2; exit 1; }
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | grep -c . || true)
  [ "$gpus" -ge 1 ] || { echo "gpu_check: nvidia-smi lists no GPU" >&2; exit 1; }
  if [ -z "$PLAN_ONLY" ]; then
    "$VERI" doctor --no-container-probe >"$out/doctor.txt" || true  # the table's header; make train stops on its failures
    for image in veri/vllm veri/trainer-gpu; do
      docker image inspect "$image" >/dev/null 2>&1 \
        || { echo "gpu_check: no image $image: make vendor-gpu (online, once), then make images-gpu" >&2; exit 1; }
    done
  fi
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv,noheader
  backends=filesystem
  [ "$gpus" -lt 2 ] || backends="filesystem nccl"
else
  backends=filesystem
fi

# The job: the CPU twin's (tiny model, 2 steps) on this device. vllm_sleep_mode is for 1 GPU shared by
# the trainer and vLLM (the planner refuses it with 2+, where GPU 0 is the trainer's alone): kept on 1
# GPU, where the summary reports what it frees, and on the CPU twin (the same calls).
write_job() {  # write_job SYNC FILE
  local dp=2 sleep=keep
  if [ "$DEVICE" = cuda ]; then dp=auto; [ "$gpus" -lt 2 ] || sleep=drop; fi
  sed -e "s/^device: .*/device: $DEVICE/" -e "s/^weight_sync: .*/weight_sync: $1/" \
      -e "s/^vllm_data_parallel_size: .*/vllm_data_parallel_size: $dp/" \
      $([ $sleep = drop ] && echo "-e /^vllm_sleep_mode:/d") \
      config/url_extract_vllm_cpu.yaml >"$2"
}

# The async comparison's job: the CPU twin's async job (no sleep mode: the policy serves while the
# trainer steps) with the slow-tool harness, at max_staleness $1, on the last backend (nccl with 2+ GPUs).
ASYNC_STEPS=${ASYNC_STEPS:-6}
write_async_job() {  # write_async_job STALENESS SYNC FILE
  local dp=2
  [ "$DEVICE" = cuda ] && dp=auto
  sed -e "s/^device: .*/device: $DEVICE/" -e "s/^weight_sync: .*/weight_sync: $2/" \
      -e "s/^vllm_data_parallel_size: .*/vllm_data_parallel_size: $dp/" -e "s/^max_staleness: .*/max_staleness: $1/" \
      -e "s/^max_steps: .*/max_steps: $ASYNC_STEPS/" -e "s#^harness_bundle: .*#harness_bundle: bench/bundles/slow_tool#" \
      config/url_extract_vllm_cpu_async.yaml >"$3"
}
async_sync=${backends##* }
if [ "$DEVICE" = cuda ] && [ "$gpus" -lt 2 ]; then async_sync=; fi

# make_train CONFIG NAME: the job through the stack, its log in $out (the last lines on a failure)
make_train() {
  export VERI_PROJECT=$project VERI_STATE_DIR=$PWD/$out/state VERI_ROLLOUTS_NETWORK=$project-rollouts
  # Free host ports: a stack of `make up` (8000, 8300) may be running next to this check.
  export VERI_PROXY_PORT=${VERI_PROXY_PORT:-$(free_port)} VERI_CONSOLE_PORT=${VERI_CONSOLE_PORT:-$(free_port)}
  echo "== $DEVICE: make train ($1)"
  local started=$SECONDS
  make --no-print-directory train CONFIG="$1" NAME="$2" >"$out/$2.log" 2>&1 \
    || { tail -40 "$out/$2.log"; echo "gpu_check: make train failed (log: $out/$2.log)" >&2; make -s down; exit 1; }
  echo "make train: $((SECONDS - started)) s (log: $out/$2.log)"
}

for sync in $backends; do
  config=$out/job-$DEVICE-$sync.yaml
  write_job "$sync" "$config"
  if [ -n "$PLAN_ONLY" ]; then
    echo "== $DEVICE, weight sync $sync: the plan ($config)"
    VERI_STATE_DIR=$PWD/$out/plan-$sync "$VERI" stack-env "$config" >/dev/null \
      || { echo "gpu_check: no plan for $gpus GPU(s), weight sync $sync ($config)" >&2; exit 1; }
    continue
  fi
  name=check-$DEVICE-$sync-$(date +%s)
  make_train "$config" "$name"
  # proxy vs direct, from inside the stack's control network (the trainer's image has the bench's deps)
  settings=$("$VERI" stack-env "$config" 2>/dev/null)
  eval "$settings"
  compose=$(make -s -f Makefile -f - print-compose <<<$'print-compose:\n\t@echo $(COMPOSE)')
  throughput=$(VERI_CONTROL_TOKEN=$(cat "$VERI_STATE_DIR/control_token") $compose -p "$project" run --rm -T \
    -e VERI_CONTROL_TOKEN trainer python bench/vllm_throughput.py --proxy-url http://proxy:8000 --sessions 16 \
    2>/dev/null | tail -4 || true)
  echo "$throughput"
  .venv/bin/python bench/gpu_check_report.py "$VERI_STATE_DIR/jobs/$name" build/models/tiny-vllm \
    --sync "$sync" --summary "$summary" --throughput "$(sed -n 's#^proxy / direct throughput: \([0-9.]*\).*#\1#p' <<<"$throughput")" \
    2>/dev/null
  make --no-print-directory -s down
done

if [ -n "$async_sync" ]; then
  jobs=()
  for staleness in 0 1; do
    config=$out/job-$DEVICE-async-$staleness.yaml
    write_async_job "$staleness" "$async_sync" "$config"
    if [ -n "$PLAN_ONLY" ]; then
      echo "== $DEVICE, max_staleness $staleness: the plan ($config)"
      VERI_STATE_DIR=$PWD/$out/plan-async "$VERI" stack-env "$config" >/dev/null \
        || { echo "gpu_check: no plan for $gpus GPU(s), max_staleness $staleness ($config)" >&2; exit 1; }
      continue
    fi
    name=async-$DEVICE-$staleness-$(date +%s)
    make_train "$config" "$name"
    jobs+=("$VERI_STATE_DIR/jobs/$name")
  done
  [ -n "$PLAN_ONLY" ] || .venv/bin/python bench/gpu_check_report.py --async "${jobs[@]}" --summary "$summary"
  [ -n "$PLAN_ONLY" ] || make --no-print-directory -s down
else
  echo "== async vs sync: not on 1 GPU (the trainer and vLLM share it: nothing runs while the trainer steps)"
fi
[ -n "$PLAN_ONLY" ] && exit 0
echo
echo "== summary (paste this into an issue; docs/gpu.md says what else to send when a run fails)"
.venv/bin/python bench/gpu_check_report.py --table "$summary" --device "$DEVICE" --doctor "$out/doctor.txt"
