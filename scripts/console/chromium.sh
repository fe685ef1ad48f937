#!/usr/bin/env bash
# `make chromium` (a prerequisite of make test): Debian's chromium + chromium-driver for the console's
# browser tests (tests/console/test_browser.py, Selenium). Idempotent: nothing to do when both are there.
# Installs them with apt only as root on Debian (CI starts from a fresh clone); elsewhere says what to run.
set -euo pipefail
say() { echo "make chromium: $*" >&2; }
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  say "chromium and chromedriver are missing: run  sudo apt-get install -y chromium chromium-driver"
  exit 1
fi
say "installing chromium and chromium-driver (apt)"
export DEBIAN_FRONTEND=noninteractive
# Waiting for a dpkg lock another install holds: make test installs in the background too (scripts/host-packages.sh).
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
apt_get install -y -q --no-install-recommends chromium chromium-driver >/dev/null \
  || { apt_get update -q >/dev/null && apt_get install -y -q --no-install-recommends chromium chromium-driver >/dev/null; }
chromium --version >&2
