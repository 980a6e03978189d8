"""The tuning database: one SQLite file in WAL mode, safe for several writing processes.

Every :meth:`Database.add_trial` is its own committed transaction, so a killed process loses
nothing it already got a row id for. Files that are not tensortune databases are refused
before anything is written to them.

Schema version 2 stores, with each trial, how it was measured (``timing``, ``cpu_model``
beside ``target`` and ``threads``) and its median ``cost``; :meth:`Database.best` compares
only trials of one :class:`~tensortune.database.records.MeasureContext`. Version 3 adds
``extra``, a JSON object per trial; ``extra["confirm"]`` marks the confirmation re-measurements
of a task's top configs, which :meth:`Database.best` prefers over single measurements. Version 4
adds ``uid``, each trial's identity (unique; see :mod:`.records`), which exports and imports keep
so that a round trip loses no trial and an import adds none twice. An older file is upgraded in
place, in one transaction, the first time it is opened for writing (its trials keep their data:
version-1 trials with timing and CPU "not recorded", every trial with no extra data, and the uid
its content and occurrence give it, as an import of its old export would). A version-2 or -3 file
may also be read without upgrading it (its trials read with no confirmations, resp. no uid).
Rows that fail validation (written by another tool, or by a version that checked less) are
skipped with one warning per database.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import socket
import sqlite3
import stat
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Sequence, TypeVar

from ..errors import TensortuneError
from ..utils.scratch import pid_alive
from .records import ContentUids, MeasureContext, TaskRecord, TrialRecord, confirmed_best

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Free bytes under which an SQLite I/O error is reported as a full disk.
FULL_DISK_BYTES = 1 << 20

_SQLITE_HEADER = b"SQLite format 3\x00"
_TASK_COLS = ("workload_key", "op", "kernel_class", "target", "flops", "task_json", "created")
_TRIAL_COLS = ("workload_key", "config_index", "config", "costs", "error", "error_msg", "build_time",
               "run_time", "timestamp", "tuner", "seed", "tvm_version", "target", "threads",
               "verified", "energy_j", "timing", "cpu_model", "extra", "uid")
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
    verified INTEGER NOT NULL, energy_j REAL, timing TEXT NOT NULL DEFAULT '',
    cpu_model TEXT NOT NULL DEFAULT '', cost REAL, extra TEXT NOT NULL DEFAULT '{}', uid TEXT);
CREATE INDEX IF NOT EXISTS trials_by_task ON trials (workload_key, config_index);
CREATE INDEX IF NOT EXISTS trials_by_cost ON trials (workload_key, cost);
CREATE UNIQUE INDEX IF NOT EXISTS trials_by_uid ON trials (uid);
"""
#: Configs a tuning process is measuring now (see :meth:`Database.claim`): other writers neither
#: measure them too nor spend the task's budget past them. Added to any file opened for writing.
_CLAIMS = """
CREATE TABLE IF NOT EXISTS claims (
    workload_key TEXT NOT NULL, context TEXT NOT NULL, config_index INTEGER NOT NULL, tuner TEXT NOT NULL,
    owner TEXT NOT NULL, claimed_at REAL NOT NULL, PRIMARY KEY (workload_key, context, config_index))
"""
#: Seconds after which a claim no longer holds (its process died without releasing it).
CLAIM_TTL_S = 3600.0
#: Upgrade of a version-1 file: new columns (empty = not recorded), the median cost of every
#: trial (filled in by :meth:`Database._migrate`), and no ``best`` table (best is a query now).
_MIGRATE_V1 = """
ALTER TABLE trials ADD COLUMN timing TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN cpu_model TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN cost REAL;
CREATE INDEX IF NOT EXISTS trials_by_cost ON trials (workload_key, cost);
DROP TABLE IF EXISTS best;
"""
#: Upgrade of a version-2 file: the ``extra`` JSON object of every trial (none for old trials).
_MIGRATE_V2 = """
ALTER TABLE trials ADD COLUMN extra TEXT NOT NULL DEFAULT '{}';
"""
#: Upgrade of a version-3 file: every trial's identity (filled in by :meth:`Database._migrate`).
_MIGRATE_V3 = """
ALTER TABLE trials ADD COLUMN uid TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS trials_by_uid ON trials (uid);
"""
#: A trial that may be a best: successful, checked against the reference, with a sane cost.
_BEST_WHERE = "error = 'none' AND verified = 1 AND cost > 0 AND cost < 1e300"
_CONTEXT_COLS = ("target", "threads", "timing", "cpu_model")
#: A confirmation trial: ``extra`` holds a ``confirm`` object (rows with malformed JSON are not).
_IS_CONFIRM = "json_extract(CASE WHEN json_valid(extra) THEN extra END, '$.confirm') IS NOT NULL"


