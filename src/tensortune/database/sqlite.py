"""The tuning database: one SQLite file in WAL mode, safe for several writing processes.

Every :meth:`Database.add_trial` is its own committed transaction, so a killed process loses
nothing it already got a row id for. Files that are not tensortune databases are refused
before anything is written to them.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, TypeVar

from .records import TaskRecord, TrialRecord

T = TypeVar("T")

_SQLITE_HEADER = b"SQLite format 3\x00"
_TASK_COLS = ("workload_key", "op", "kernel_class", "target", "flops", "task_json", "created")
_TRIAL_COLS = ("workload_key", "config_index", "config", "costs", "error", "error_msg", "build_time",
               "run_time", "timestamp", "tuner", "seed", "tvm_version", "target", "threads",
               "verified", "energy_j")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    workload_key TEXT PRIMARY KEY, op TEXT NOT NULL, kernel_class TEXT NOT NULL,
    target TEXT NOT NULL, flops REAL NOT NULL, task_json TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY, workload_key TEXT NOT NULL, config_index INTEGER NOT NULL,
    config TEXT NOT NULL, costs TEXT NOT NULL, error TEXT NOT NULL, error_msg TEXT NOT NULL,
    build_time REAL NOT NULL, run_time REAL NOT NULL, timestamp REAL NOT NULL, tuner TEXT NOT NULL,
    seed INTEGER, tvm_version TEXT NOT NULL, target TEXT NOT NULL, threads INTEGER NOT NULL,
    verified INTEGER NOT NULL, energy_j REAL);
CREATE INDEX IF NOT EXISTS trials_by_task ON trials (workload_key, config_index);
CREATE TABLE IF NOT EXISTS best (
    workload_key TEXT PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials (id), cost REAL NOT NULL);
"""


class DatabaseError(Exception):
    """A database file could not be opened, was refused, or an import was malformed."""


