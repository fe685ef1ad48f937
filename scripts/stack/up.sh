#!/usr/bin/env bash
# `make up`: the compose stack (policy, proxy, launcher, webfixture), healthy, with a fresh control
# token on first start. Needs the images (`make images`) and a model folder under $VERI_MODELS_DIR.
set -euo pipefail
COMPOSE=${COMPOSE:?set COMPOSE (make up picks docker compose or docker-compose)}
# compose reads a path without ./ as a volume name: hand it absolute folders.
state=$(realpath -m "${VERI_STATE_DIR:-build/state}")
export VERI_STATE_DIR=$state VERI_MODELS_DIR=$(realpath -m "${VERI_MODELS_DIR:-build/models}")
port=${VERI_PROXY_PORT:-8000}
console_port=${VERI_CONSOLE_PORT:-8300}
mkdir -p "$state/spans" "$state/outputs"
if [ ! -s "$state/control_token" ]; then
  (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "$state/control_token")
fi
export VERI_CONTROL_TOKEN=$(cat "$state/control_token")
model_dir=$VERI_MODELS_DIR/${VERI_MODEL:-tiny}
[ -f "$model_dir/config.json" ] || { echo "make up: no model at $model_dir (make tiny-model, or set VERI_MODEL)" >&2; exit 1; }

$COMPOSE -p "${VERI_PROJECT:-veri}" up -d --remove-orphans
for _ in $(seq 1 300); do
  if python3 -c "import sys, urllib.request
for port in sys.argv[1:]: urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=2)" "$port" "$console_port" 2>/dev/null; then
    echo "make up: stack healthy; proxy on http://127.0.0.1:$port (control token in $state/control_token)"
    echo "make up: console on http://127.0.0.1:$console_port"
    exit 0
  fi
  sleep 1
done
echo "make up: the stack did not become healthy in 300 s:" >&2
$COMPOSE -p "${VERI_PROJECT:-veri}" ps >&2 || true
$COMPOSE -p "${VERI_PROJECT:-veri}" logs --tail 40 >&2 || true
exit 1
