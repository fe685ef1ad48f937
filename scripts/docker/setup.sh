#!/usr/bin/env bash
# `make docker`: Docker + gVisor (runsc) ready to use; idempotent.
#
# Installs docker.io, runsc, debootstrap (and docker-compose when no compose v2) with apt only when
#   root  AND  Debian  AND  VERI_INSTALL_PACKAGES != 0  AND
#   (CI=true  OR  VERI_INSTALL_PACKAGES=1  OR  no systemd is running — a disposable VM/container
#    such as CI or a dev box, where nothing else owns dockerd)
# (scripts/host-packages.sh: the rule for every host package the set-up installs; VERI_INSTALL_DOCKER is the
# switch's old name). Everywhere else (a workstation or server with systemd) it only checks and says what to run.
# It registers runsc and sets "live-restore": true in /etc/docker/daemon.json (merging; dockerd reloads
# both on SIGHUP, so a changed file costs no restart) and, without systemd, starts dockerd itself,
# logging to $DOCKERD_LOG. live-restore: containers (the stack's services, running sandboxes) keep
# running while dockerd is stopped or restarted, and dockerd takes them back when it starts again.
# runsc must be gVisor >= $RUNSC_MIN: older ones (bookworm's own 20221219) fail statx() with
# AT_NO_AUTOMOUNT, so `ls`, `stat`, `cp -a` ... fail inside every sandbox. On bookworm it comes
# from bookworm-backports (same mirror as the host's; apt pins backports low, nothing else moves).
set -euo pipefail

DAEMON_JSON=${DAEMON_JSON:-/etc/docker/daemon.json}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/veri-dockerd.log}
RUNSC_MIN=20240729

# shellcheck source=scripts/host-packages.sh
source "$(dirname "$0")/../host-packages.sh"  # may_install, apt_install
say() { echo "make docker: $*" >&2; }
die() { say "$*"; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }
has_systemd() { [ -d /run/systemd/system ]; }
has_compose() { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null; }
codename() { . /etc/os-release && echo "${VERSION_CODENAME:-}"; }
# "0.0~20240729.0" (Debian) or "release-20240729.0" (upstream) -> 20240729
runsc_date() {
  local v; v=$(runsc --version 2>/dev/null || true)
  v=$(grep -o '20[0-9]\{6\}' <<<"$v" | head -1 || true); echo "${v:-0}"
}

