#!/usr/bin/env bash
# compose-v2.sh OUT — Docker Compose v2 as a CLI plugin in OUT/cli-plugins/docker-compose, from Debian
# trixie's docker-compose package (same mirror as the host's bookworm sources; verified by apt), so
# the stack is tested with `docker compose` (v2, what Docker CE ships) as well as bookworm's
# docker-compose v1. Use it with DOCKER_CONFIG=OUT. Skipped when present.
set -euo pipefail
OUT=${1:?out dir}
plugin=$OUT/cli-plugins/docker-compose
if [ -x "$plugin" ] && DOCKER_CONFIG=$OUT docker compose version >/dev/null 2>&1; then
  echo "compose-v2: $(DOCKER_CONFIG=$OUT docker compose version --short) in $OUT is up to date"; exit 0
fi
read -r mirror _ < <("$(dirname "$0")/debian-mirror.sh" bookworm)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/deb"
echo "deb $mirror trixie main" >"$tmp/sources.list"
apt_opts=(-q -o Dir::Etc::sourcelist="$tmp/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$tmp/lists"
  -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >"$tmp/apt.log" 2>&1 || { tail -5 "$tmp/apt.log" >&2; exit 1; }
(cd "$tmp/deb" && apt-get "${apt_opts[@]}" download docker-compose/trixie >>"$tmp/apt.log" 2>&1) \
  || { tail -5 "$tmp/apt.log" >&2; exit 1; }
dpkg-deb -x "$tmp"/deb/docker-compose_*.deb "$tmp/x"
mkdir -p "$OUT/cli-plugins"
install -m 0755 "$tmp/x/usr/libexec/docker/cli-plugins/docker-compose" "$plugin"
echo "compose-v2: $(DOCKER_CONFIG=$OUT docker compose version --short) in $OUT"
