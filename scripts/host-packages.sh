#!/usr/bin/env bash
# host-packages.sh WHO PACKAGE=CHECK... — the Debian packages the set-up needs on the host, each with the shell
# command that passes once it is there (`npm=command -v npm`). Every CHECK that fails is installed with apt where
# the rule below allows it; elsewhere WHO stops at once, with one line naming the command that fixes it. Nothing
# to do (every CHECK passes) costs nothing: call it just before the tool is used, so that a step that is up to
# date (make vendor on an air-gapped box) never asks for it. Sourced (make docker: scripts/docker/setup.sh), it
# gives the rule (may_install) and the install (apt_install) alone.
#
# The rule, make docker's from the start: apt installs only where
#   root  AND  Debian  AND  VERI_INSTALL_PACKAGES != 0  AND
#   (CI=true  OR  VERI_INSTALL_PACKAGES=1  OR  no systemd is running: a container or throw-away VM, where nothing
#    else owns the system's packages).
# A workstation or server with systemd is only checked. VERI_INSTALL_DOCKER is VERI_INSTALL_PACKAGES's old name.
#
# What uses it: make docker (docker.io, runsc, debootstrap, docker-compose, patchelf), make venv (python3-venv: python3 -m
# venv needs ensurepip), make vendor (python3-pip: vendor-wheels.sh's pip download; npm: vendor-npm.sh's npm pack),
# make test's Kubernetes build (dpkg-dev: dpkg-source; patch). A minimal Debian 12 with python3 has none of them.

install_switch() { echo "${VERI_INSTALL_PACKAGES:-${VERI_INSTALL_DOCKER:-}}"; }

may_install() {
  [ "$(install_switch)" != 0 ] || return 1
  [ "$(id -u)" = 0 ] || return 1
  [ -r /etc/debian_version ] && grep -qi '^ID=debian' /etc/os-release 2>/dev/null || return 1
  [ "${CI:-}" = true ] || [ "$(install_switch)" = 1 ] || [ ! -d /run/systemd/system ]
}

# apt_install WHO PACKAGE...: apt-get update, then install (no recommends), quietly; on a failure the log's tail
# and the log's path. It waits for a dpkg lock another install holds (make test installs in the background too).
apt_install() {
  local who=$1 log
  shift
  log=$(mktemp /tmp/veri-apt.XXXXXX.log)
  echo "$who: installing $* with apt" >&2
  # The package lists may be missing or stale on a fresh machine.
  if ! { DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get -o DPkg::Lock::Timeout=600 update -q \
      && DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --no-install-recommends "$@"; } >"$log" 2>&1; then
    tail -20 "$log" >&2
    echo "$who: apt-get failed (log: $log)" >&2
    return 1
  fi
  rm -f "$log"
}

# Run, not sourced: check each PACKAGE=CHECK, install what is missing or stop with the command.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  who=${1:?usage: host-packages.sh WHO PACKAGE=CHECK...}
  shift
  missing=() failed=()
  for need in "$@"; do
    sh -c "${need#*=}" >/dev/null 2>&1 || { missing+=("${need%%=*}"); failed+=("\`${need#*=}\`"); }
  done
  [ ${#missing[@]} -gt 0 ] || exit 0
  if may_install; then
    apt_install "$who" "${missing[@]}" || exit 1
    for need in "$@"; do
      sh -c "${need#*=}" >/dev/null 2>&1 \
        || { echo "$who: \`${need#*=}\` still fails after installing ${need%%=*}" >&2; exit 1; }
    done
    exit 0
  fi
  sudo=$([ "$(id -u)" = 0 ] || echo "sudo ")
  printf -v checks '%s, ' "${failed[@]}"
  echo "$who: needs ${missing[*]} (${checks%, } failed): ${sudo}apt-get install ${missing[*]} (Debian; as root" \
    "with VERI_INSTALL_PACKAGES=1, make installs them itself), then rerun" >&2
  exit 1
fi
