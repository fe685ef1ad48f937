"""Model folders are swapped in whole, and only over an earlier model folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veri.tools.models.folder import write_model_folder


def _write(name: str):
    return lambda folder: (folder / name).write_text("weights")


def test_writes_files_and_hint_readable_by_all(tmp_path: Path) -> None:
    out = write_model_folder(tmp_path / "nested" / "m", "qwen3", _write("a.bin"))
    assert out == (tmp_path / "nested" / "m").resolve()
    assert sorted(p.name for p in out.iterdir()) == ["a.bin", "veri.json"]
    assert json.loads((out / "veri.json").read_text()) == {"renderer": "qwen3"}
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in out.iterdir())
    assert out.stat().st_mode & 0o777 == 0o755


def test_replaces_an_earlier_model_folder(tmp_path: Path) -> None:
    write_model_folder(tmp_path / "m", "qwen3", _write("old.bin"))
    out = write_model_folder(tmp_path / "m", "default", _write("new.bin"))
    assert sorted(p.name for p in out.iterdir()) == ["new.bin", "veri.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no staging folder left behind


def test_refuses_a_folder_that_is_not_a_model_folder(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a veri model folder"):
        write_model_folder(tmp_path / "mine", "qwen3", _write("a.bin"))
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["keep.txt"]


def test_failed_build_leaves_the_earlier_folder_and_no_staging(tmp_path: Path) -> None:
    write_model_folder(tmp_path / "m", "qwen3", _write("old.bin"))

    def broken(folder: Path) -> None:
        (folder / "half.bin").write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_model_folder(tmp_path / "m", "qwen3", broken)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["old.bin", "veri.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
