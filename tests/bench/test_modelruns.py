"""bench.modelruns.run_json: a finished run is read back; an interrupted one starts from nothing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import modelruns  # noqa: E402


def test_an_interrupted_run_starts_again_from_empty_databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, folder = tmp_path / "m-autotvm.db", tmp_path / "race"
    for f in (db, Path(f"{db}-wal"), folder / "a.db"):  # what an attempt cut off half-way left
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("half")
    calls: list[list[str]] = []

    def fake(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        assert not db.exists() and not Path(f"{db}-wal").exists() and not folder.exists()
        assert keep.parent.is_dir()  # made before the run, which may take an hour
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps({"cost": {"wall_s": 1.0}}) + "\n", stderr="")

    monkeypatch.setattr(modelruns.subprocess, "run", fake)
    keep = tmp_path / "parts" / "m.tune.json"  # a folder the run's output is the first thing in
    out = modelruns.run_json(["tune", "m", "--db", str(db)], keep, fresh=[db, folder])
    assert out == {"cost": {"wall_s": 1.0}} and len(calls) == 1 and calls[0][-1] == "--json"
    db.write_text("finished")  # the finished run's database stays, and the run is not repeated
    assert modelruns.run_json(["tune", "m", "--db", str(db)], keep, fresh=[db]) == out
    assert len(calls) == 1 and db.read_text() == "finished"
