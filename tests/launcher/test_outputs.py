"""A sandbox's output folder goes to the sandbox user and back (services/launcher/outputs.py): what a harness
leaves, whatever its modes, ends up the services' user's and readable by it, as the compose trainer
(not root) reads it. Real ownership on this file system: the hand-overs need root (CAP_CHOWN)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from veri.core.harness import HARNESS_UID
from veri.services.launcher.outputs import enforce_output_cap, hand_back, prepare_output

SERVICES = 10001  # compose.yaml's x-least; any uid other than root and the sandbox user's does here
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to other uids needs root (CAP_CHOWN)")


def _as(uid: int, work) -> tuple[int, str]:
    """`work()` in a child process that is `uid` (no groups, no capabilities): (exit status, what it returned
    or the error it raised)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 0
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            answer = str(work())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as the answer
            answer, code = f"{type(exc).__name__}: {exc}", 1
        os.write(write, answer.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), answer


def _read_all(folder: Path) -> list[str]:
    return sorted(f"{path.name} {path.read_text()}" for path in folder.rglob("*") if path.is_file())


@pytest.fixture
def output_root() -> Iterator[Path]:
    """An output root of the services' user in a folder they may enter (pytest's tmp_path is root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="veri-outputs-"))
    base.chmod(0o711)
    root = base / "outputs"
    root.mkdir(mode=0o700)
    os.chown(root, SERVICES, SERVICES)
    yield root
    shutil.rmtree(base)


@needs_root
def test_the_folder_is_the_sandbox_users_and_the_folders_above_the_roots_owner(output_root: Path):
    folder = output_root / "job" / "step" / "r1"
    prepare_output(folder)
    assert (folder.stat().st_uid, folder.stat().st_gid) == (HARNESS_UID, HARNESS_UID)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755 and not any(folder.iterdir())
    for made in (output_root / "job", output_root / "job" / "step"):
        assert (made.stat().st_uid, made.stat().st_gid) == (SERVICES, SERVICES), made
    (folder / "left-over").write_text("from a rollout of the same id")
    prepare_output(folder)
    assert not any(folder.iterdir())


@needs_root
def test_what_a_harness_leaves_is_handed_back_readable_whatever_its_modes(output_root: Path):
    folder = output_root / "job" / "r1"
    prepare_output(folder)
    # as the harness would leave it: its uid, owner-only and unreadable modes, a setuid bit, a symlink out
    hidden = folder / "hidden"
    hidden.mkdir()
    (hidden / "answer.txt").write_text("42")
    (folder / "private.txt").write_text("mine")
    (folder / "setuid").write_text("#!/bin/sh\n")
    outside = output_root.parent / "outside.txt"
    outside.write_text("not the harness's")
    (folder / "link").symlink_to(outside)
    for path, mode in ((hidden / "answer.txt", 0o000), (hidden, 0o000), (folder / "private.txt", 0o600),
                       (folder / "setuid", 0o4755)):
        os.chown(path, HARNESS_UID, HARNESS_UID)
        path.chmod(mode)
    assert _as(SERVICES, lambda: _read_all(folder))[0] != 0  # the trainer could not read it so

    enforce_output_cap(folder, 1 << 20)  # as the backends do first: the symlink goes
    hand_back(folder)

    code, read = _as(SERVICES, lambda: _read_all(folder))
    assert code == 0, read
    assert read == str(["answer.txt 42", "private.txt mine", "setuid #!/bin/sh\n"])
    for path in (folder, hidden, hidden / "answer.txt", folder / "private.txt", folder / "setuid"):
        assert (path.stat().st_uid, path.stat().st_gid) == (SERVICES, SERVICES), path
    assert stat.S_IMODE((folder / "setuid").stat().st_mode) == 0o755  # no setuid bit
    assert outside.stat().st_uid == 0  # never followed


@needs_root
def test_a_launcher_that_may_not_chown_leaves_the_folder_as_it_is(output_root: Path):
    """A user's own launcher (no CAP_CHOWN): the hand-back is skipped, the rollout does not fail."""
    folder = output_root / "r1"
    prepare_output(folder)
    (folder / "out.txt").write_text("x")
    os.chown(folder / "out.txt", HARNESS_UID, HARNESS_UID)
    code, answer = _as(SERVICES, lambda: hand_back(folder))
    assert code == 0, answer
    assert (folder / "out.txt").stat().st_uid == HARNESS_UID
