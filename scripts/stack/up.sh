#!/usr/bin/env bash
# `make up`: the compose stack (policy, proxy, launcher, webfixture), healthy, with a fresh control
# token each time it starts (make down && make up rotates it). Needs the images (`make images`) and a
# model folder under $VERI_MODELS_DIR.
set -euo pipefail
COMPOSE=${COMPOSE:?set COMPOSE (make up picks docker compose or docker-compose)}
# compose reads a path without ./ as a volume name: hand it absolute folders.
state=$(realpath -m "${VERI_STATE_DIR:-build/state}")
export VERI_STATE_DIR=$state VERI_MODELS_DIR=$(realpath -m "${VERI_MODELS_DIR:-build/models}")
port=${VERI_PROXY_PORT:-8000}
console_port=${VERI_CONSOLE_PORT:-8300}
source scripts/stack/compose_files.sh  # COMPOSE_FILE for VERI_LAUNCHER_BACKEND (docker or kubernetes)
healthy_ports="$port $console_port"
# the kubernetes launcher is published (run-harness --sandbox launcher): its health says the cluster answered
[ "${VERI_LAUNCHER_BACKEND:-docker}" = kubernetes ] && healthy_ports+=" ${VERI_LAUNCHER_PORT:-8002}"
project=${VERI_PROJECT:-veri}
mkdir -p "$state"
# The state folder holds the control token, every job's trajectories and the span store (session
# keys): only its owner may enter it. No service mounts it, only the sub-folders it uses (compose.yaml).
chmod 700 "$state" || { echo "make up: cannot make $state private (chmod 700): own it or pick another VERI_STATE_DIR" >&2; exit 1; }
scripts/stack/state_owner.sh "$state" || exit 1
# A fresh control token whenever the stack's proxy is not running (first start, or after make down),
# kept while it runs (make train calls this again on a running stack).
proxy=$(VERI_CONTROL_TOKEN=unused $COMPOSE -p "$project" ps -q proxy 2>/dev/null || true)
running=$(for id in $proxy; do docker inspect -f '{{.State.Running}}' "$id" 2>/dev/null; done)
if [ ! -s "$state/control_token" ] || ! grep -qx true <<<"$running"; then
  (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "$state/control_token.tmp" \
    && mv "$state/control_token.tmp" "$state/control_token")
fi
export VERI_CONTROL_TOKEN=$(cat "$state/control_token")
model_dir=$VERI_MODELS_DIR/${VERI_MODEL:-tiny}
[ -f "$model_dir/config.json" ] || { echo "make up: no model at $model_dir (make tiny-model, or set VERI_MODEL)" >&2; exit 1; }

# A policy server that never becomes healthy fails `up` (the proxy waits for it): say what it logged.
if ! $COMPOSE -p "$project" up -d --remove-orphans; then
  scripts/stack/policy_failed.sh "$project" "$state" || true
  exit 1
fi
for _ in $(seq 1 300); do
  if python3 -c "import sys, urllib.request
for port in sys.argv[1:]: urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=2)" $healthy_ports 2>/dev/null; then
    echo "make up: stack healthy; proxy on http://127.0.0.1:$port (control token in $state/control_token)"
    echo "make up: console on http://127.0.0.1:$console_port"
    exit 0
  fi
  sleep 1
done
echo "make up: the stack did not become healthy in 300 s:" >&2
$COMPOSE -p "$project" ps >&2 || true
$COMPOSE -p "$project" logs --tail 40 >&2 || true
exit 1
