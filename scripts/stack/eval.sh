#!/usr/bin/env bash
# `make eval CONFIG=... [ARGS="--job NAME --step K --tasks 0:32 -n 4"]`: bring the stack up with the job's
# model and sampling (as make train does), then run `veri eval` in a trainer container against it: the
# job's harness (the launcher's sandboxes), proxy, policy and reward functions, no training. The eval
# archive lands beside the jobs (<state>/jobs/<name>), where the console lists it.
set -euo pipefail
CONFIG=${CONFIG:?usage: make eval CONFIG=config/<job>.yaml [ARGS="--job NAME --step K|final|base ..."]}
COMPOSE=${COMPOSE:?}
VERI=${VERI:-.venv/bin/veri}
project=${VERI_PROJECT:-veri}

model=$("$VERI" stack-env "$CONFIG" --model-only)
eval "$model"
if [ ! -f "$VERI_MODELS_DIR/$VERI_MODEL/config.json" ]; then
  case $VERI_MODEL in
    tiny|tiny-vllm|smollm2) "$VERI" model "$VERI_MODEL" --out "$VERI_MODELS_DIR/$VERI_MODEL" ;;
    *) echo "make eval: no model at $VERI_MODELS_DIR/$VERI_MODEL; put a transformers folder there" >&2; exit 1 ;;
  esac
fi
# the trainer container reads a copy of the job file, VERI_JOB_FILE (named as the original, as eval names its archive)
settings=$("$VERI" stack-env "$CONFIG" --name "$(basename "${CONFIG%.*}")")
eval "$settings"
"$VERI" validate "$CONFIG"
# The bundle's base: make images built veri/base and veri/base-codex-agent; veri/base-claude-agent (Claude Code,
# whose terms building it accepts: docs/licences.md) is built for a bundle FROM it only.
[ "${VERI_BUNDLE_BASE_TARGET:-images}" = images ] || make --no-print-directory "$VERI_BUNDLE_BASE_TARGET"
source scripts/stack/compose_files.sh
image=$("$VERI" harness build "$VERI_BUNDLE" --prefix "${IMAGE_PREFIX:-veri}" --vendor "${VENDOR:-vendor}" | tail -n 1)
# A Harbor dataset: task images, trees and staged tests made here (the trainer container has no Docker);
# the trainer reads what was made from the file this prints (nothing for other jobs).
tasks=$("$VERI" tasks stage "$CONFIG" --image "$image" --name "$(basename "${CONFIG%.*}")")
scripts/stack/up.sh
state=$(realpath -m "${VERI_STATE_DIR:-build/state}")
export VERI_STATE_DIR=$state VERI_CONTROL_TOKEN=$(cat "$state/control_token")
# ARGS is split on purpose: it carries the eval's own flags.
# shellcheck disable=SC2086
$COMPOSE -p "$project" run --rm trainer \
  veri eval "$VERI_JOB_FILE" --output /state/jobs --proxy-url http://proxy:8000 \
  --policy-url "${VERI_POLICY_URLS:-http://policy:8001}" --sandbox launcher --launcher-url http://launcher:8002 \
  --image "$image" ${tasks:+--harbor-tasks "$tasks"} ${ARGS:-}
