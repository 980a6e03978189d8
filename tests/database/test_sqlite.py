"""Tests of the SQLite tuning database and its records."""
from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import os
import signal
import sqlite3
from pathlib import Path

import pytest

from tensortune.database import Database, DatabaseError, TaskRecord, TrialRecord

KEY = "ab" * 16


def make_task(key: str = KEY) -> TaskRecord:
    return TaskRecord(key, "matmul", "matmul", '{"kind": "llvm"}', 2.0e9, '{"args": [1, 2]}', created=1.5)


def make_trial(index: int, cost: float = 1e-3, key: str = KEY, error: str = "none",
               verified: bool = True, tuner: str = "random") -> TrialRecord:
    costs = [] if error != "none" else [cost, cost * 1.1, cost * 0.9]
    return TrialRecord(key, index, {"tile_x": index, "unroll": True}, costs, error,
                       timestamp=1000.0 + index, tuner=tuner, seed=7, verified=verified, energy_j=0.5)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- records ------------------------------------------------------------------------------------

def test_record_round_trip() -> None:
    task, trial = make_task(), make_trial(3)
    assert TaskRecord.from_json(json.loads(json.dumps(task.to_json()))) == task
    back = TrialRecord.from_json(json.loads(json.dumps(trial.to_json())))
    assert back == trial and back.seed == 7 and back.verified is True


def test_trial_ok_and_cost() -> None:
    assert make_trial(0, cost=2.0).cost == pytest.approx(2.0)
    failed = make_trial(1, error="compile")
    assert not failed.ok and failed.cost == math.inf
    assert not TrialRecord(KEY, 0, {}, [], "none").ok


def test_record_from_json_rejects_bad_fields() -> None:
    data = make_trial(0).to_json()
    with pytest.raises(ValueError, match="config_index"):
        TrialRecord.from_json({**data, "config_index": "3"})
    with pytest.raises(ValueError, match="missing field 'flops'"):
        TaskRecord.from_json({k: v for k, v in make_task().to_json().items() if k != "flops"})


# -- basic use ----------------------------------------------------------------------------------

def test_add_get_best_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "tune.db"
    with Database(path) as db:
        db.add_task(make_task())
        db.add_task(TaskRecord(KEY, "other", "other", "{}", 1.0, "{}"))  # same key: first one kept
        assert db.get_task(KEY) == make_task() and db.get_task("nope") is None
        assert db.best(KEY) is None
        ids = [db.add_trial(make_trial(0, cost=5e-3)),
               db.add_trial(make_trial(1, cost=1e-3, verified=False)),  # faster but unverified
               db.add_trial(make_trial(2, error="runtime"))]
        assert ids == sorted(ids) and db.best(KEY).config_index == 0
        db.add_trial(make_trial(3, cost=2e-3))  # faster: replaces
        db.add_trial(make_trial(4, cost=9e-3))  # slower: ignored
        db.add_trial(make_trial(1, cost=3e-3, tuner="xgb"))  # same config measured again
        assert db.best(KEY).config_index == 3
        assert db.measured_indices(KEY) == {0, 1, 2, 3, 4}
        assert db.count() == db.count(KEY) == 6 and db.count("nope") == 0
    with Database(path, readonly=True) as db:
        assert db.tasks() == [make_task()]
        trials = db.trials(KEY)
        assert [t.config_index for t in trials] == [0, 1, 2, 3, 4, 1] and trials[0] == make_trial(0, 5e-3)
        assert [t.config_index for t in db.trials(ok_only=True)] == [0, 1, 3, 4, 1]
        assert [(task.workload_key, t.config_index) for task, t in db.best_all()] == [(KEY, 3)]
        assert db.best(KEY).id == trials[3].id
        with pytest.raises(DatabaseError, match="read-only"):
            db.add_trial(make_trial(9))


def test_pragmas(tmp_path: Path) -> None:
    with Database(tmp_path / "tune.db") as db:
        assert db._con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db._con.execute("PRAGMA busy_timeout").fetchone()[0] >= 30000


def test_empty_file_is_new(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with Database(path) as db:
        assert db.count() == 0


# -- refusals -----------------------------------------------------------------------------------

def _assert_refused(path: Path, match: str) -> None:
    before, files = sha256(path), sorted(os.listdir(path.parent))
    for readonly in (False, True):
        with pytest.raises(DatabaseError, match=match):
            Database(path, readonly=readonly)
    assert sha256(path) == before and sorted(os.listdir(path.parent)) == files


def test_refuses_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some notes, not a database\n")
    _assert_refused(path, "not an SQLite file")


def test_refuses_foreign_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "foreign.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE people (name TEXT)")
    con.execute("INSERT INTO people VALUES ('ada')")
    con.commit()
    con.close()
    _assert_refused(path, "not a tensortune database")


