"""The build proxy: a forward HTTP proxy that answers an offline `docker build` of a task's Dockerfile from
vendor/tasks/. Handed to the build as Docker's predefined `http_proxy`/`HTTP_PROXY` build args (the
Dockerfile needs no `ARG`), it answers

  http://deb.debian.org/...            Debian's signed indexes vendored under apt/, the .debs from debs/
  http://pypi.veri.internal/simple/    a PEP 503 index of wheels/ (the mapped base's pip.conf points there)

and 404 for anything else. Every miss is kept, so a failed build names what was not vendored."""

from __future__ import annotations

import hashlib
import http.server
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

DEBIAN_HOST = "deb.debian.org"
PYPI_HOST = "pypi.veri.internal"


def normalize(name: str) -> str:
    """A project name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pool_names(debs: Path) -> dict[str, Path]:
    """A .deb under the name the pool gives it: without the epoch that vendor-debs.sh keeps as `_N_`
    ("cpp_4_12.2.0-3_amd64.deb" is the pool's "cpp_12.2.0-3_amd64.deb"), and under its own name."""
    files = sorted(debs.glob("*.deb")) if debs.is_dir() else []
    names = {re.sub(r"^([^_]+)_\d+_", r"\1_", f.name): f for f in files}
    names.update({f.name: f for f in files})
    return names


@dataclass
class Answers:
    """What the proxy answered (URL list) and what it could not (the misses a failed build names)."""
    served: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


class BuildProxy:
    """`with BuildProxy(vendor) as proxy:` serves on 127.0.0.1:proxy.port until the block ends."""

    def __init__(self, vendor: Path) -> None:
        self.apt = vendor / "apt"
        self.debs = pool_names(vendor / "debs")
        self.wheels = vendor / "wheels"
        self.answers = Answers()
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> BuildProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, url: str) -> bytes | None:
        """The bytes for URL (an absolute http URL, as a proxy is asked), or None: not vendored."""
        parts = urllib.parse.urlsplit(url)
        host, path = (parts.hostname or ""), urllib.parse.unquote(parts.path)
        if host == DEBIAN_HOST:
            if path.endswith(".deb"):
                deb = self.debs.get(path.rsplit("/", 1)[-1])
                return deb.read_bytes() if deb else None
            target = (self.apt / host / path.lstrip("/")).resolve()
            inside = target.is_relative_to(self.apt.resolve())
            return target.read_bytes() if inside and target.is_file() else None
        if host == PYPI_HOST:
            return self._pypi(path.strip("/").split("/"))
        return None

    def _pypi(self, parts: list[str]) -> bytes | None:
        if not self.wheels.is_dir() or len(parts) != 2:
            return None
        kind, name = parts
        if kind == "simple":
            files = [w for w in sorted(self.wheels.glob("*.whl")) if normalize(w.name.split("-")[0]) == normalize(name)]
            links = "".join(f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
                            f"{w.name}</a>\n" for w in files)
            return links.encode() if files else None
        wheel = self.wheels / name
        return wheel.read_bytes() if kind == "files" and "/" not in name and wheel.is_file() else None

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._reply(send_body=True)

            def do_HEAD(self) -> None:
                self._reply(send_body=False)

            def do_CONNECT(self) -> None:
                with proxy._lock:
                    proxy.answers.missing.append(f"https://{self.path}")
                self.send_error(403, "veri build proxy: no https (only vendored http answers)")

            def _reply(self, send_body: bool) -> None:
                body = proxy.answer(self.path)
                with proxy._lock:
                    (proxy.answers.served if body is not None else proxy.answers.missing).append(self.path)
                data = body if body is not None else b"not vendored: run `veri tasks vendor` for this task\n"
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/html" if "/simple/" in self.path else "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if send_body:
                    self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
