"""Export and import of a database as JSON lines: task lines first, then trial lines.

An import is all or nothing: every line is parsed and every value validated (types, finite
positive costs, known error kinds, a task for every trial, and, where the caller can check
it, a config index inside the task's space) before one transaction writes anything. The
first bad line is named in a one-line :class:`DatabaseError`.

Trials are matched by their ``uid`` (see :mod:`.records`), which the export writes: a trial
whose uid is stored with the same content is already there, one whose uid is stored with
other content is refused (counted, with its reason), every other one is added. So an export
imported into a new file gives back every trial, and importing a file twice adds nothing.
Lines without a uid (exported before trials had one) get the uid their content and
occurrence give them, the one an upgrade of their database gave the same trials. What an
import did is an :class:`ImportReport`.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TextIO

from .records import TaskRecord, TrialRecord, assign_content_uids
from .sqlite import Database, DatabaseError, _row_to_trial

#: Longest line read (a record is a few kB; a task with its fused function's description, tens).
MAX_LINE_CHARS = 4 << 20

#: Optional check of a trial against its task (e.g. the config index inside the task's space);
#: raises ValueError with a reason.
TrialCheck = Callable[[TaskRecord, TrialRecord], None]


#: Why a trial is refused when its uid is stored with other content.
OTHER_CONTENT = "trials whose uid is stored with other content"


@dataclass
class ImportReport:
    """What an import did: tasks and trials added, those already stored (the same record: nothing
    to do), and records refused, counted by reason."""

    source: str = ""
    records: int = 0  # records read (lines, or MetaSchedule records)
    tasks_added: int = 0
    trials_added: int = 0
    tasks_present: int = 0
    trials_present: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    @property
    def added(self) -> int:
        """Records added, tasks and trials."""
        return self.tasks_added + self.trials_added

    @property
    def empty(self) -> bool:
        """Whether the source held records and none of them was added."""
        return self.records > 0 and self.added == 0

    def to_json(self) -> dict[str, Any]:
        """The report for scripts."""
        return {"source": self.source, "records": self.records,
                "added": {"tasks": self.tasks_added, "trials": self.trials_added},
                "already_stored": {"tasks": self.tasks_present, "trials": self.trials_present},
                "refused": {"records": sum(self.refused.values()), "reasons": dict(self.refused.most_common())}}

    def describe(self) -> str:
        """One line for people: ``imported 1 tasks and 8 trials; already stored: ...; refused ...``."""
        return "; ".join([f"imported {self.tasks_added} tasks and {self.trials_added} trials", *self._rest()])

    def why_nothing(self) -> str:
        """One line saying that nothing was added from the source, and why."""
        rest = self._rest() or ["it held nothing new"]
        return f"nothing was added from {self.source or 'the input'}: " + "; ".join(rest)

    def _rest(self) -> list[str]:
        parts = []
        if self.tasks_present or self.trials_present:
            parts.append(f"already stored: {self.tasks_present} tasks and {self.trials_present} trials")
        if self.refused:
            why = ", ".join(f"{n} {reason}" for reason, n in self.refused.most_common())
            parts.append(f"refused {sum(self.refused.values())}: {why}")
        return parts


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


def import_records(db: Database, tasks: list[TaskRecord], trials: list[TrialRecord],
                   report: ImportReport | None = None) -> ImportReport:
    """Insert records in one transaction and count in ``report`` (a new one by default) what
    was added, what was already stored, and what was refused; return it.

    Each record is validated first (nothing is written if one fails). A task whose key is
    stored is already there. Trials without a uid get their content uid
    (:func:`~tensortune.database.records.assign_content_uids`, in the order given); a trial
    whose uid is stored with the same content (stored before, or earlier in ``trials``) is
    already there, one whose uid is stored with other content is refused.
    """
    try:
        for r in [*tasks, *trials]:
            r.validate()
    except ValueError as e:
        raise DatabaseError(str(e)) from None
    report = report if report is not None else ImportReport()
    assign_content_uids(trials)

    def insert(con: sqlite3.Connection) -> None:
        for task in tasks:
            if db._insert_task(con, task):
                report.tasks_added += 1
            else:
                report.tasks_present += 1
        for trial in trials:
            _merge_trial(db, con, trial, report)

    db._write(insert)
    return report


def _merge_trial(db: Database, con: sqlite3.Connection, trial: TrialRecord, report: ImportReport) -> None:
    """Insert ``trial`` unless its uid is stored: then it is already there (the same content)
    or refused (other content)."""
    row = db._stored_row(con, trial.uid)
    if row is None:
        db._insert_trial(con, trial)
        report.trials_added += 1
    elif _same_content(row, trial):
        report.trials_present += 1
    else:
        report.refused[OTHER_CONTENT] += 1


def _same_content(row: sqlite3.Row, trial: TrialRecord) -> bool:
    """Whether the stored ``row`` says what ``trial`` says (a row that does not read as a trial: no)."""
    try:
        return _row_to_trial(row) == trial
    except (ValueError, TypeError, KeyError, RecursionError):
        return False


def import_jsonl(db: Database, src: str | os.PathLike[str] | TextIO | ParsedRecords,
                 check: TrialCheck | None = None) -> ImportReport:
    """Add the tasks and trials in ``src`` to ``db``: every line is parsed and validated
    (:func:`parse_jsonl`, :func:`check_records`) before anything is written, then all are
    inserted in one transaction (:func:`import_records`); return what was done."""
    parsed = src if isinstance(src, ParsedRecords) else parse_jsonl(src)
    check_records(db, parsed, check)
    report = ImportReport(source=parsed.name, records=len(parsed.tasks) + len(parsed.trials))
    return import_records(db, [t for _, t in parsed.tasks], [t for _, t in parsed.trials], report)


__all__ = ["ImportReport", "OTHER_CONTENT", "ParsedRecords", "TrialCheck", "check_records", "export_jsonl",
           "import_jsonl", "import_records", "parse_jsonl", "read_jsonl"]

