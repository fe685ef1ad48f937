#!/usr/bin/env bash
# offline_verify.sh IMAGE TASK_DIR [oracle|nop]: one Harbor task run the way the design note proposes,
# under runsc with no network: the agent (here the oracle's solution/solve.sh, or nothing) as root with
# no capabilities in a PID + mount namespace of its own; then the verifier in a private mount namespace
# with the tests piped in, veri's offline tools first on PATH (shims for apt-get/curl, the vendored
# uv/uvx, wheels), and the reward read back on the verifier exec's own stdout.
# Env: TOOLS (uv/uvx in bin/, wheels/; default /tmp/hw/vtools), RT (runtime tree with the verifier's
# python, mounted at /veri/rt; default /tmp/hw/rt-base), WORKDIR (default: the image's, else /app).
set -euo pipefail
IMAGE=$1 TASK=$(realpath "$2") AGENT=${3:-oracle}
here=$(cd "$(dirname "$0")" && pwd)
TOOLS=${TOOLS:-/tmp/hw/vtools} RT=${RT:-/tmp/hw/rt-base}
WORKDIR=${WORKDIR:-$(docker image inspect -f '{{.Config.WorkingDir}}' "$IMAGE")}; WORKDIR=${WORKDIR:-/app}
tools=$(mktemp -d); cp -a "$TOOLS"/. "$tools"/; cp -a "$here/verifier-tools"/. "$tools"/
C=harbor-offline-$$
trap 'docker rm -f "$C" >/dev/null 2>&1; rm -rf "$tools"' EXIT
t0=$(date +%s.%N)
docker run -d --name "$C" --runtime runsc --network none --cap-drop ALL --security-opt no-new-privileges -u 0 \
  --mount type=tmpfs,destination=/tests,tmpfs-size=4096,readonly \
  --mount type=tmpfs,destination=/logs,tmpfs-size=64m,tmpfs-mode=0755 \
  --mount type=tmpfs,destination=/logs/verifier,tmpfs-size=4096,readonly \
  --mount type=tmpfs,destination=/veri/verify,tmpfs-size=4096,readonly \
  -v "$tools:/veri/tools:ro" -v "$RT:/veri/rt:ro" -w "$WORKDIR" \
  "$IMAGE" sh -c 'sleep infinity' >/dev/null
# --- the agent's turn (the oracle: /solution is the agent's own, so docker cp is fine) ---
if [ "$AGENT" = oracle ]; then docker cp "$TASK/solution" "$C:/solution" >/dev/null; fi
run=$([ "$AGENT" = oracle ] && echo "bash /solution/solve.sh" || echo "true")
docker exec -d --privileged "$C" unshare --pid --fork --mount --mount-proc --propagation private \
  setpriv --bounding-set=-all --inh-caps=-all --no-new-privs sh -c \
  "mkdir -p /logs/agent; cd '$WORKDIR' && DEBIAN_FRONTEND=noninteractive $run >/logs/agent/$AGENT.txt 2>&1; echo \$? >/logs/agent/exit; exec sleep infinity"
until docker exec "$C" test -s /logs/agent/exit; do sleep 0.2; done
t1=$(date +%s.%N)
echo "agent ($AGENT) exit $(docker exec "$C" cat /logs/agent/exit) in $(echo "$t1 - $t0" | bc) s (from container start)"
# --- the verifier ---
verify='set -u
mount -t tmpfs -o mode=0755 veri-tests /tests && mount -t tmpfs -o mode=0755 veri-verifier /logs/verifier \
  && mount -t tmpfs -o mode=0700 veri-scratch /veri/verify || { echo "==veri:error== mounts"; exit 90; }
[ -e /etc/ld.so.preload ] && mount --bind /dev/null /etc/ld.so.preload
tar -x -C /tests || { echo "==veri:error== tests"; exit 91; }
mkdir -p /veri/verify/home /veri/verify/uv-cache
cd "$WORKDIR" 2>/dev/null || cd /
export HOME=/veri/verify/home PATH="/veri/tools/shims:/veri/tools/bin:$PATH" UV_OFFLINE=1 UV_NO_CONFIG=1 \
  UV_FIND_LINKS=/veri/tools/wheels UV_PYTHON=/veri/rt/bin/python3.11 UV_PYTHON_DOWNLOADS=never \
  UV_CACHE_DIR=/veri/verify/uv-cache PIP_NO_INDEX=1 PIP_FIND_LINKS=/veri/tools/wheels DEBIAN_FRONTEND=noninteractive
setpriv --bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+sys_chroot,+mknod,+audit_write,+setfcap \
  timeout 300 bash /tests/test.sh >/logs/verifier/test-stdout.txt 2>&1
echo "==veri:exit== $?"
for f in reward.txt reward.json; do [ -f "/logs/verifier/$f" ] && { echo "==veri:$f=="; cat "/logs/verifier/$f"; echo; }; done
echo "==veri:files== $(ls -A /logs/verifier | tr "\n" " ")"
echo "==veri:test-stdout=="; tail -c 3000 /logs/verifier/test-stdout.txt'
tar -C "$TASK/tests" -c . | docker exec -i --privileged -e WORKDIR="$WORKDIR" "$C" unshare -m --propagation private sh -c "$verify"
t2=$(date +%s.%N)
echo "verifier: $(echo "$t2 - $t1" | bc) s"
