"""Export and import of a database as JSON lines: task lines first, then trial lines.

An import is all or nothing: every line is parsed and every value validated (types, finite
positive costs, known error kinds, a task for every trial, and, where the caller can check
it, a config index inside the task's space) before one transaction writes anything. The
first bad line is named in a one-line :class:`DatabaseError`.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass, field
from typing import Callable, Iterator, TextIO

from .records import TaskRecord, TrialRecord
from .sqlite import Database, DatabaseError

#: Longest line read (a record is a few kB; a task with its fused function's description, tens).
MAX_LINE_CHARS = 4 << 20

#: Optional check of a trial against its task (e.g. the config index inside the task's space);
#: raises ValueError with a reason.
TrialCheck = Callable[[TaskRecord, TrialRecord], None]


@dataclass
class ParsedRecords:
    """The records of a JSON-lines file, each with its line number (for error messages)."""

    name: str
    tasks: list[tuple[int, TaskRecord]] = field(default_factory=list)
    trials: list[tuple[int, TrialRecord]] = field(default_factory=list)


@contextlib.contextmanager
def _opened(f: str | os.PathLike[str] | TextIO, mode: str) -> Iterator[TextIO]:
    """Yield ``f`` itself if it is a stream, else the file it names (closed afterwards)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, mode, encoding="utf-8") as stream:
            yield stream
    else:
        yield f


def export_jsonl(db: Database, out: str | os.PathLike[str] | TextIO, workload_key: str | None = None) -> int:
    """Write the tasks and trials of ``db`` (or of one task) to ``out``; return the lines written.

    A path is written atomically (a temporary file renamed over it when complete); checking
    that the path may be written at all is the caller's job
    (:func:`tensortune.utils.atomic.check_output_path`).
    """
    from ..utils.atomic import atomic_write

    tasks = db.tasks() if workload_key is None else [t for t in [db.get_task(workload_key)] if t]
    lines = [{"kind": "task", **t.to_json()} for t in tasks]
    lines += [{"kind": "trial", **t.to_json()} for t in db.trials(workload_key)]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if isinstance(out, (str, os.PathLike)):
        atomic_write(out, text)
    else:
        out.write(text)
    return len(lines)


def parse_jsonl(src: str | os.PathLike[str] | TextIO) -> ParsedRecords:
    """Parse every line of ``src`` and validate each record on its own; a malformed line raises
    :class:`DatabaseError` naming its line number."""
    with _opened(src, "r") as stream:
        parsed = ParsedRecords(getattr(stream, "name", "<stream>"))
        try:
            lines = list(_bounded_lines(stream, parsed.name))
        except UnicodeDecodeError as e:
            raise DatabaseError(f"{parsed.name}: not UTF-8 text ({e})") from None
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            try:
                obj = json.loads(line)
            except RecursionError:
                raise ValueError("JSON nested too deeply") from None
            kind = obj.pop("kind", None) if isinstance(obj, dict) else None
            if kind == "task":
                task = TaskRecord.from_json(obj)
                task.validate()
                parsed.tasks.append((lineno, task))
            elif kind == "trial":
                trial = TrialRecord.from_json({**obj, "id": None})
                trial.validate()
                parsed.trials.append((lineno, trial))
            else:
                raise ValueError(f"expected an object with kind 'task' or 'trial', got {kind!r}")
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            raise DatabaseError(f"{parsed.name}, line {lineno}: {e}") from None
    return parsed


def _bounded_lines(stream: TextIO, name: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of ``stream``; DatabaseError for a line over :data:`MAX_LINE_CHARS`
    (read no further than that: a 150 MB line took 500 MB of memory)."""
    lineno = 0
    while True:
        line = stream.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        lineno += 1
        if len(line) > MAX_LINE_CHARS:
            raise DatabaseError(f"{name}, line {lineno}: longer than {MAX_LINE_CHARS} characters; not a record")
        yield lineno, line


def read_jsonl(src: str | os.PathLike[str] | TextIO) -> tuple[list[TaskRecord], list[TrialRecord]]:
    """The tasks and trials of ``src`` (see :func:`parse_jsonl`), without line numbers."""
    parsed = parse_jsonl(src)
    return [t for _, t in parsed.tasks], [t for _, t in parsed.trials]


def check_records(db: Database, parsed: ParsedRecords, check: TrialCheck | None = None) -> None:
    """Raise :class:`DatabaseError` naming the first line whose record cannot go into ``db``.

    Every trial needs its task, in the file or already in ``db``; a task line whose key is
    already stored must describe the same task; ``check`` (if given) vets each trial against
    its task.
    """
    known: dict[str, TaskRecord] = {}
    for lineno, task in parsed.tasks:
        stored = db.get_task(task.workload_key)
        if stored is not None and (stored.task_json, stored.target) != (task.task_json, task.target):
            raise DatabaseError(f"{parsed.name}, line {lineno}: task {task.workload_key} is already stored "
                                "with another definition")
        known.setdefault(task.workload_key, task)
    for lineno, trial in parsed.trials:
        task = known.get(trial.workload_key)
        if task is None:
            task = db.get_task(trial.workload_key)
            if task is None:
                raise DatabaseError(f"{parsed.name}, line {lineno}: trial of unknown task {trial.workload_key} "
                                    "(not in the file nor in the database)")
            known[trial.workload_key] = task
        if check is not None:
            try:
                check(task, trial)
            except ValueError as e:
                raise DatabaseError(f"{parsed.name}, line {lineno}: {e}") from None


def import_records(db: Database, tasks: list[TaskRecord], trials: list[TrialRecord]) -> tuple[int, int]:
    """Insert records in one transaction; return (tasks added, trials added).

    Each record is validated first (nothing is written if one fails). Trials already present
    (same workload key, config index, timestamp and tuner) are skipped.
    """
    try:
        for r in [*tasks, *trials]:
            r.validate()
    except ValueError as e:
        raise DatabaseError(str(e)) from None

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


def import_jsonl(db: Database, src: str | os.PathLike[str] | TextIO | ParsedRecords,
                 check: TrialCheck | None = None) -> tuple[int, int]:
    """Add the tasks and trials in ``src`` to ``db``: every line is parsed and validated
    (:func:`parse_jsonl`, :func:`check_records`) before anything is written, then all are
    inserted in one transaction (:func:`import_records`)."""
    parsed = src if isinstance(src, ParsedRecords) else parse_jsonl(src)
    check_records(db, parsed, check)
    return import_records(db, [t for _, t in parsed.tasks], [t for _, t in parsed.trials])


__all__ = ["ParsedRecords", "TrialCheck", "check_records", "export_jsonl", "import_jsonl", "import_records",
           "parse_jsonl", "read_jsonl"]

