"""Scratch folders of exited processes are removed when the next one is made; live ones stay."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tensortune.utils.scratch import UNNAMED_AGE_S, pid_alive, scratch_dir, sweep

PREFIX = "tt-scratch-test-"


def exited_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not pid_alive(p.pid)
    return p.pid


def test_folders_of_exited_processes_go_live_and_recent_ones_stay(tmp_path: Path) -> None:
    dead = tmp_path / f"{PREFIX}{exited_pid()}-abc"
    mine = tmp_path / f"{PREFIX}{os.getpid()}-def"
    recent, old = tmp_path / f"{PREFIX}xyz", tmp_path / f"{PREFIX}uvw"
    for d in (dead, mine, recent, old):
        d.mkdir()
        (d / "lib.so").write_bytes(b"\0")
    stamp = time.time() - UNNAMED_AGE_S - 60
    os.utime(old, (stamp, stamp))
    a_file = tmp_path / f"{PREFIX}{exited_pid()}-file"
    a_file.write_text("a file, not a folder")
    other = tmp_path / f"other-{exited_pid()}-abc"
    other.mkdir()
    made = Path(scratch_dir(PREFIX, str(tmp_path)))
    assert made.name.startswith(f"{PREFIX}{os.getpid()}-") and made.is_dir()
    assert not dead.exists() and not old.exists()
    assert mine.exists() and recent.exists() and other.exists()
    assert a_file.is_file()
    assert sweep(PREFIX, str(tmp_path)) == 0


def test_a_killed_builders_folder_is_removed_by_the_next_builder(tmp_path: Path, monkeypatch) -> None:
    from tensortune.measure.measure import BUILD_PREFIX, LocalBuilder

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    code = ("import os, signal\nfrom tensortune.measure.measure import LocalBuilder\n"
            "b = LocalBuilder()\nprint(b._dir, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TMPDIR": str(tmp_path)})
    left = Path(p.stdout.strip())
    assert p.returncode == -9 and left.is_dir() and left.name.startswith(BUILD_PREFIX)
    builder = LocalBuilder()
    try:
        assert not left.exists()
        assert Path(builder._dir).parent == tmp_path
    finally:
        builder.close()
    assert not Path(builder._dir).exists()
