#!/usr/bin/env bash
# make_runtime.sh IMAGE OUT: a self-contained runtime tree (experiment: the design note, runtime) from a veri
# bundle image: its Python (/usr/bin/python3.11 + stdlib) with /opt/venv's site-packages, and the
# claude binary when the image has one, plus every shared library they load (glibc and its loader
# included), rewritten with patchelf so they load from /veri/rt whatever the task image's libc is.
# The tree is meant to be mounted read-only at /veri/rt. Prints its size and the time taken.
set -euo pipefail
IMAGE=$1 OUT=$(realpath -m "$2")
RT=/veri/rt
start=$(date +%s.%N)
rm -rf "$OUT"; mkdir -p "$OUT"
# 1. copy the files out of the image (runc, no network, as root), with their library closure
docker run --rm --network none -u 0 --entrypoint sh -v "$OUT:/out" "$IMAGE" -c '
set -e
mkdir -p /out/bin /out/lib
cp -L /usr/bin/python3.11 /out/bin/python3.11
cp -a /usr/lib/python3.11 /out/lib/python3.11
rm -rf /out/lib/python3.11/test /out/lib/python3.11/idlelib /out/lib/python3.11/tkinter \
       /out/lib/python3.11/lib2to3 /out/lib/python3.11/ensurepip /out/lib/python3.11/config-3.11-x86_64-linux-gnu
find /out/lib/python3.11 -name __pycache__ -prune -exec rm -rf {} +
rm -rf /out/lib/python3.11/site-packages /out/lib/python3.11/dist-packages
cp -a /opt/venv/lib/python3.11/site-packages /out/lib/python3.11/site-packages
if [ -e /usr/local/bin/claude ]; then cp -L /usr/local/bin/claude /out/bin/claude; fi
ln -s python3.11 /out/bin/python3; ln -s python3.11 /out/bin/python
# every ELF file: its libraries (glibc, its loader and the rest) into /out/lib
find /out -type f \( -name "*.so*" -o -perm -u+x \) | while read -r f; do
  head -c4 "$f" | grep -q ELF || continue
  ldd "$f" 2>/dev/null | awk "/=> \\//{print \$3} /ld-linux/{print \$1}"
done | sort -u | while read -r lib; do cp -Ln "$lib" /out/lib/ 2>/dev/null || true; done
chown -R '"$(id -u):$(id -g)"' /out'
# 2. rewrite: executables load /veri/rt/lib/ld-linux; everything finds its libraries in /veri/rt/lib
loader=$(cd "$OUT/lib" && ls ld-linux-x86-64.so.2)
find "$OUT" -type f | while read -r f; do
  head -c4 "$f" | grep -q ELF || continue
  case "$f" in */lib/ld-linux-x86-64.so.2) continue ;; esac
  if patchelf --print-interpreter "$f" >/dev/null 2>&1; then
    patchelf --set-interpreter "$RT/lib/$loader" "$f"
  fi
  patchelf --force-rpath --set-rpath "$RT/lib" "$f" 2>/dev/null || true
done
# 3. Python finds its stdlib from PYTHONHOME or from its own path (/veri/rt/bin/../lib/python3.11)
end=$(date +%s.%N)
echo "runtime tree $OUT: $(du -sh "$OUT" | cut -f1), $(find "$OUT" -type f | wc -l) files, built in $(echo "$end - $start" | bc) s"
echo "libraries: $(ls "$OUT/lib" | grep -v python3.11 | tr '\n' ' ')"
