#!/usr/bin/env python3
"""serve-vendor.py NAME=DIR... — serve vendored folders read-only on 127.0.0.1 during an image build.

Image builds fetch their wheels and tarballs from here (http://127.0.0.1:PORT/NAME/...) instead of
COPYing them into a layer: a COPY keeps a second copy of every wheel in the image store, and a
multi-stage build a second copy of the installed venv, which is gigabytes on a small disk.
Prints the port on the first line of stdout, then serves until killed. Stdlib only (runs on the
host, before any venv exists).
"""

import functools
import http.server
import os
import posixpath
import sys
import urllib.parse


class VendorHandler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, roots: dict[str, str], **kwargs):
        self.roots = roots
        super().__init__(*args, **kwargs)

    def translate_path(self, path: str) -> str:
        # /NAME/rest -> DIR/rest; anything else (or any "..") -> a path that does not exist.
        parts = [p for p in posixpath.normpath(urllib.parse.unquote(path.split("?", 1)[0])).split("/") if p]
        if not parts or parts[0] not in self.roots or ".." in parts:
            return "/nonexistent"
        return os.path.join(self.roots[parts[0]], *parts[1:])

    def log_message(self, format: str, *args) -> None:  # quiet: the build log says what was fetched
        pass


def main(argv: list[str]) -> int:
    roots = {}
    for arg in argv:
        name, sep, folder = arg.partition("=")
        if not sep or not os.path.isdir(folder):
            print(f"serve-vendor: expected NAME=DIR with an existing DIR, got {arg!r}", file=sys.stderr)
            return 2
        roots[name] = os.path.abspath(folder)
    handler = functools.partial(VendorHandler, roots=roots)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
