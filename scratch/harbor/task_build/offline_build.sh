#!/usr/bin/env bash
# offline_build.sh DOCKERFILE CONTEXT TAG: an unmodified task Dockerfile built with no registry and no
# internet: FROM ubuntu:24.04 mapped to harbor-probe/task-os-base (the only change: the FROM line),
# apt and pip answered by build_proxy.py through the predefined proxy build args.
set -euo pipefail
DOCKERFILE=$1 CONTEXT=$2 TAG=$3
here=$(cd "$(dirname "$0")" && pwd)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 "$here/build_proxy.py" "$port" /tmp/hw/apt-mirror /tmp/hw/debs /tmp/hw/task-wheels 2>/tmp/hw/build-proxy.log &
proxy=$!; trap 'kill $proxy' EXIT
sleep 0.5
mapped=$(mktemp); sed -E 's#^(FROM[[:space:]]+)ubuntu:24\.04#\1harbor-probe/task-os-base#I' "$DOCKERFILE" >"$mapped"
diff "$DOCKERFILE" "$mapped" || true
start=$(date +%s.%N)
docker build --network host -f "$mapped" -t "$TAG" \
  --build-arg http_proxy=http://127.0.0.1:$port --build-arg HTTP_PROXY=http://127.0.0.1:$port \
  --build-arg https_proxy=http://127.0.0.1:$port --build-arg no_proxy= "$CONTEXT" >/tmp/hw/build.log 2>&1 \
  && echo "built $TAG in $(echo "$(date +%s.%N) - $start" | bc) s" || { echo "BUILD FAILED"; tail -25 /tmp/hw/build.log; }
echo "proxy: $(grep -c ' 200 ' /tmp/hw/build-proxy.log) answered, $(grep -c ' 404 ' /tmp/hw/build-proxy.log) not vendored:"; grep ' 404 ' /tmp/hw/build-proxy.log | head
