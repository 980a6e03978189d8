"""Tests of JSON-lines export and import."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tensortune.database import (Database, DatabaseError, ImportReport, TaskRecord, TrialRecord, export_jsonl,
                                 import_jsonl)


def added(report: ImportReport) -> tuple[int, int]:
    """(tasks added, trials added) of an import."""
    return report.tasks_added, report.trials_added


KEYS = ["0a" * 16, "0b" * 16]


def fill(db: Database) -> None:
    for n, key in enumerate(KEYS):
        db.add_task(TaskRecord(key, "conv2d", "conv2d", '{"kind": "cuda"}', 1e9 * (n + 1), "{}", 10.0))
        for i in range(5):
            error = "none" if i != 2 else "build_timeout"
            costs = [1e-3 / (i + 1)] if error == "none" else []
            db.add_trial(TrialRecord(key, i, {"k": [i, "x"]}, costs, error, error_msg="", timestamp=100.0 + i,
                                     tuner="ga", seed=None, verified=i % 2 == 0, energy_j=None))


def test_export_import_round_trip(tmp_path: Path) -> None:
    src, dst, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "dump.jsonl"
    with Database(src) as a, Database(dst) as b:
        fill(a)
        assert export_jsonl(a, out) == 2 + 10
        kinds = [json.loads(line)["kind"] for line in out.read_text().splitlines()]
        assert kinds == ["task"] * 2 + ["trial"] * 10
        assert added(import_jsonl(b, out)) == (2, 10)
        assert b.tasks() == a.tasks() and b.trials() == a.trials()
        assert [t.id for t in b.trials()] == [t.id for t in a.trials()]
        assert b.best_all() == a.best_all()
        assert added(import_jsonl(b, out)) == (0, 0) and b.count() == 10


def test_export_one_task_to_stream(tmp_path: Path) -> None:
    with Database(tmp_path / "a.db") as a, Database(tmp_path / "b.db") as b:
        fill(a)
        stream = io.StringIO()
        assert export_jsonl(a, stream, workload_key=KEYS[1]) == 1 + 5
        stream.seek(0)
        assert added(import_jsonl(b, stream)) == (1, 5)
        assert [t.workload_key for t in b.tasks()] == [KEYS[1]] and b.trials() == a.trials(KEYS[1])


@pytest.mark.parametrize("bad", ["{not json", '{"kind": "trial", "workload_key": "k"}',
                                 '{"kind": "bogus"}', "[1, 2]"])
def test_malformed_line_imports_nothing(tmp_path: Path, bad: str) -> None:
    with Database(tmp_path / "a.db") as a, Database(tmp_path / "b.db") as b:
        fill(a)
        stream = io.StringIO()
        export_jsonl(a, stream)
        lines = stream.getvalue().splitlines()
        lines.insert(4, bad)
        with pytest.raises(DatabaseError, match="line 5"):
            import_jsonl(b, io.StringIO("\n".join(lines) + "\n"))
        assert b.count() == 0 and b.tasks() == []
