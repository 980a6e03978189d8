"""Values are validated on the way in (imports, add_trial) and on the way out (stored rows),
older files are upgraded without losing a trial, and best compares like with like."""
from __future__ import annotations

import io
import json
import math
import sqlite3
from pathlib import Path

import pytest

from tensortune.database import (Database, DatabaseError, ImportReport, MeasureContext, TaskRecord, TrialRecord,
                                 export_jsonl, import_jsonl)


def added(report: ImportReport) -> tuple[int, int]:
    """(tasks added, trials added) of an import."""
    return report.tasks_added, report.trials_added


KEY = "ab" * 10
HOT = json.dumps({"min_repeat_ms": 40, "mode": "hot", "number": 1, "repeat": 5}, sort_keys=True, separators=(",", ":"))
COLD = json.dumps({"min_repeat_ms": 0, "mode": "cold", "number": 1, "repeat": 10}, sort_keys=True,
                  separators=(",", ":"))
TARGET = '{"kind":"llvm","mcpu":"znver4"}'


def task() -> TaskRecord:
    return TaskRecord(KEY, "matmul", "matmul", TARGET, 1e9, '{"op": "matmul"}', 1.0)


def trial(index: int, cost: float | None, timing: str = HOT, verified: bool = True, cpu: str = "AMD EPYC",
          threads: int = 2, error: str = "none") -> TrialRecord:
    return TrialRecord(KEY, index, {"i": index}, [] if cost is None else [cost], error, timestamp=float(index),
                       tuner="random", target=TARGET, threads=threads, verified=verified, timing=timing, cpu_model=cpu)


def lines_of(records: list[TaskRecord | TrialRecord]) -> str:
    out = []
    for r in records:
        d = r.to_json()
        d.pop("id", None)
        out.append(json.dumps({"kind": "task" if isinstance(r, TaskRecord) else "trial", **d}))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- imports validate every value
BAD_TRIALS = {
    "zero cost": (lambda d: d.update(costs=[0.0]), "costs"),
    "negative cost": (lambda d: d.update(costs=[-1e-3]), "costs"),
    "NaN cost": (lambda d: d.update(costs=[math.nan]), "costs"),
    "infinite cost": (lambda d: d.update(costs=[math.inf]), "costs"),
    "no cost without error": (lambda d: d.update(costs=[]), "costs"),
    "unknown error kind": (lambda d: d.update(error="exploded"), "unknown error kind"),
    "negative config index": (lambda d: d.update(config_index=-1), "config_index"),
    "unknown task": (lambda d: d.update(workload_key="cd" * 10), "unknown task"),
    "negative threads": (lambda d: d.update(threads=-2), "threads"),
    "NaN build time": (lambda d: d.update(build_time=math.nan), "build_time"),
    "timing not JSON": (lambda d: d.update(timing="hot"), "timing"),
}


@pytest.mark.parametrize("case", sorted(BAD_TRIALS))
def test_a_bad_value_imports_nothing_and_names_its_line(tmp_path: Path, case: str) -> None:
    edit, words = BAD_TRIALS[case]
    good = [task(), trial(0, 1e-3), trial(1, 2e-3)]
    text = lines_of(good).splitlines()
    bad = json.loads(text[2])
    edit(bad)
    text[2] = json.dumps(bad, allow_nan=True)
    with Database(tmp_path / "a.db") as db:
        with pytest.raises(DatabaseError, match=f"line 3: .*{words}") as e:
            import_jsonl(db, io.StringIO("\n".join(text) + "\n"))
        assert "\n" not in str(e.value)
        assert db.count() == 0 and db.tasks() == []


def test_bad_task_values_are_refused(tmp_path: Path) -> None:
    for edit in ({"flops": float("nan")}, {"flops": -1.0}, {"task_json": "nope"}, {"workload_key": ""}):
        d = {"kind": "task", **task().to_json(), **edit}
        with Database(tmp_path / "a.db") as db, pytest.raises(DatabaseError, match="line 1"):
            import_jsonl(db, io.StringIO(json.dumps(d) + "\n"))


