"""Export and import of a database as JSON lines: task lines first, then trial lines."""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from typing import Iterator, TextIO

from .records import TaskRecord, TrialRecord
from .sqlite import Database, DatabaseError


@contextlib.contextmanager
def _opened(f: str | os.PathLike[str] | TextIO, mode: str) -> Iterator[TextIO]:
    """Yield ``f`` itself if it is a stream, else the file it names (closed afterwards)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, mode, encoding="utf-8") as stream:
            yield stream
    else:
        yield f


def export_jsonl(db: Database, out: str | os.PathLike[str] | TextIO, workload_key: str | None = None) -> int:
    """Write the tasks and trials of ``db`` (or of one task) to ``out``; return the lines written."""
    tasks = db.tasks() if workload_key is None else [t for t in [db.get_task(workload_key)] if t]
    lines = [{"kind": "task", **t.to_json()} for t in tasks]
    lines += [{"kind": "trial", **t.to_json()} for t in db.trials(workload_key)]
    with _opened(out, "w") as stream:
        for line in lines:
            stream.write(json.dumps(line) + "\n")
    return len(lines)


def read_jsonl(src: str | os.PathLike[str] | TextIO) -> tuple[list[TaskRecord], list[TrialRecord]]:
    """Parse and validate every line of ``src``; a malformed line raises :class:`DatabaseError`
    naming its line number."""
    tasks: list[TaskRecord] = []
    trials: list[TrialRecord] = []
    with _opened(src, "r") as stream:
        name = getattr(stream, "name", "<stream>")
        for lineno, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                kind = obj.pop("kind", None) if isinstance(obj, dict) else None
                if kind == "task":
                    tasks.append(TaskRecord.from_json(obj))
                elif kind == "trial":
                    trials.append(TrialRecord.from_json({**obj, "id": None}))
                else:
                    raise ValueError(f"expected an object with kind 'task' or 'trial', got {kind!r}")
            except ValueError as e:  # json.JSONDecodeError is a ValueError
                raise DatabaseError(f"{name}, line {lineno}: {e}") from None
    return tasks, trials


def import_records(db: Database, tasks: list[TaskRecord], trials: list[TrialRecord]) -> tuple[int, int]:
    """Insert records in one transaction; return (tasks added, trials added).

    Trials already present (same workload key, config index, timestamp and tuner) are skipped.
    """

    def insert(con: sqlite3.Connection) -> tuple[int, int]:
        n_tasks = sum(db._insert_task(con, t) for t in tasks)
        n_trials = 0
        for t in trials:
            if not con.execute("SELECT 1 FROM trials WHERE workload_key = ? AND config_index = ? "
                               "AND timestamp = ? AND tuner = ?",
                               (t.workload_key, t.config_index, t.timestamp, t.tuner)).fetchone():
                db._insert_trial(con, t)
                n_trials += 1
        return n_tasks, n_trials

    return db._write(insert)


def import_jsonl(db: Database, src: str | os.PathLike[str] | TextIO) -> tuple[int, int]:
    """Add the tasks and trials in ``src`` to ``db``: all lines are validated before anything
    is written (:func:`read_jsonl`), then inserted in one transaction (:func:`import_records`)."""
    return import_records(db, *read_jsonl(src))
