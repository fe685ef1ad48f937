#!/usr/bin/env bash
# `make train CONFIG=... [RESUME=1] [NAME=job]`: validate, build what is missing, bring the stack up
# with the job's model and sampling, then run the trainer service. Ctrl-C stops it: the trainer
# removes the running step's sandboxes (compose.yaml gives it stop_grace_period for that), compose
# removes the trainer container, the last checkpoint stays (RESUME=1 continues from it); exit 130.
set -euo pipefail
CONFIG=${CONFIG:?usage: make train CONFIG=config/<job>.yaml [RESUME=1] [NAME=job]}
COMPOSE=${COMPOSE:?}
VERI=${VERI:-.venv/bin/veri}
project=${VERI_PROJECT:-veri}
name=${NAME:-$(basename "${CONFIG%.*}")}

# The model first (veri's own are built here): a vLLM job's plan reads its head counts and size.
model=$("$VERI" stack-env "$CONFIG" --model-only)
eval "$model"
model_dir=$VERI_MODELS_DIR/$VERI_MODEL
if [ ! -f "$model_dir/config.json" ]; then
  case $VERI_MODEL in
    tiny|tiny-vllm|smollm2) "$VERI" model "$VERI_MODEL" --out "$model_dir" ;;
    *) echo "make train: no model at $model_dir; put a transformers folder there" >&2; exit 1 ;;
  esac
fi
# The host's facts that decide a first run (driver, GPUs, a container that gets them, docker + runsc,
# disk, shm, the GPU images, the model folder, the plan): stop on the first run's failures, with the fixes.
"$VERI" doctor --quiet "$CONFIG" || { echo "make train: stopped before starting anything: fix what veri doctor" \
  "says above (make doctor CONFIG=$CONFIG shows every fact)" >&2; exit 1; }
# The job's stack settings; a vLLM job's plan is made here, once, and printed (stack-env's stderr). The
# trainer container reads a copy of the job file, VERI_JOB_FILE (the original may be anywhere on this host).
settings=$("$VERI" stack-env "$CONFIG" --name "$name")
eval "$settings"
"$VERI" validate "$CONFIG"
if [ "$VERI_POLICY_BACKEND" = vllm ]; then
  # The vLLM images: the CPU twin is (re)built offline here when its inputs changed (veri's code is in
  # it); the GPU ones need their wheels vendored online first.
  for wanted in $(sed -n 's/^ *"image": "\(.*\)",*$/\1/p' "${COMPOSE_FILE#*:}" | sort -u); do
    case $wanted in
      */vllm-cpu|*/trainer-cpu) make --no-print-directory images-vllm-cpu ;;
      *) docker image inspect "$wanted" >/dev/null 2>&1 \
           || { echo "make train: no image $wanted: run make vendor-gpu (online, once), then make images-gpu" >&2; exit 1; } ;;
    esac
  done
fi
# The bundle's base: make images built veri/base and veri/base-codex-agent; veri/base-claude-agent (Claude Code,
# whose terms building it accepts: docs/licences.md) is built for a bundle FROM it only.
[ "${VERI_BUNDLE_BASE_TARGET:-images}" = images ] || make --no-print-directory "$VERI_BUNDLE_BASE_TARGET"
source scripts/stack/compose_files.sh  # the launcher backend's compose files (up.sh and the run below)
image=$("$VERI" harness build "$VERI_BUNDLE" --prefix "${IMAGE_PREFIX:-veri}" --vendor "${VENDOR:-vendor}" | tail -n 1)
# A Harbor dataset: task images, trees and staged tests made here (the trainer container has no Docker);
# the trainer reads what was made from the file this prints (nothing for other jobs).
tasks=$("$VERI" tasks stage "$CONFIG" --image "$image" --name "$name")
scripts/stack/up.sh
state=$(realpath -m "${VERI_STATE_DIR:-build/state}")
export VERI_STATE_DIR=$state VERI_CONTROL_TOKEN=$(cat "$state/control_token")
echo "make train: job $name on the console: http://127.0.0.1:${VERI_CONSOLE_PORT:-8300}/jobs/$name"
# The repo is the trainer's /work: the job's paths lie inside it (stack-env refuses others), its model at /models.
# On Ctrl-C compose v1 stops the trainer container and exits 1 whatever the trainer said, and the
# docker CLI stops relaying the container's output; compose v2 returns at once, while the trainer
# is still stopping (or, sometimes, before it has the signal at all). The trap notes the signal (it
# runs once compose is back); this script makes sure the trainer container (named, so it can) got
# it and is gone, says where the job stands and ends 130. (A SIGTERM to this script alone reaches
# neither compose nor the trainer: it waits for them as it would without the trap.)
stopped=
trap 'stopped=1' INT TERM
resume="make train CONFIG=$CONFIG RESUME=1${NAME:+ NAME=$NAME}"
container="$project-train-$(tr -c 'a-zA-Z0-9_.-' '-' <<<"$name" | sed 's/-*$//')-$$"
status=0
since=$(date +%s)
# The job says it was stopped (job.json, written by the trainer on Ctrl-C) during this run: compose v1
# exits 1 on Ctrl-C, and bash drops the pending SIGINT (no trap) when its child exits normally.
job_stopped() {
  python3 -c 'import json, sys; job = json.load(open(sys.argv[1]))
sys.exit(not (job.get("status") == "stopped" and (job.get("ended_at") or 0) >= int(sys.argv[2])))' \
    "$state/jobs/$name/job.json" "$since" 2>/dev/null
}
$COMPOSE -p "$project" run --rm --name "$container" -e VERI_RESUME_COMMAND="$resume" trainer \
  veri train "$VERI_JOB_FILE" --name "$name" \
  --output /state/jobs --proxy-url http://proxy:8000 --policy-url "${VERI_POLICY_URLS:-http://policy:8001}" \
  --sandbox launcher --launcher-url http://launcher:8002 --image "$image" ${tasks:+--harbor-tasks "$tasks"} ${RESUME:+--resume} || status=$?
if [ "$status" != 0 ] && { [ -n "$stopped" ] || [ "$status" = 130 ] || job_stopped; }; then
  # compose v2 sometimes returns without passing the signal on (a race in its signal proxy): the
  # trainer would train on in the background. Pass it on here (a second one is only a note to the
  # trainer), give it compose.yaml's stop_grace_period to remove its sandboxes, then remove it.
  if [ "$(docker inspect -f '{{.State.Running}}' "$container" 2>/dev/null)" = true ]; then
    docker kill --signal INT "$container" >/dev/null 2>&1 || true
  fi
  timeout 70 docker wait "$container" >/dev/null 2>&1 || true
  docker rm -f "$container" >/dev/null 2>&1 || true
  job=$state/jobs/$name
  checkpoint=$("$VERI" job status "$job" --field checkpoint 2>/dev/null || true)
  echo "make train: stopped; last checkpoint: ${checkpoint:-none yet (RESUME=1 starts over at step 0)};" \
    "job folder $job; continue with: $resume" >&2
  exit 130
fi
[ "$status" = 0 ] || exit "$status"
echo "make train: archive in $state/jobs/$name (trajectories/, metrics.jsonl, tensorboard/)"
