#!/usr/bin/env bash
# Prints "MIRROR SECURITY_MIRROR" for SUITE (default bookworm) from the host's apt sources
# (/etc/apt/sources.list and /etc/apt/sources.list.d/*.list|*.sources); DEBIAN_MIRROR and
# DEBIAN_SECURITY_MIRROR override. Nothing is hard-coded: a host without a matching source fails.
set -euo pipefail
SUITE=${1:-bookworm}
python3 - "$SUITE" <<'PY'
import glob, os, re, sys
suite = sys.argv[1]
entries = []  # (uri, suites)
def one_line(path):
    for line in open(path):
        f = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
        if len(f) >= 3 and f[0] == "deb":
            entries.append((f[1], [f[2]]))
def deb822(path):
    for stanza in open(path).read().split("\n\n"):
        d = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            k, v = line.split(":", 1)
            d[k.strip().lower()] = v.split()
        if "deb" in d.get("types", []) and d.get("enabled", ["yes"])[0].lower() != "no":
            for uri in d.get("uris", []):
                entries.append((uri, d.get("suites", [])))
if os.path.exists("/etc/apt/sources.list"):
    one_line("/etc/apt/sources.list")
for p in sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    one_line(p)
for p in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    deb822(p)
def find(s):
    return next((u.rstrip("/") for u, suites in entries if s in suites), "")
main = os.environ.get("DEBIAN_MIRROR") or find(suite)
sec = os.environ.get("DEBIAN_SECURITY_MIRROR") or find(suite + "-security")
if not main:
    sys.exit(f"no apt source for {suite} on this host: set DEBIAN_MIRROR=http://<your Debian mirror>/debian")
print(main, sec or "-")
PY