def test_the_trial_check_runs_before_anything_is_written(tmp_path: Path) -> None:
    def in_space(t: TaskRecord, r: TrialRecord) -> None:
        if r.config_index >= 10:
            raise ValueError(f"config_index {r.config_index} outside the task's space")

    with Database(tmp_path / "a.db") as db:
        with pytest.raises(DatabaseError, match="line 3: config_index 12 outside"):
            import_jsonl(db, io.StringIO(lines_of([task(), trial(0, 1e-3), trial(12, 1e-3)])), check=in_space)
        assert db.count() == 0
        assert added(import_jsonl(db, io.StringIO(lines_of([task(), trial(0, 1e-3)])), check=in_space)) == (1, 1)


def test_add_trial_refuses_bad_values(tmp_path: Path) -> None:
    with Database(tmp_path / "a.db") as db:
        db.add_task(task())
        with pytest.raises(ValueError, match="costs"):
            db.add_trial(trial(0, 0.0))
        assert db.count() == 0


# ---------------------------------------------------------------- bad stored rows are skipped, once
def test_bad_stored_rows_are_skipped_with_one_warning(tmp_path: Path, caplog) -> None:
    path = tmp_path / "a.db"
    with Database(path) as db:
        db.add_task(task())
        for k, c in enumerate([3e-3, 2e-3, 4e-3]):
            db.add_trial(trial(k, c))
    con = sqlite3.connect(path)  # another tool writes rows this version would refuse
    con.execute("UPDATE trials SET costs = '[0.0]', cost = 0.0 WHERE config_index = 0")
    con.execute("UPDATE trials SET error = 'exploded' WHERE config_index = 2")
    con.commit()
    con.close()
    caplog.clear()
    with Database(path, readonly=True) as db:
        assert db.best(KEY).config_index == 1  # the zero cost is not the best
        assert [t.config_index for t in db.trials(KEY)] == [1]
        assert [t.config_index for _, t in db.best_all()] == [1]
        assert db.skipped_rows == {1, 3}
    said = [r for r in caplog.records if "skipping invalid" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING" and said[0].name == "tensortune.database.sqlite"
    assert "\n" not in said[0].getMessage()


def test_the_command_line_shows_library_warnings_in_one_line(tmp_path: Path, capfd) -> None:
    """Library code logs (``tensortune.*`` loggers); the command line prints ``tensortune: warning: ...``."""
    from tensortune.cli import main

    path = tmp_path / "a.db"
    with Database(path) as db:
        db.add_task(task())
        db.add_trial(trial(0, 3e-3))
        db.add_trial(trial(1, 2e-3))
    con = sqlite3.connect(path)
    con.execute("UPDATE trials SET target = 'not json' WHERE config_index = 0")
    con.commit()
    con.close()
    capfd.readouterr()
    assert main(["db", "best", "--db", str(path)]) == 0
    err = capfd.readouterr().err
    assert err.startswith("tensortune: warning: ") and err.count("skipping invalid") == 1 and err.count("\n") == 1


# ---------------------------------------------------------------- like with like
def test_best_compares_only_within_one_context(tmp_path: Path) -> None:
    with Database(tmp_path / "a.db") as db:
        db.add_task(task())
        db.add_trial(trial(0, 1e-3, HOT))
        db.add_trial(trial(1, 3e-3, COLD))
        db.add_trial(trial(2, 2e-3, COLD))
        db.add_trial(trial(3, 0.5e-3, COLD, verified=False))  # never checked: never a best
        db.add_trial(trial(4, 0.7e-3, COLD, threads=1))
        hot, cold = (MeasureContext(TARGET, 2, t, "AMD EPYC") for t in (HOT, COLD))
        assert db.best(KEY, hot).config_index == 0
        assert db.best(KEY, cold).config_index == 2
        assert db.best(KEY, MeasureContext(TARGET, 2, COLD, "Intel Xeon")) is None
        assert db.best(KEY, threads=1).config_index == 4
        assert {(c, n) for c, n in db.contexts(KEY)} == {(cold, 2), (hot, 1), (cold._replace(threads=1), 1)}
        assert sorted(t.config_index for _, t in db.best_all()) == [0, 2, 4]


# ---------------------------------------------------------------- schema 1 files are upgraded
V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tasks (workload_key TEXT PRIMARY KEY, op TEXT NOT NULL, kernel_class TEXT NOT NULL,
    target TEXT NOT NULL, flops REAL NOT NULL, task_json TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE trials (id INTEGER PRIMARY KEY, workload_key TEXT NOT NULL, config_index INTEGER NOT NULL,
    config TEXT NOT NULL, costs TEXT NOT NULL, error TEXT NOT NULL, error_msg TEXT NOT NULL,
    build_time REAL NOT NULL, run_time REAL NOT NULL, timestamp REAL NOT NULL, tuner TEXT NOT NULL,
    seed INTEGER, tvm_version TEXT NOT NULL, target TEXT NOT NULL, threads INTEGER NOT NULL,
    verified INTEGER NOT NULL, energy_j REAL);
CREATE INDEX trials_by_task ON trials (workload_key, config_index);
CREATE TABLE best (workload_key TEXT PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials (id), cost REAL NOT NULL);
INSERT INTO meta VALUES ('application', 'tensortune'), ('schema_version', '1');
"""


def make_v1(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(V1)
    t = task()
    con.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                (t.workload_key, t.op, t.kernel_class, t.target, t.flops, t.task_json, t.created))
    for k, (costs, err) in enumerate([([3e-3, 3.2e-3], "none"), ([], "compile"), ([1e-3], "none")]):
        con.execute("INSERT INTO trials (workload_key, config_index, config, costs, error, error_msg, build_time, "
                    "run_time, timestamp, tuner, seed, tvm_version, target, threads, verified, energy_j) "
                    "VALUES (?, ?, ?, ?, ?, '', 0, 0, ?, 'random', 0, '0.27', ?, 2, 1, NULL)",
                    (KEY, k, json.dumps({"i": k}), json.dumps(costs), err, float(k), TARGET))
    con.execute("INSERT INTO best VALUES (?, 3, 1e-3)", (KEY,))
    con.commit()
    con.close()


def test_a_schema_1_file_is_upgraded_in_place_keeping_every_trial(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1(path)
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match="schema version 1.*db upgrade"):
        Database(path, readonly=True)
    assert path.read_bytes() == before  # a read-only open leaves it as it was
    with Database(path) as db:
        trials = db.trials(KEY)
        assert [t.config_index for t in trials] == [0, 1, 2]
        assert all(t.timing == "" and t.cpu_model == "" for t in trials)
        assert db.best(KEY).config_index == 2 and db.best(KEY).cost == pytest.approx(1e-3)
        stream = io.StringIO()
        assert export_jsonl(db, stream) == 4
    with Database(path, readonly=True) as db:
        assert db.count() == 3


def test_import_refuses_a_task_key_with_another_definition(tmp_path: Path) -> None:
    with Database(tmp_path / "a.db") as db:
        db.add_task(task())
        other = TaskRecord(KEY, "matmul", "matmul", TARGET, 1e9, '{"op": "other"}', 1.0)
        with pytest.raises(DatabaseError, match="line 1: .*another definition"):
            import_jsonl(db, io.StringIO(lines_of([other])))


def test_a_task_without_flops_is_stored_and_read_back(tmp_path: Path) -> None:
    """A model's pure data-movement functions (layout transforms, copies) are tasks with 0 FLOPs:
    they are tuned, so they must be listed like any other (their trials were invisible before)."""
    t = task()
    t.flops = 0.0
    with Database(tmp_path / "z.db") as db:
        db.add_task(t)
        assert [x.flops for x in db.tasks()] == [0.0]
