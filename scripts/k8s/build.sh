#!/usr/bin/env bash
# `make k8s`: Kubernetes 1.20 binaries for the test control plane, built from Debian's source package.
#
# Nothing downloadable ships a cluster here (no container registry, no Go module proxy, no GitHub), but
# Debian bookworm carries the `kubernetes` source package (1.20, full tree with vendor/), Go 1.19 and
# etcd 3.4. This script, idempotent and cached under build/k8s/:
#   1. a private apt configuration (build/k8s/apt/) whose sources are the host's Debian mirror with
#      deb-src added — the system's apt sources are never edited;
#   2. downloads the `kubernetes` source package and the .debs it needs (golang-1.19, etcd-server,
#      kubernetes-client for kubectl 1.20, Debian's reflect2 1.0.2) and unpacks them under build/k8s/
#      (nothing is installed system-wide: the host may have another kubectl);
#   3. lays the tree out for GOPATH mode (module mode stops on "updates to go.mod needed"), swaps the
#      vendored reflect2 1.0.1 (broken on Go >= 1.18) for 1.0.2, generates pkg/generated/openapi
#      (missing from the source package) with the vendored openapi-gen;
#   4. CGO_ENABLED=0 go build -tags providerless of kube-apiserver, kube-controller-manager,
#      kube-scheduler and kubelet into build/k8s/bin/ (with etcd and kubectl next to them).
# Cold: ~7 min on 2 cores (Go build cache ~1.1 GB in build/k8s/gocache); warm: a few seconds.
# Patches for the real-kubelet tier live in scripts/k8s/patches/ and are applied before the build.
set -euo pipefail
shopt -s nullglob

REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${K8S_BUILD_DIR:-$REPO/build/k8s}
K8S_VERSION=1.20.5+really1.20.2-1.1+deb12u1
GO_PKG=golang-1.19
DEBS=("$GO_PKG-go" "$GO_PKG-src" etcd-server kubernetes-client golang-github-modern-go-reflect2-dev)
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet)

say() { echo "k8s build: $*" >&2; }
die() { say "$*"; exit 1; }

APT_DIR=$OUT/apt
ROOT=$OUT/root           # the unpacked .debs
GOPATH_DIR=$OUT/gopath
TREE=$GOPATH_DIR/src/k8s.io/kubernetes
BIN=$OUT/bin
mkdir -p "$OUT" "$BIN"

# One build at a time (make test's background build and a user's `make k8s` may overlap).
exec 9>"$OUT/.lock"
flock 9

apt_private() {
  apt-get -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$APT_DIR/sources.list.d" \
    -o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache" \
    -o Debug::NoLocking=1 -o APT::Sandbox::User=root "$@"
}

# The host's Debian sources (deb822 or one-line), with deb-src added, in our own folder.
apt_config() {
  [ -f "$APT_DIR/.updated" ] && return
  command -v apt-get >/dev/null || die "apt-get not found: this build needs Debian bookworm's packages"
  mkdir -p "$APT_DIR/sources.list.d" "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
  local found=0 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && grep -q 'debian' "$f" || continue
    sed -E 's/^Types:.*/Types: deb deb-src/' "$f" >"$APT_DIR/sources.list.d/$(basename "$f")"
    found=1
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && grep -qE '^deb .*debian' "$f" || continue
    { grep -E '^deb .*debian' "$f"; grep -E '^deb .*debian' "$f" | sed 's/^deb /deb-src /'; } \
      >"$APT_DIR/sources.list.d/$(basename "$f" .list).list"
    found=1
  done
  [ "$found" = 1 ] || die "no Debian apt source found in /etc/apt: this build needs a Debian bookworm mirror"
  say "apt update (private lists in $APT_DIR)"
  apt_private update >"$APT_DIR/update.log" 2>&1 || { tail -20 "$APT_DIR/update.log" >&2; die "apt update failed"; }
  touch "$APT_DIR/.updated"
}

fetch_debs() {
  [ -f "$ROOT/.done" ] && return
  mkdir -p "$OUT/debs" "$ROOT"
  say "download ${DEBS[*]}"
  (cd "$OUT/debs" && apt_private download "${DEBS[@]}") >"$OUT/debs/download.log" 2>&1 \
    || { tail -20 "$OUT/debs/download.log" >&2; die "apt download failed"; }
  local deb
  for deb in "$OUT"/debs/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
  touch "$ROOT/.done"
}

fetch_source() {
  [ -f "$TREE/.unpacked" ] && return
  "$REPO/scripts/host-packages.sh" "k8s build" "dpkg-dev=command -v dpkg-source"  # not in a minimal Debian 12
  mkdir -p "$OUT/src"
  say "download the kubernetes $K8S_VERSION source package"
  (cd "$OUT/src" && apt_private source --download-only "kubernetes=$K8S_VERSION") >"$OUT/src/download.log" 2>&1 \
    || { tail -20 "$OUT/src/download.log" >&2; die "apt source failed"; }
  rm -rf "$TREE" && mkdir -p "$(dirname "$TREE")"
  say "unpack (dpkg-source applies Debian's patches)"
  dpkg-source --no-check -x "$OUT"/src/kubernetes_*.dsc "$TREE" >"$OUT/src/unpack.log" 2>&1 \
    || { tail -20 "$OUT/src/unpack.log" >&2; die "dpkg-source failed"; }
  touch "$TREE/.unpacked"
}

go_env() {
  export GOROOT=$ROOT/usr/lib/go-1.19 GOPATH=$GOPATH_DIR GO111MODULE=off GOCACHE=$OUT/gocache GOFLAGS= \
    GOPROXY=off CGO_ENABLED=0 PATH=$ROOT/usr/lib/go-1.19/bin:$PATH
}