class DatabaseError(TensortuneError):
    """A database file could not be opened, was refused, or an import was malformed."""


def _sqlite_faults(method: Callable[..., T]) -> Callable[..., T]:
    """Raise SQLite's own errors (a corrupt page, a full disk, a read-only mount, a missing table)
    as one-line :class:`DatabaseError` naming the file."""

    @functools.wraps(method)
    def wrapper(self: "Database", *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            raise _fault(self.path, e) from e

    return wrapper


def claim_owner() -> str:
    """A new claim owner: ``host:pid:random``, so that claims of a process that died on this host
    are dropped at once (:func:`_owner_alive`), not after :data:`CLAIM_TTL_S`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _owner_alive(owner: str) -> bool:
    """False when ``owner`` (see :func:`claim_owner`) is a process of this host that has exited."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another host's process: only the TTL ends its claims
    return pid_alive(int(pid))


def _fault(path: Path, e: sqlite3.Error) -> DatabaseError:
    """One line for an SQLite error on ``path``."""
    return DatabaseError(f"{path}: {e}{_full_disk(path)}")


def _full_disk(path: Path) -> str:
    """`` (the disk is full)`` when the folder of ``path`` has almost no free space, else nothing:
    SQLite reports a full disk as an I/O error."""
    try:
        full = shutil.disk_usage(path.resolve().parent).free < FULL_DISK_BYTES
    except (OSError, RuntimeError):
        full = False
    return " (the disk is full)" if full else ""


class Database:
    """Tasks and measured trials in one SQLite file (one object per process, used from one thread)."""

    SCHEMA_VERSION = 4
    BUSY_TIMEOUT_S = 60.0
    #: Older schema versions this code upgrades in place when the file is opened for writing:
    #: the statements that take each version to the next one.
    UPGRADABLE = {1: _MIGRATE_V1, 2: _MIGRATE_V2, 3: _MIGRATE_V3}
    #: Older schema versions that may be opened read-only as they are (they only lack columns
    #: whose absence reads as "nothing recorded": no extra data, no uid; an export of them writes
    #: trials without uids, which an import gives the uids the upgrade would).
    READABLE = {2, 3}

    def __init__(self, path: str | os.PathLike[str], readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        #: ids of stored rows skipped as invalid (reported once, on the first)
        self.skipped_rows: set[int] = set()
        existed = self.path.exists()
        try:
            self._open(readonly)
        except (sqlite3.Error, DatabaseError) as e:
            if not existed:  # a database that could not be created leaves no file behind
                for f in (self.path, *(Path(f"{self.path}{s}") for s in ("-wal", "-shm", "-journal"))):
                    with contextlib.suppress(OSError):
                        f.unlink()
            raise e if isinstance(e, DatabaseError) else _fault(self.path, e) from e

    def _open(self, readonly: bool) -> None:
        if self.path.is_dir():
            raise DatabaseError(f"{self.path} is a directory, not a database file")
        if self.path.exists() and not stat.S_ISREG(self.path.stat().st_mode):  # opening a FIFO would block
            raise DatabaseError(f"{self.path} is not a regular file; refusing to touch it")
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
                self._check_meta(con, upgradable=not readonly)
            finally:
                con.close()

        self._con = self._connect(readonly)
        if readonly:
            self._has_extra = self._trials_have_extra()
            return
        try:
            if is_new:  # create the schema before switching to WAL: the file appears complete
                self._write(self._create_schema)
            self._retry(lambda: self._con.execute("PRAGMA journal_mode=WAL"))
            self._con.execute("PRAGMA synchronous=NORMAL")
            if self._check_meta(self._con, upgradable=True) != self.SCHEMA_VERSION:
                self._write(self._migrate)
            self._write(lambda con: con.execute(_CLAIMS))
        except BaseException:
            self._con.close()
            raise
        self._has_extra = True

    def _trials_have_extra(self) -> bool:
        """Whether the ``trials`` table has the ``extra`` column (not in a version-2 file read as it is)."""
        return any(r["name"] == "extra" for r in self._con.execute("PRAGMA table_info(trials)").fetchall())

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

    def _check_meta(self, con: sqlite3.Connection, upgradable: bool = False) -> int:
        """Return the schema version of the tensortune database in ``con``; raise DatabaseError
        unless it is ours (or, with ``upgradable``, one this code upgrades)."""
        try:
            has_meta = con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall()) if has_meta else {}
        except sqlite3.Error as e:
            raise DatabaseError(f"{self.path} cannot be read as a tensortune database ({e}){_full_disk(self.path)}; "
                                "refusing to touch it") from None
        if meta.get("application") != "tensortune":
            raise DatabaseError(f"{self.path} is not a tensortune database (no tensortune metadata); "
                                "refusing to touch it")
        version = meta.get("schema_version")
        if version == str(self.SCHEMA_VERSION):
            return self.SCHEMA_VERSION
        if version in {str(v) for v in self.UPGRADABLE}:
            if upgradable or int(version) in self.READABLE:
                return int(version)
            raise DatabaseError(f"{self.path} has schema version {version} (older tensortune); open it once for "
                                f"writing to upgrade it in place, e.g. `tensortune db upgrade --db {self.path}`")
        raise DatabaseError(f"{self.path} has schema version {version}, "
                            f"expected {self.SCHEMA_VERSION}; refusing to touch it")

    def _migrate(self, con: sqlite3.Connection) -> None:
        """Upgrade an older schema in place, one version after the other (inside one transaction:
        all or nothing)."""
        first = int(con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
        if first == self.SCHEMA_VERSION:  # another process upgraded it first
            return
        for version in range(first, self.SCHEMA_VERSION):
            for statement in self.UPGRADABLE[version].split(";"):
                if statement.strip():
                    con.execute(statement)
        if first == 1:  # version 2 added the median cost of every trial
            con.executemany("UPDATE trials SET cost = ? WHERE id = ?",
                            [(_stored_cost(r), r["id"]) for r in con.execute("SELECT * FROM trials").fetchall()])
        if first <= 3:  # version 4 added every trial's identity
            _fill_content_uids(con)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(self.SCHEMA_VERSION),))

    def _create_schema(self, con: sqlite3.Connection) -> None:
        """Create the tables in a new file (another process may have just done so)."""
        others = con.execute("SELECT count(*) FROM sqlite_master WHERE name NOT IN ('meta', 'tasks', 'trials', "
                             "'trials_by_task', 'trials_by_cost', 'trials_by_uid', 'claims') "
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
        """Insert ``trial`` (with its median cost; a new random uid when it has none) and return the
        new row id (sqlite3.IntegrityError when its uid is stored already)."""
        trial.uid = trial.uid or uuid.uuid4().hex
        values: dict[str, Any] = {c: getattr(trial, c) for c in _TRIAL_COLS}
        values.update(config=json.dumps(trial.config), costs=json.dumps(list(trial.costs)),
                      verified=int(trial.verified), cost=trial.cost if trial.ok else None,
                      extra=json.dumps(trial.extra))
        cols = _TRIAL_COLS + ("cost",)
        cur = con.execute(f"INSERT INTO trials ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})", values)
        return int(cur.lastrowid)  # type: ignore[arg-type]

    # -- public API ------------------------------------------------------------------------------

    @_sqlite_faults
    def add_task(self, task: TaskRecord) -> None:
        """Store ``task``; if its workload key is already stored, keep the first one."""
        self._write(lambda con: self._insert_task(con, task))

    @_sqlite_faults
    def get_task(self, workload_key: str) -> TaskRecord | None:
        """Return the task stored under ``workload_key``, or None (also for an invalid stored row)."""
        rows = self._con.execute("SELECT rowid, * FROM tasks WHERE workload_key = ?", (workload_key,)).fetchall()
        return next(iter(self._valid_tasks(rows)), None)

    @_sqlite_faults
    def tasks(self) -> list[TaskRecord]:
        """Return all valid tasks in insertion order (invalid rows are skipped, with one warning)."""
        return self._valid_tasks(self._con.execute("SELECT rowid, * FROM tasks ORDER BY rowid").fetchall())

    @_sqlite_faults
    def add_trial(self, trial: TrialRecord) -> int:
        """Validate ``trial`` and store it as a new row in its own committed transaction; set and
        return its row id.

        The trial keeps its ``uid`` when no stored trial has it; without one, or with one taken
        (a record copied from a stored one), it gets a new random uid: ``add_trial`` always adds
        a measurement. To merge records that may be stored already, import them
        (:func:`tensortune.database.jsonl.import_records`). Raises ValueError (and stores nothing)
        for a trial that fails :meth:`TrialRecord.validate`.
        """
        trial.validate()

        def insert(con: sqlite3.Connection) -> int:
            if trial.uid and self._stored_row(con, trial.uid) is not None:
                trial.uid = ""
            return self._insert_trial(con, trial)

        trial.id = self._write(insert)
        return trial.id

    @staticmethod
    def _stored_row(con: sqlite3.Connection, uid: str) -> sqlite3.Row | None:
        """The stored trial row of ``uid``, or None."""
        return con.execute("SELECT * FROM trials WHERE uid = ?", (uid,)).fetchone()

    @_sqlite_faults
    def trials(self, workload_key: str | None = None, ok_only: bool = False) -> list[TrialRecord]:
        """Return trials (of one task, or all) in insertion order; ``ok_only`` drops failed ones."""
        where, args = ["1"], []
        if workload_key is not None:
            where.append("workload_key = ?")
            args.append(workload_key)
        if ok_only:
            where.append("error = 'none' AND costs != '[]'")
        rows = self._con.execute(f"SELECT * FROM trials WHERE {' AND '.join(where)} ORDER BY id", args)
        return self._valid_trials(rows.fetchall())

    @_sqlite_faults
    def claim(self, workload_key: str, context: MeasureContext, tuner: str, owner: str, indices: Sequence[int],
              budget: int) -> tuple[list[int], int]:
        """Claim, for ``owner`` (one tuning session), the configs of ``indices`` it may measure now,
        in their order, in one transaction, and return them with the budget left after them: none already measured for the task in ``context``
        (confirmations aside) or claimed by another owner, and no more than leave ``tuner``'s
        search trials plus every owner's claims of that tuner within ``budget``. So two processes
        tuning one task share its budget and never measure a config twice (Optuna's RDB storage
        keeps a running trial in the database the same way). Claims older than
        :data:`CLAIM_TTL_S` (a process that died) no longer hold."""
        ctx = json.dumps(list(context))

        def txn(con: sqlite3.Connection) -> tuple[list[int], int]:
            con.execute("DELETE FROM claims WHERE claimed_at < ?", (time.time() - CLAIM_TTL_S,))
            where = "workload_key = ? AND target = ? AND threads = ? AND timing = ? AND cpu_model = ?"
            args = (workload_key, *context)
            if self._has_extra:
                where += f" AND NOT ({_IS_CONFIRM})"
            taken = {r[0] for r in con.execute(f"SELECT DISTINCT config_index FROM trials WHERE {where}", args)}
            spent = con.execute(f"SELECT count(*) FROM trials WHERE {where} AND tuner = ?", (*args, tuner)).fetchone()[0]
            dead = {o for (o,) in con.execute("SELECT DISTINCT owner FROM claims") if not _owner_alive(o)}
            con.executemany("DELETE FROM claims WHERE owner = ?", [(o,) for o in dead])
            claims = con.execute("SELECT config_index, owner, tuner FROM claims WHERE workload_key = ? AND context = ?",
                                 (workload_key, ctx)).fetchall()
            taken |= {r[0] for r in claims}
            spent += sum(1 for r in claims if r[2] == tuner)
            granted = [i for i in dict.fromkeys(indices) if i not in taken][:max(0, budget - spent)]
            con.executemany("INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?)",
                            [(workload_key, ctx, i, tuner, owner, time.time()) for i in granted])
            return granted, max(0, budget - spent - len(granted))

        return self._write(txn)

    @_sqlite_faults
    def release(self, owner: str) -> None:
        """Drop every claim of ``owner`` (its candidates are stored, or it stops)."""
        self._write(lambda con: con.execute("DELETE FROM claims WHERE owner = ?", (owner,)))

    @_sqlite_faults
    def measured_indices(self, workload_key: str) -> set[int]:
        """Return the config indices stored for a task, whether they succeeded or not."""
        rows = self._con.execute("SELECT DISTINCT config_index FROM trials WHERE workload_key = ?",
                                 (workload_key,))
        return {r[0] for r in rows.fetchall()}

    @_sqlite_faults
    def best(self, workload_key: str, context: MeasureContext | None = None, **match: Any) -> TrialRecord | None:
        """Return the best verified successful trial of a task, or None.

        Costs are compared only like with like: with ``context``, among the trials measured in
        exactly that context; ``match`` narrows by single fields instead (``cpu_model=...``,
        ``target=...``, ``threads=...``, ``timing=...``). With neither, all of the task's
        trials compete, which is meaningful only when they share one context
        (:meth:`contexts` tells).

        When those trials include confirmations (re-measurements of the top configs, see
        :class:`TrialRecord`), the best is chosen from the latest confirmation group alone: the
        config with the lowest median over its rounds (:func:`confirmed_best`; the trial returned
        is the round whose cost is that median). Otherwise, or when no config of that group
        qualifies, it is the fastest single trial.
        """
        where, args = ["workload_key = ?"], [workload_key]
        fields = dict(context._asdict()) if context is not None else {}
        fields.update(match)
        for col, value in fields.items():
            if col not in _CONTEXT_COLS:
                raise TypeError(f"best(): unknown context field {col!r}")
            where.append(f"{col} = ?")
            args.append(value)
        if self._has_extra:
            rows = self._con.execute(f"SELECT * FROM trials WHERE {' AND '.join(where)} AND {_IS_CONFIRM} "
                                     "ORDER BY id", args).fetchall()
            confirmed = confirmed_best(self._valid_trials(rows))
            if confirmed is not None:
                return confirmed
        where.append(_BEST_WHERE)
        for row in self._con.execute(f"SELECT * FROM trials WHERE {' AND '.join(where)} ORDER BY cost, id", args):
            trial = self._valid_trials([row])
            if trial:
                return trial[0]
        return None

    @_sqlite_faults
    def contexts(self, workload_key: str) -> list[tuple[MeasureContext, int]]:
        """The contexts in which the task has verified successful trials, with their counts, most first."""
        rows = self._con.execute(f"SELECT {', '.join(_CONTEXT_COLS)}, count(*) AS n FROM trials "
                                 f"WHERE workload_key = ? AND {_BEST_WHERE} GROUP BY {', '.join(_CONTEXT_COLS)} "
                                 "ORDER BY n DESC, min(id)", (workload_key,)).fetchall()
        return [(MeasureContext(*(r[c] for c in _CONTEXT_COLS)), r["n"]) for r in rows]

    @_sqlite_faults
    def best_all(self) -> list[tuple[TaskRecord, TrialRecord]]:
        """Return (task, best trial) for every task and every context it was measured in, in task
        insertion order (one row per context: costs of different contexts are never compared)."""
        out = []
        for task in self.tasks():
            for ctx, _ in self.contexts(task.workload_key):
                trial = self.best(task.workload_key, ctx)
                if trial is not None:
                    out.append((task, trial))
        return out

    @_sqlite_faults
    def count(self, workload_key: str | None = None, confirmations: bool = False) -> int:
        """Return the number of stored search trials (of one task, or all): the trials that count
        against a tuning budget. Confirmation re-measurements (see :class:`TrialRecord`) are
        counted too only with ``confirmations``; :meth:`trials` returns both kinds."""
        where, args = ["1"], []
        if workload_key is not None:
            where.append("workload_key = ?")
            args.append(workload_key)
        if not confirmations and self._has_extra:
            where.append(f"NOT ({_IS_CONFIRM})")
        return self._con.execute(f"SELECT count(*) FROM trials WHERE {' AND '.join(where)}", args).fetchone()[0]

    # -- validation of stored rows ----------------------------------------------------------------

    def _skip(self, row_id: int, what: str, reason: str) -> None:
        """Remember an invalid stored row; say so once per database."""
        if not self.skipped_rows:
            log.warning("%s: skipping invalid %s row %s (%s); further invalid rows are skipped without a message",
                        self.path, what, row_id, reason)
        self.skipped_rows.add(row_id)

    def _valid_trials(self, rows: list[sqlite3.Row]) -> list[TrialRecord]:
        return self._valid(rows, "trial", "id", _row_to_trial)

    def _valid_tasks(self, rows: list[sqlite3.Row]) -> list[TaskRecord]:
        return self._valid(rows, "task", "rowid", _row_to_task)

    def _valid(self, rows: list[sqlite3.Row], what: str, id_col: str, convert: Callable[[sqlite3.Row], Any]) -> list:
        """The records of ``rows`` that convert and validate; the others are skipped (:meth:`_skip`)."""
        out = []
        for r in rows:
            try:
                record = convert(r)
                record.validate()
            except (ValueError, TypeError, KeyError) as e:
                self._skip(r[id_col], what, str(e))
                continue
            out.append(record)
        return out

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
    """Convert a ``trials`` row into a :class:`TrialRecord` (types checked; ValueError if bad)."""
    values = {c: row[c] for c in _TRIAL_COLS if c in row.keys()}  # no ``extra`` in a version-2 file read as it is
    values["uid"] = values.get("uid") or ""  # none in a version-2 or -3 file read as it is
    values["config"], values["costs"] = json.loads(row["config"]), json.loads(row["costs"])
    values["verified"] = bool(row["verified"])
    values["extra"] = json.loads(values["extra"]) if values.get("extra") else {}
    return TrialRecord.from_json({**values, "id": row["id"]})


def _row_to_task(row: sqlite3.Row) -> TaskRecord:
    """Convert a ``tasks`` row into a :class:`TaskRecord` (types checked; ValueError if bad)."""
    return TaskRecord.from_json({c: row[c] for c in _TASK_COLS})


def _fill_content_uids(con: sqlite3.Connection) -> None:
    """Give every stored trial, in id order, the uid its content and occurrence give it
    (:class:`~tensortune.database.records.ContentUids`): what an import of an old export of the
    file gives the same trials. A row that does not read as a trial is hashed as it is stored."""
    uids = ContentUids()
    rows = con.execute("SELECT * FROM trials ORDER BY id").fetchall()
    con.executemany("UPDATE trials SET uid = ? WHERE id = ?", [(uids.next(_row_content(r)), r["id"]) for r in rows])


def _row_content(row: sqlite3.Row) -> str:
    """The content of a stored trial (:meth:`TrialRecord.content`), or, for a row that does not
    convert, its stored values as JSON (such a row never reaches an export)."""
    try:
        return _row_to_trial(row).content()
    except (ValueError, TypeError, KeyError, RecursionError):
        stored = [row[c] for c in row.keys() if c not in ("id", "cost", "uid")]
        return json.dumps({"invalid row": stored}, default=repr)


def _stored_cost(row: sqlite3.Row) -> float | None:
    """The ``cost`` column of a stored trial: its median cost, or None when it failed or is invalid."""
    try:
        trial = _row_to_trial(row)
        trial.validate()
    except (ValueError, TypeError, KeyError):
        return None
    return trial.cost if trial.ok else None