missing=()
command -v docker >/dev/null || missing+=(docker.io)
command -v dockerd >/dev/null || missing+=(docker.io)
[ "$(runsc_date)" -ge $RUNSC_MIN ] || missing+=(runsc)
command -v debootstrap >/dev/null || [ -n "${BASE_OS_IMAGE:-}" ] || missing+=(debootstrap)
has_compose || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if may_install; then
    pkgs=("${missing[@]}")
    if [[ " ${missing[*]} " == *" runsc "* ]] && [ "$(codename)" = bookworm ]; then
      read -r mirror _ < <("$(dirname "$0")/debian-mirror.sh" bookworm)
      printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$mirror" >/etc/apt/sources.list.d/veri-bookworm-backports.sources
      pkgs=("${pkgs[@]/#runsc/runsc/bookworm-backports}")  # only runsc (no dependencies) from there
    fi
    apt_install "make docker" "${pkgs[@]}" || exit 1
    [ "$(runsc_date)" -ge $RUNSC_MIN ] || die "runsc $(runsc_date) is older than $RUNSC_MIN after the install"
  else
    hint="sudo apt-get install ${missing[*]}"
    [ "$(codename)" != bookworm ] || hint="enable bookworm-backports in your apt sources, then
    sudo apt-get update && sudo apt-get install ${missing[*]/#runsc/runsc/bookworm-backports}"
    die "missing: ${missing[*]} (runsc means gVisor >= $RUNSC_MIN; yours: $(runsc_date)). On Debian:
    $hint
  or run this as root with VERI_INSTALL_PACKAGES=1 to let it do that; then rerun make docker."
  fi
fi

# patchelf: a Harbor task's runtime tree (/veri/rt) is rewritten with it on this host
# (launcher/task_runtime/runtime.py). Only Harbor tasks need it: where apt may not run, a note, not a stop.
if ! command -v patchelf >/dev/null; then
  if may_install; then
    apt_install "make docker" patchelf || exit 1
  else
    echo "make docker: patchelf is missing, which Harbor tasks need (sudo apt-get install patchelf)" >&2
  fi
fi

# Register runsc and live-restore (merge: other keys and runtimes are kept).
runsc_path=$(command -v runsc)
want=$(python3 - "$DAEMON_JSON" "$runsc_path" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
cfg = {}
if os.path.exists(path) and os.path.getsize(path):
    with open(path) as f:
        cfg = json.load(f)
runtimes = cfg.setdefault("runtimes", {})
entry = runtimes.get("runsc") or {}
# --network=host: the sandbox uses the host kernel's network stack inside the container's own
# network namespace (docker networks, DNS and isolation as usual). gVisor's own netstack refuses
# to start on some VMs ("cannot run with network enabled in root network namespace").
args = list(entry.get("runtimeArgs") or [])
if "--network=host" not in args and not any(a.startswith("--network=") for a in args):
    args.append("--network=host")
new = dict(entry, path=entry.get("path") or runsc, runtimeArgs=args)
want = dict(cfg, runtimes=dict(runtimes, runsc=new), **{"live-restore": True})
print("same" if want == cfg else json.dumps(want, indent=2))
PY
)
changed=0
if [ "$want" != same ]; then
  if is_root; then
    mkdir -p "$(dirname "$DAEMON_JSON")"
    printf '%s\n' "$want" >"$DAEMON_JSON.tmp" && mv "$DAEMON_JSON.tmp" "$DAEMON_JSON"
    say "registered runsc and live-restore in $DAEMON_JSON"
    changed=1
  else
    die "runsc or live-restore is not set in $DAEMON_JSON. Add this (merged with what is there) as root:
$want
  then: sudo systemctl reload docker"
  fi
fi

answers() { timeout 10 docker info >/dev/null 2>&1; }

if answers; then
  if [ $changed = 1 ]; then
    # dockerd reloads its runtimes and live-restore on SIGHUP: nothing running is disturbed.
    if has_systemd; then systemctl reload docker || kill -HUP "$(pidof dockerd)"; else kill -HUP "$(pidof dockerd)"; fi
    for _ in $(seq 1 20); do [ "$(docker info --format '{{.LiveRestoreEnabled}}')" = true ] && break; sleep 0.5; done
  fi
else
  if has_systemd; then
    if is_root; then systemctl start docker; else die "dockerd is not running: sudo systemctl start docker"; fi
  elif is_root; then
    if ! pidof dockerd >/dev/null; then
      # A dockerd/containerd killed without cleanup leaves pid files that may name a zombie
      # (or a reused pid) for a while; dockerd then refuses to start or waits for a dead containerd.
      for f in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
        pid=$(cat "$f" 2>/dev/null || true)
        [ -n "$pid" ] || continue
        grep -qsE '^State:\s*[RSD]' "/proc/$pid/status" && grep -qsE '^(dockerd|containerd)$' "/proc/$pid/comm" \
          || rm -f "$f"
      done
      say "starting dockerd (log: $DOCKERD_LOG)"
      setsid nohup dockerd </dev/null >>"$DOCKERD_LOG" 2>&1 &
    fi
  else
    die "dockerd is not running and there is no systemd: start it as root (dockerd &)"
  fi
  for _ in $(seq 1 120); do answers && break; sleep 0.5; done
  answers || die "dockerd does not answer after 60 s; see $DOCKERD_LOG"
fi

docker info --format '{{json .Runtimes}}' | grep -q '"runsc"' \
  || die "dockerd does not list the runsc runtime; restart dockerd (see $DAEMON_JSON)"
if [ "$(docker info --format '{{.LiveRestoreEnabled}}')" != true ]; then
  [ "$(docker info --format '{{.Swarm.LocalNodeState}}')" != active ] \
    || die "dockerd is in swarm mode, which refuses live-restore (set in $DAEMON_JSON): leave the swarm or remove it there"
  die "dockerd runs without live-restore (stopping it would stop every container); restart dockerd (see $DAEMON_JSON)"
fi
say "ready: $(docker version --format 'docker {{.Server.Version}}'), runtimes: $(docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}')"