class Database:
    """Tasks and measured trials in one SQLite file (one object per process, used from one thread)."""

    SCHEMA_VERSION = 1
    BUSY_TIMEOUT_S = 60.0

    def __init__(self, path: str | os.PathLike[str], readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        if self.path.is_dir():
            raise DatabaseError(f"{self.path} is a directory, not a database file")
        if not self.path.parent.is_dir():
            raise DatabaseError(f"cannot open {self.path}: folder {self.path.parent} does not exist")
        try:
            is_new = not self.path.exists() or self.path.stat().st_size == 0
            if not is_new:
                with open(self.path, "rb") as f:
                    header = f.read(len(_SQLITE_HEADER))
        except OSError as e:
            raise DatabaseError(f"cannot read {self.path}: {e}") from None
        if is_new and readonly:
            raise DatabaseError(f"cannot open {self.path} read-only: no such database")
        if not is_new:
            if header != _SQLITE_HEADER:
                raise DatabaseError(f"{self.path} is not an SQLite file; refusing to touch it")
            # Look before writing anything. Without a journal beside it nobody is mid-write, and
            # ``immutable`` keeps SQLite from creating -wal/-shm files next to a foreign file.
            no_journal = not any(Path(f"{self.path}{s}").exists() for s in ("-wal", "-journal"))
            con = self._connect(readonly=True, immutable=no_journal)
            try:
                self._check_meta(con)
            finally:
                con.close()

        self._con = self._connect(readonly)
        if readonly:
            return
        try:
            if is_new:  # create the schema before switching to WAL: the file appears complete
                self._write(self._create_schema)
            self._retry(lambda: self._con.execute("PRAGMA journal_mode=WAL"))
            self._con.execute("PRAGMA synchronous=NORMAL")
            self._check_meta(self._con)
        except BaseException:
            self._con.close()
            raise

    # -- opening ---------------------------------------------------------------------------------

    def _connect(self, readonly: bool, immutable: bool = False) -> sqlite3.Connection:
        """Connect in autocommit mode (transactions are explicit); read-only via a URI."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}"
        target = uri if readonly else str(self.path)
        try:
            con = sqlite3.connect(target, uri=readonly, timeout=self.BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as e:
            raise DatabaseError(f"cannot open {self.path}: {e}") from None
        con.row_factory = sqlite3.Row  # ``timeout`` sets SQLite's busy_timeout
        return con

    def _check_meta(self, con: sqlite3.Connection) -> None:
        """Raise DatabaseError unless ``con`` holds a tensortune database of our schema version."""
        try:
            has_meta = con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall()) if has_meta else {}
        except sqlite3.Error as e:
            raise DatabaseError(f"{self.path} cannot be read as a tensortune database ({e}); "
                                "refusing to touch it") from None
        if meta.get("application") != "tensortune":
            raise DatabaseError(f"{self.path} is not a tensortune database (no tensortune metadata); "
                                "refusing to touch it")
        if meta.get("schema_version") != str(self.SCHEMA_VERSION):
            raise DatabaseError(f"{self.path} has schema version {meta.get('schema_version')}, "
                                f"expected {self.SCHEMA_VERSION}; refusing to touch it")

    def _create_schema(self, con: sqlite3.Connection) -> None:
        """Create the tables in a new file (another process may have just done so)."""
        others = con.execute("SELECT count(*) FROM sqlite_master WHERE name NOT IN "
                             "('meta', 'tasks', 'trials', 'trials_by_task', 'best') "
                             "AND name NOT LIKE 'sqlite_%'").fetchone()[0]
        if others:
            raise DatabaseError(f"{self.path} is not a tensortune database; refusing to touch it")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                con.execute(statement)
        con.executemany("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                        [("application", "tensortune"), ("schema_version", str(self.SCHEMA_VERSION))])

    # -- transactions ----------------------------------------------------------------------------

    def _retry(self, fn: Callable[[], T]) -> T:
        """Call ``fn``, retrying while SQLite reports the database locked or busy."""
        deadline = time.monotonic() + self.BUSY_TIMEOUT_S
        delay = 0.01
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                msg = str(e).lower()
                if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` inside one committed ``BEGIN IMMEDIATE`` transaction."""
        if self.readonly:
            raise DatabaseError(f"{self.path} was opened read-only")

        def attempt() -> T:
            self._con.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self._con)
                self._con.execute("COMMIT")
            except BaseException:
                if self._con.in_transaction:
                    self._con.execute("ROLLBACK")
                raise
            return result

        return self._retry(attempt)

    @staticmethod
    def _insert_task(con: sqlite3.Connection, task: TaskRecord) -> bool:
        """Insert ``task`` unless its key exists; return whether it was added."""
        cur = con.execute(f"INSERT OR IGNORE INTO tasks ({', '.join(_TASK_COLS)}) "
                          f"VALUES ({', '.join('?' * len(_TASK_COLS))})",
                          [getattr(task, c) for c in _TASK_COLS])
        return cur.rowcount > 0

    @staticmethod
    def _insert_trial(con: sqlite3.Connection, trial: TrialRecord) -> int:
        """Insert ``trial``, update the task's best entry and return the new row id."""
        values: dict[str, Any] = {c: getattr(trial, c) for c in _TRIAL_COLS}
        values.update(config=json.dumps(trial.config), costs=json.dumps(list(trial.costs)),
                      verified=int(trial.verified))
        cur = con.execute(f"INSERT INTO trials ({', '.join(_TRIAL_COLS)}) "
                          f"VALUES ({', '.join(':' + c for c in _TRIAL_COLS)})", values)
        row_id = int(cur.lastrowid)  # type: ignore[arg-type]
        if trial.ok and trial.verified:
            con.execute("INSERT INTO best (workload_key, trial_id, cost) VALUES (?, ?, ?) "
                        "ON CONFLICT (workload_key) DO UPDATE SET trial_id = excluded.trial_id, "
                        "cost = excluded.cost WHERE excluded.cost < best.cost",
                        (trial.workload_key, row_id, trial.cost))
        return row_id

    # -- public API ------------------------------------------------------------------------------

    def add_task(self, task: TaskRecord) -> None:
        """Store ``task``; if its workload key is already stored, keep the first one."""
        self._write(lambda con: self._insert_task(con, task))

    def get_task(self, workload_key: str) -> TaskRecord | None:
        """Return the task stored under ``workload_key``, or None."""
        row = self._con.execute("SELECT * FROM tasks WHERE workload_key = ?", (workload_key,)).fetchone()
        return TaskRecord(**{c: row[c] for c in _TASK_COLS}) if row else None

    def tasks(self) -> list[TaskRecord]:
        """Return all tasks in insertion order."""
        rows = self._con.execute("SELECT * FROM tasks ORDER BY rowid").fetchall()
        return [TaskRecord(**{c: r[c] for c in _TASK_COLS}) for r in rows]

    def add_trial(self, trial: TrialRecord) -> int:
        """Store ``trial`` in its own committed transaction; set and return its row id."""
        trial.id = self._write(lambda con: self._insert_trial(con, trial))
        return trial.id

    def trials(self, workload_key: str | None = None, ok_only: bool = False) -> list[TrialRecord]:
        """Return trials (of one task, or all) in insertion order; ``ok_only`` drops failed ones."""
        where, args = ["1"], []
        if workload_key is not None:
            where.append("workload_key = ?")
            args.append(workload_key)
        if ok_only:
            where.append("error = 'none' AND costs != '[]'")
        rows = self._con.execute(f"SELECT * FROM trials WHERE {' AND '.join(where)} ORDER BY id", args)
        return [_row_to_trial(r) for r in rows.fetchall()]

    def measured_indices(self, workload_key: str) -> set[int]:
        """Return the config indices stored for a task, whether they succeeded or not."""
        rows = self._con.execute("SELECT DISTINCT config_index FROM trials WHERE workload_key = ?",
                                 (workload_key,))
        return {r[0] for r in rows.fetchall()}

    def best(self, workload_key: str) -> TrialRecord | None:
        """Return the fastest verified successful trial of a task, or None."""
        row = self._con.execute("SELECT trials.* FROM best JOIN trials ON trials.id = best.trial_id "
                                "WHERE best.workload_key = ?", (workload_key,)).fetchone()
        return _row_to_trial(row) if row else None

    def best_all(self) -> list[tuple[TaskRecord, TrialRecord]]:
        """Return (task, best trial) for every task that has a best trial, in task insertion order."""
        out = []
        for task in self.tasks():
            trial = self.best(task.workload_key)
            if trial is not None:
                out.append((task, trial))
        return out

    def count(self, workload_key: str | None = None) -> int:
        """Return the number of stored trials (of one task, or all)."""
        if workload_key is None:
            return self._con.execute("SELECT count(*) FROM trials").fetchone()[0]
        return self._con.execute("SELECT count(*) FROM trials WHERE workload_key = ?",
                                 (workload_key,)).fetchone()[0]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._con.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Database({str(self.path)!r}{', readonly=True' if self.readonly else ''})"


def _row_to_trial(row: sqlite3.Row) -> TrialRecord:
    """Convert a ``trials`` row into a :class:`TrialRecord`."""
    values = {c: row[c] for c in _TRIAL_COLS}
    values["config"], values["costs"] = json.loads(row["config"]), json.loads(row["costs"])
    values["verified"] = bool(row["verified"])
    return TrialRecord(**values, id=row["id"])