def test_refuses_other_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    Database(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    _assert_refused(path, "schema version 99")


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="does not exist"):
        Database(tmp_path / "missing" / "tune.db")
    with pytest.raises(DatabaseError, match="is a directory"):
        Database(tmp_path)
    with pytest.raises(DatabaseError, match="no such database"):
        Database(tmp_path / "tune.db", readonly=True)
    assert os.listdir(tmp_path) == []


# -- several processes --------------------------------------------------------------------------

#: Trials each concurrent writer commits, and how many of them strictly alternate with the other's.
N_EACH, LOCKSTEP = 200, 20


def _writer(path: str, tuner: str, n: int, lockstep: int, barrier: mp.synchronize.Barrier,
            mine: mp.synchronize.Semaphore, theirs: mp.synchronize.Semaphore) -> None:
    """Commit trials 0..n-1 of ``tuner`` through one connection held open throughout.

    The first ``lockstep`` trials alternate strictly with the other writer (a token passed
    through two semaphores): both connections are open and committing in the same span of
    time whatever the OS does with the processes. The rest are written as fast as possible,
    interleaved or not.
    """
    with Database(path) as db:
        db.add_task(make_task())
        barrier.wait(60)
        for i in range(lockstep):
            if not mine.acquire(timeout=60):
                raise TimeoutError(f"writer {tuner}: the other writer never passed the token back")
            db.add_trial(make_trial(i, cost=1e-3 * (i + 1), tuner=tuner))
            theirs.release()
        barrier.wait(60)  # both finished the alternating phase
        for i in range(lockstep, n):
            db.add_trial(make_trial(i, cost=1e-3 * (i + 1), tuner=tuner))


def _endless_writer(path: str, conn: mp.connection.Connection) -> None:
    with Database(path) as db:
        i = 0
        while True:
            db.add_trial(make_trial(i))
            i += 1
            conn.send(i)  # i trials are committed


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    """Two processes, each with its own open connection, commit trials into one database at
    once: nothing is lost, nothing is duplicated, every commit is visible afterwards."""
    ctx = mp.get_context("spawn")
    path, barrier = str(tmp_path / "tune.db"), ctx.Barrier(2)
    turn = {"a": ctx.Semaphore(1), "b": ctx.Semaphore(0)}  # "a" commits first
    procs = [ctx.Process(target=_writer, args=(path, t, N_EACH, LOCKSTEP, barrier, turn[t], turn[o]))
             for t, o in (("a", "b"), ("b", "a"))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert codes == [0, 0]
    with Database(path) as db:
        assert len(db.tasks()) == 1  # both added the task: stored once
        trials = db.trials()
        assert db.count() == db.count(KEY) == len(trials) == 2 * N_EACH
        assert len({t.id for t in trials}) == 2 * N_EACH
        got = sorted((t.tuner, t.config_index) for t in trials)
        assert got == [(t, i) for t in "ab" for i in range(N_EACH)]  # each trial exactly once
        for t in trials:  # and stored whole
            assert t == make_trial(t.config_index, cost=1e-3 * (t.config_index + 1), tuner=t.tuner)
        # commit order is id order: the token-passing phase interleaves exactly
        assert "".join(t.tuner for t in trials[:2 * LOCKSTEP]) == "ab" * LOCKSTEP
        assert [t.config_index for t in trials[:2 * LOCKSTEP]] == [i for i in range(LOCKSTEP) for _ in "ab"]
        assert db.measured_indices(KEY) == set(range(N_EACH))
        assert db.best(KEY).config_index == 0
        assert db._con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_sigkill_loses_nothing_committed(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    path = str(tmp_path / "tune.db")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_endless_writer, args=(path, writer))
    proc.start()
    writer.close()
    committed = 0
    while committed < 50:
        assert reader.poll(30), "child reported nothing"
        committed = reader.recv()
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    try:
        while reader.poll(0):
            committed = reader.recv()
    except EOFError:
        pass
    with Database(path) as db:
        assert db.measured_indices(KEY) >= set(range(committed))
        assert db._con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
