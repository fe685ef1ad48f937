#!/usr/bin/env bash
# `make train CONFIG=... [RESUME=1] [NAME=job]`: validate, build what is missing, bring the stack up
# with the job's model and sampling, then run the trainer service. Ctrl-C stops it; the last
# checkpoint stays (RESUME=1 continues from it).
set -euo pipefail
CONFIG=${CONFIG:?usage: make train CONFIG=config/<job>.yaml [RESUME=1] [NAME=job]}
COMPOSE=${COMPOSE:?}
VERI=${VERI:-.venv/bin/veri}
project=${VERI_PROJECT:-veri}
name=${NAME:-$(basename "${CONFIG%.*}")}

eval "$("$VERI" stack-env "$CONFIG")"
model_dir=$VERI_MODELS_DIR/$VERI_MODEL
if [ ! -f "$model_dir/config.json" ]; then
  case $VERI_MODEL in
    tiny|smollm2) "$VERI" model "$VERI_MODEL" --out "$model_dir" ;;
    *) echo "make train: no model at $model_dir; put a transformers folder there" >&2; exit 1 ;;
  esac
fi
"$VERI" validate "$CONFIG"
image=$("$VERI" harness build "$VERI_BUNDLE" | tail -n 1)
scripts/stack/up.sh
state=$(realpath -m "${VERI_STATE_DIR:-build/state}")
export VERI_STATE_DIR=$state VERI_CONTROL_TOKEN=$(cat "$state/control_token")
# The repo is the trainer's /work: model paths in the config must lie inside it (build/models/...).
$COMPOSE -p "$project" run --rm trainer veri train "$CONFIG" --name "$name" --output /state/jobs \
  --proxy-url http://proxy:8000 --policy-url http://policy:8001 \
  --sandbox launcher --launcher-url http://launcher:8002 --image "$image" ${RESUME:+--resume}
echo "make train: archive in $state/jobs/$name (trajectories/, metrics.jsonl, tensorboard/)"
