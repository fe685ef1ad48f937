"""build_proxy.py PORT APT_DIR DEBS_DIR WHEELS_DIR: a forward HTTP proxy for an offline `docker build`
of a task's Dockerfile (experiment: the design note, offline builds). Passed to the build as the predefined build args
http_proxy/HTTP_PROXY (no Dockerfile change), it answers:
  http://deb.debian.org/...            the signed indexes vendored under APT_DIR, .debs from DEBS_DIR
  http://pypi.veri.internal/simple/    a PEP 503 index of WHEELS_DIR (the mapped base image's pip.conf
                                       points pip there)
and 404 for anything else; every request and its answer is logged, so what a build missed is named."""
import hashlib
import http.server
import os
import re
import sys
import urllib.parse
from pathlib import Path

PORT, APT, DEBS, WHEELS = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
# The pool names a .deb without its version's epoch; vendor-debs.sh keeps it ("cpp_4_12.2.0-3_amd64.deb").
POOL = {re.sub(r"^([^_]+)_\d+_", r"\1_", f.name): f for f in DEBS.glob("*.deb")}
POOL.update({f.name: f for f in DEBS.glob("*.deb")})


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class Proxy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        m = re.match(r"http://([^/]+)(/.*)", self.path)
        host, path = (m.group(1), m.group(2)) if m else ("", self.path)
        body, ctype = self.answer(host.split(":")[0], path)
        status = 200 if body is not None else 404
        sys.stderr.write(f"build-proxy {status} {host}{path}\n")
        self.send_response(status)
        data = body or b"not vendored\n"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def answer(self, host: str, path: str) -> tuple[bytes | None, str]:
        if host == "deb.debian.org":
            if path.endswith(".deb"):
                f = POOL.get(urllib.parse.unquote(os.path.basename(path)), DEBS / "-")
            else:
                f = APT / host / path.lstrip("/")
            return (f.read_bytes() if f.is_file() else None), "application/octet-stream"
        if host == "pypi.veri.internal":
            parts = path.strip("/").split("/")
            if parts[0] == "simple" and len(parts) == 2:
                links = [w.name for w in sorted(WHEELS.iterdir()) if norm(w.name.split("-")[0]) == norm(parts[1])]
                if not links:
                    return None, "text/html"
                html = "".join(f'<a href="/files/{n}#sha256={hashlib.sha256((WHEELS / n).read_bytes()).hexdigest()}">'
                               f"{n}</a>\n" for n in links)
                return html.encode(), "text/html"
            if parts[0] == "files" and len(parts) == 2 and (WHEELS / parts[1]).is_file():
                return (WHEELS / parts[1]).read_bytes(), "application/octet-stream"
        return None, "text/plain"

    def log_message(self, *args: object) -> None:
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Proxy).serve_forever()
