"""The announced policy version (for backends that do not report it, e.g. vLLM): the `meta` row, and its
mirror in a file every worker maps."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from veri.services.proxy.store.database import Tables


class PolicyVersionMirror:
    """The announced policy version (the `meta` row is the durable one) in a file every worker maps.

    Every call reads the version before and after its policy call, and again for its span; a mapped
    read costs no SQL. The store writes the row and this mirror in one write transaction, so a worker
    that (re)starts while a version is announced cannot put the older one back."""

    _FORMAT = "<q"

    def __init__(self, path: Path) -> None:
        if not path.exists():
            # Made whole and linked into place: a worker starting beside this one maps 8 written bytes or
            # makes its own, never a file another is sizing (a map past a file's end is a SIGBUS).
            staged = path.with_name(f".{path.name}.{os.getpid()}")
            staged.write_bytes(bytes(8))
            try:
                os.link(staged, path)
            except FileExistsError:
                pass
            finally:
                staged.unlink()
        with path.open("r+b") as file:
            if os.fstat(file.fileno()).st_size != 8:
                raise RuntimeError(f"{path} is not the proxy's 8-byte policy version mirror: remove it (the proxy"
                                   " makes it again from the span store)")
            self._map = mmap.mmap(file.fileno(), 8)

    def read(self) -> int:
        return struct.unpack_from(self._FORMAT, self._map)[0]

    def write(self, version: int) -> None:
        struct.pack_into(self._FORMAT, self._map, 0, version)

    def close(self) -> None:
        self._map.close()



class PolicyVersion(Tables):
    _policy_version: PolicyVersionMirror

    def set_policy_version(self, version: int) -> None:
        self._write_policy_version(version)

    def policy_version(self) -> int:
        return self._policy_version.read()

    def _write_policy_version(self, version: int | None) -> None:
        """The row and its mirror in one write transaction; None: the mirror from the row as it is."""
        before: int | None = None
        try:
            with self._write() as db:
                before = self._policy_version.read()  # as it is under the write lock
                if version is None:
                    found = db.execute("SELECT value FROM meta WHERE key = 'policy_version'").fetchone()
                    version = int(found[0]) if found else 0
                else:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('policy_version', ?)", (str(version),))
                self._policy_version.write(version)
        except BaseException:
            if before is not None:  # the row was rolled back: so is its mirror
                self._policy_version.write(before)
            raise
