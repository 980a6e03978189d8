"""bench.modelruns.run_json: a finished run is read back; an interrupted one starts from nothing."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import modelruns  # noqa: E402


class Run:
    """A finished ``subprocess.Popen`` with the given streams."""

    def __init__(self, cmd: list[str], rc: int, out: str, err: str) -> None:
        self.args, self.returncode = cmd, None
        self.stdout, self.stderr, self._rc = io.StringIO(out), io.StringIO(err), rc

    def wait(self) -> int:
        self.returncode = self._rc
        return self._rc


def test_an_interrupted_run_starts_again_from_empty_databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, folder = tmp_path / "m-autotvm.db", tmp_path / "race"
    for f in (db, Path(f"{db}-wal"), folder / "a.db"):  # what an attempt cut off half-way left
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("half")
    calls: list[list[str]] = []

    def fake(cmd: list[str], **kw: Any) -> subprocess.Popen:
        assert not db.exists() and not Path(f"{db}-wal").exists() and not folder.exists()
        assert keep.parent.is_dir()  # made before the run, which may take an hour
        calls.append(cmd)
        return Run(cmd, 0, json.dumps({"cost": {"wall_s": 1.0}}) + "\n", "")

    monkeypatch.setattr(modelruns.subprocess, "Popen", fake)
    keep = tmp_path / "parts" / "m.tune.json"  # a folder the run's output is the first thing in
    out = modelruns.run_json(["tune", "m", "--db", str(db)], keep, fresh=[db, folder])
    assert out == {"cost": {"wall_s": 1.0}} and len(calls) == 1 and calls[0][-1] == "--json"
    db.write_text("finished")  # the finished run's database stays, and the run is not repeated
    assert modelruns.run_json(["tune", "m", "--db", str(db)], keep, fresh=[db]) == out
    assert len(calls) == 1 and db.read_text() == "finished"


def test_a_runs_stderr_is_passed_through_and_its_last_line_names_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An hour-long run's per-round lines reach the caller's log as they come; a failed run's
    error quotes its last stderr line and keeps nothing."""
    out = json.dumps({"entries": []}) + "\n"
    monkeypatch.setattr(modelruns.subprocess, "Popen",
                        lambda cmd, **kw: Run(cmd, 0, out, "race: m t round 1: 3.0 ms\nrace: m t round 2: 2.9 ms\n"))
    assert modelruns.run_json(["race", "m"], tmp_path / "ok.json") == {"entries": []}
    assert "race: m t round 1: 3.0 ms\nrace: m t round 2: 2.9 ms\n" in capsys.readouterr().err
    monkeypatch.setattr(modelruns.subprocess, "Popen",
                        lambda cmd, **kw: Run(cmd, 1, "", "race: m t round 1: 3.0 ms\nboom: no such model\n\n"))
    with pytest.raises(SystemExit, match="boom: no such model"):
        modelruns.run_json(["race", "m"], tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_paired_latency_times_every_database_in_one_benchmark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each database's model and the untuned one are systems of one interleaved benchmark (so
    their latencies are paired), named by the caller; ``latency`` is its one-database case."""
    from tensortune.database import Database

    seen: dict[str, Any] = {}

    def fake_bench(model, database, with_ort=True, extra=None, **kw):
        seen.update(model=model, database=database, extra=extra, with_ort=with_ort)
        lat = lambda ms: type("L", (), {"median_ms": ms})()  # noqa: E731
        rows = [type("R", (), {"name": n, "ok": ok, "latency": lat(ms) if ok else None})()
                for n, ok, ms in (("tensortune tuned", True, 2.9), ("tensortune untuned", True, 3.1),
                                  ("tensortune survey", True, 2.95), ("pytorch", True, 14.8))]
        if extra and "tensortune failed" in extra:
            rows.append(type("R", (), {"name": "tensortune failed", "ok": False, "latency": None})())
        return type("Report", (), {"rows": rows})()

    monkeypatch.setattr("tensortune.models.comparison.bench_model", fake_bench)
    monkeypatch.setattr("tensortune.models.importer.load_model", lambda name: f"model:{name}")
    monkeypatch.setattr("tensortune.models.compile.compile_model", lambda m, db: ("compiled", m, db.path))
    dbs = {}
    for name in ("sequential", "survey", "failed"):
        dbs[name] = tmp_path / f"{name}.db"
        Database(dbs[name]).close()
    got = modelruns.paired_latency("mobilenet_v2", dbs)
    assert got == {"untuned": 3.1, "sequential": 2.9, "survey": 2.95, "failed": None}
    assert seen["model"] == "model:mobilenet_v2" and not seen["with_ort"]
    assert Path(seen["database"].path) == dbs["sequential"]  # the first is bench_model's "tuned"
    assert sorted(seen["extra"]) == ["tensortune failed", "tensortune survey"]
    assert modelruns.latency("mobilenet_v2", dbs["sequential"]) == {"tuned_ms": 2.9, "tuned_ok": True,
                                                                   "untuned_ms": 3.1}
