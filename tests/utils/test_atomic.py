"""Atomic output files and the checks that keep outputs off databases."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tensortune.database import Database
from tensortune.utils import atomic
from tensortune.utils.atomic import OutputError, atomic_write, check_output_path


def test_atomic_write_replaces_complete_files_only(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "out.txt"
    atomic_write(target, "old\n")
    os.chmod(target, 0o640)
    atomic_write(target, "new\n")
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "partial")
    assert target.read_text() == "new\n"  # the old file stands
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temporary file left behind


def test_outputs_never_overwrite_a_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    Database(db).close()
    with pytest.raises(OutputError, match="database itself"):
        check_output_path(db, overwrite=True, protect=[db])
    with pytest.raises(OutputError, match="database itself"):
        check_output_path(tmp_path / "runs.db-wal", overwrite=True, protect=[db])
    other = tmp_path / "other.sqlite"
    Database(other).close()
    with pytest.raises(OutputError, match="SQLite file"):
        check_output_path(other, overwrite=True)
    (tmp_path / "link.db").symlink_to(db)
    with pytest.raises(OutputError, match="database itself"):
        check_output_path(tmp_path / "link.db", overwrite=True, protect=[db])


def test_existing_files_only_on_request(tmp_path: Path) -> None:
    f = tmp_path / "dump.jsonl"
    assert check_output_path(f) == f  # new: fine
    f.write_text("x")
    with pytest.raises(OutputError, match="--force"):
        check_output_path(f)
    assert check_output_path(f, overwrite=True) == f
    with pytest.raises(OutputError, match="folder"):
        check_output_path(tmp_path)
    with pytest.raises(OutputError, match="does not exist"):
        check_output_path(tmp_path / "missing" / "x")