# Debian's reflect2 1.0.2 in place of the vendored 1.0.1 (which reads Go runtime internals that Go 1.18 changed).
swap_reflect2() {
  local vendored=$TREE/vendor/github.com/modern-go/reflect2
  [ -f "$vendored/go_above_118.go" ] && return  # 1.0.2 has it
  rm -rf "$vendored"
  cp -r "$ROOT/usr/share/gocode/src/github.com/modern-go/reflect2" "$vendored"
  [ -f "$vendored/go_above_118.go" ] || die "reflect2 from Debian is not 1.0.2"
}

# pkg/generated/openapi is not in the source package: generate it the way build/root/Makefile.generated_files
# does (every Go folder, staging/src seen as vendor/, with a +k8s:openapi-gen tag).
gen_openapi() {
  local out=$TREE/pkg/generated/openapi/zz_generated.openapi.go
  [ -f "$out" ] && return
  say "openapi-gen"
  (cd "$TREE" && go build -o "$OUT/tools/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen)
  local inputs
  inputs=$(cd "$TREE" && find -H . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o -type f -name '*.go' -print \
    | sed -e 's|^./staging/src|vendor|' -e 's|/[^/]*$||' -e 's|^./||' | LC_ALL=C sort -u \
    | while read -r d; do find -H "$d" -maxdepth 1 -type f -name '*.go'; done \
    | xargs grep -l '^// *+k8s:' | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
    | xargs grep -l '+k8s:openapi-gen=' | xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd,)
  (cd "$TREE" && "$OUT/tools/openapi-gen" --logtostderr -i "$inputs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$OUT/tools/openapi-violations.report" -o "$GOPATH_DIR/src") >"$OUT/tools/openapi-gen.log" 2>&1 \
    || { tail -20 "$OUT/tools/openapi-gen.log" >&2; die "openapi-gen failed"; }
  diff -q "$OUT/tools/openapi-violations.report" "$TREE/api/api-rules/violation_exceptions.list" >/dev/null \
    || die "openapi-gen's API rule report differs from api/api-rules/violation_exceptions.list: the inputs are wrong"
}

# Our patches (scripts/k8s/patches/*.patch, for the real-kubelet tier), applied once; a changed set is
# reversed and reapplied so the cached tree always matches the scripts.
apply_patches() {
  local applied=$OUT/applied-patches p
  mkdir -p "$applied"
  if ! diff -qr "$applied" "$REPO/scripts/k8s/patches" >/dev/null 2>&1; then
    "$REPO/scripts/host-packages.sh" "k8s build" "patch=command -v patch"  # not in a minimal Debian 12
    local old=("$applied"/*.patch) i
    for ((i = ${#old[@]} - 1; i >= 0; i--)); do patch -s -R -p1 -d "$TREE" <"${old[i]}"; rm "${old[i]}"; done
    for p in "$REPO"/scripts/k8s/patches/*.patch; do
      [ -f "$p" ] || continue
      say "patch $(basename "$p")"
      patch -s -p1 -d "$TREE" <"$p" || die "$(basename "$p") does not apply to kubernetes $K8S_VERSION"
      cp "$p" "$applied/"
    done
  fi
}

build_binaries() {
  local stamp b missing=0
  stamp=$(cat "$0" "$REPO"/scripts/k8s/patches/*.patch | sha256sum | cut -c1-16)
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || missing=1; done
  [ "$missing" = 0 ] && [ "$(cat "$BIN/.stamp" 2>/dev/null)" = "$stamp" ] && return
  say "go build ${BINARIES[*]} (cold: ~7 min on 2 cores)"
  # The version both places hack/lib/version.sh sets it (the apiserver's /version reads client-go's).
  local ldflags="-s -w" pkg
  for pkg in component-base/version client-go/pkg/version; do
    pkg=k8s.io/kubernetes/vendor/k8s.io/$pkg
    ldflags+=" -X $pkg.gitVersion=v1.20.2 -X $pkg.gitMajor=1 -X $pkg.gitMinor=20 -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=2021-01-13T00:00:00Z"
  done
  local pkgs=() started=$SECONDS
  for b in "${BINARIES[@]}"; do pkgs+=("./cmd/$b"); done
  (cd "$TREE" && go build -tags providerless -trimpath -ldflags "$ldflags" -o "$BIN/" "${pkgs[@]}")
  say "built in $((SECONDS - started)) s"
  echo "$stamp" >"$BIN/.stamp"
}

# The pod sandbox's pause binary (static, from the tree), for the real-kubelet tier's locally imported image:
# no registry serves k8s.gcr.io/pause here.
build_pause() {
  [ -x "$BIN/pause" ] && return
  command -v gcc >/dev/null || { say "no gcc: no pause binary (only the real-kubelet tier needs it)"; return; }
  gcc -Os -Wall -Werror -static -DVERSION=v3.2-veri -o "$BIN/pause" "$TREE/build/pause/linux/pause.c" && strip "$BIN/pause" \
    || say "the static pause build failed (libc6-dev missing?); only the real-kubelet tier needs it"
}

# etcd and kubectl 1.20 from the unpacked .debs, next to the built binaries.
link_tools() {
  ln -sf "$ROOT/usr/bin/etcd" "$BIN/etcd"
  ln -sf "$ROOT/usr/bin/kubectl" "$BIN/kubectl"
}

main() {
  apt_config
  fetch_debs
  fetch_source
  go_env
  swap_reflect2
  gen_openapi
  apply_patches
  build_binaries
  build_pause
  link_tools
  say "ready: $BIN ($(cd "$BIN" && ls | paste -sd' '))"
}

main "$@"
