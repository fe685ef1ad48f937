#!/bin/sh
# Stands in for https://astral.sh/uv/<version>/install.sh in veri's offline verifier (docs/harbor-tasks.md, "Offline builds and verifier tools"):
# links the vendored uv/uvx into $HOME/.local/bin (or $XDG_BIN_HOME) and writes the `env` file the
# real installer writes, so `source $HOME/.local/bin/env` works as test.sh expects.
set -e
d="${XDG_BIN_HOME:-$HOME/.local/bin}"
mkdir -p "$d"
ln -sf /veri/tools/bin/uv "$d/uv"
ln -sf /veri/tools/bin/uvx "$d/uvx"
printf 'case ":${PATH}:" in *":%s:"*) ;; *) export PATH="%s:$PATH" ;; esac\n' "$d" "$d" >"$d/env"
echo "veri: $(/veri/tools/bin/uv --version) (vendored, offline) linked into $d"
