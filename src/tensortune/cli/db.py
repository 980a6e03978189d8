"""``tensortune db ...``: what a tuning database holds (``best``), records in and out
(``export``, ``import``) and an older database brought to this version (``upgrade``)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from ..app.checks import config_check
from ..errors import TensortuneError, UsageError
from .args import Parser, check_db, check_output, open_db

if TYPE_CHECKING:  # pragma: no cover
    from ..database import ImportReport

#: The record formats of ``db export`` / ``db import``.
FORMATS = ("jsonl", "metaschedule")


class NothingImported(TensortuneError):
    """An import whose input held records and that added none of them (without ``--allow-empty``)."""

    exit_code = 1


def add_parsers(sub: Any) -> None:
    """The ``db`` command and its sub-commands."""
    d = sub.add_parser("db", help="a tuning database: best, export, import, upgrade")
    dbs = d.add_subparsers(dest="db_cmd", required=True, parser_class=Parser, metavar="COMMAND")
    b = dbs.add_parser("best", help="best stored config of each task")
    b.add_argument("--db", required=True, help="SQLite database file")
    b.add_argument("--json", action="store_true", help="print one JSON list")

    e = dbs.add_parser("export", help="export records as JSON lines, or as MetaSchedule tuning records")
    e.add_argument("--db", required=True, help="SQLite database file")
    e.add_argument("--format", choices=FORMATS, default="jsonl",
                   help="jsonl (every trial; default) or metaschedule (a JSONDatabase folder TVM's "
                        "MetaScheduleApplyDatabase applies: per task the record compile would use)")
    e.add_argument("--model", default=None, help="metaschedule: that model's tasks, with its fused Relax module "
                   "written beside the records (model.json)")
    e.add_argument("-o", "--output", default="-", help="file (default: standard output); written atomically, "
                   "never over a database; metaschedule: a folder, required")
    e.add_argument("--force", action="store_true", help="overwrite an existing (non-database) output file")

    i = dbs.add_parser("import", help="import JSON-lines records (all validated before anything is written), "
                                      "or MetaSchedule records tensortune exported")
    i.add_argument("--db", required=True, help="SQLite database file (created if missing)")
    i.add_argument("--format", choices=FORMATS, default="jsonl", help="jsonl (default) or metaschedule")
    i.add_argument("--model", default=None, help="metaschedule: a model whose tasks the records may be of")
    i.add_argument("--allow-empty", action="store_true",
                   help="succeed when nothing is added (every record already stored or refused); "
                        "without it such an import exits with status 1")
    i.add_argument("--json", action="store_true", help="print the import report as one JSON object")
    i.add_argument("input", help="JSON-lines file, or a MetaSchedule JSONDatabase folder")

    u = dbs.add_parser("upgrade", help="upgrade a database written by an older tensortune, in place")
    u.add_argument("--db", required=True, help="SQLite database file")


def cmd_best(a: argparse.Namespace) -> int:
    """``tensortune db best``."""
    check_db(a.db, must_exist=True)
    db = open_db(a.db, readonly=True)
    from ..database.trials import task_name

    rows = []
    contexts = []
    try:
        for task, trial in db.best_all():
            contexts.append(trial.context)
            rows.append({"workload_key": task.workload_key, "task": task_name(task),
                         "best_config": trial.config, "best_latency_ms": trial.cost * 1e3,
                         "best_gflops": task.flops / trial.cost / 1e9, "tuner": trial.tuner,
                         "trial_id": trial.id, "trials": db.count(task.workload_key),
                         "measured": trial.context.to_json()})
    finally:
        db.close()
    if a.json:
        print(json.dumps(rows))
    else:
        for r, ctx in zip(rows, contexts):
            print(f"{r['task']:<55} {r['best_latency_ms']:10.4f} ms {r['best_gflops']:8.1f} GFLOPS  "
                  f"({r['trials']} trials, {r['tuner']}; {ctx.describe()})")
        if not rows:
            print("no verified trials stored")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    """``tensortune db export``."""
    from ..database import export_jsonl

    check_db(a.db, must_exist=True)
    if a.format == "metaschedule":
        return _export_metaschedule(a)
    if a.model:
        raise UsageError("--model goes with --format metaschedule")
    if a.output != "-":
        check_output(a.output, a.force, db=a.db)
    db = open_db(a.db, readonly=True)
    try:
        n = export_jsonl(db, sys.stdout if a.output == "-" else a.output)
    finally:
        db.close()
    print(f"exported {n} records" + (f" to {a.output}" if a.output != "-" else ""), file=sys.stderr)
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    """``tensortune db import``."""
    from ..database import DatabaseError, import_jsonl, parse_jsonl

    if a.format == "metaschedule":
        return _import_metaschedule(a)
    if a.model:
        raise UsageError("--model goes with --format metaschedule")
    if not os.path.isfile(a.input):
        raise UsageError(f"{a.input}: no such file")
    check_db(a.db, must_exist=False)
    try:
        parsed = parse_jsonl(a.input)  # every line checked before the database is touched
    except DatabaseError as e:
        raise UsageError(str(e)) from None
    existed = os.path.exists(a.db)
    db = open_db(a.db)
    try:
        report = import_jsonl(db, parsed, check=config_check())
    except DatabaseError as e:
        db.close()
        if not existed:  # all or nothing: a refused import leaves no new database behind
            _remove_db(a.db)
        raise UsageError(str(e)) from None
    finally:
        db.close()
    return _reported(a, report, created=not existed)


def _reported(a: argparse.Namespace, report: ImportReport, created: bool) -> int:
    """Print what an import did (``--json``: as one object); NothingImported when its input held
    records and none was added, unless ``--allow-empty`` (a database it created is removed)."""
    if a.json:
        print(json.dumps(report.to_json()))
    if report.empty and not a.allow_empty:
        if created:
            _remove_db(a.db)
        raise NothingImported(f"{report.why_nothing()} (pass --allow-empty when that is expected)")
    if not a.json:
        print(report.describe())
    return 0


def _remove_db(path: str) -> None:
    """Remove the database file at ``path`` and its journals (one this command created)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            os.remove(path + suffix)


def cmd_upgrade(a: argparse.Namespace) -> int:
    """``tensortune db upgrade``: open for writing, which upgrades an older schema in one transaction."""
    from ..database import Database

    check_db(a.db, must_exist=True)
    db = open_db(a.db)
    try:
        n = db.count()
    finally:
        db.close()
    print(f"{a.db}: schema version {Database.SCHEMA_VERSION}, {n} trials")
    return 0



def _model(name: str | None) -> Any:
    from .. import app

    return app.load(name) if name else None


def _export_metaschedule(a: argparse.Namespace) -> int:
    from ..app.metaschedule import export_records

    if a.output == "-":
        raise UsageError("--format metaschedule writes a folder: give -o FOLDER")
    if os.path.exists(a.output) and not os.path.isdir(a.output):
        raise UsageError(f"{a.output}: not a folder")
    model = _model(a.model)
    db = open_db(a.db, readonly=True)
    try:
        out = export_records(db, a.output, model)
    finally:
        db.close()
    print(f"exported {out.describe()} to {a.output}" + (f" (the model's module: {out.module})" if out.module else ""))
    return 0


def _import_metaschedule(a: argparse.Namespace) -> int:
    from ..app.metaschedule import import_records

    if not os.path.isdir(a.input):
        raise UsageError(f"{a.input}: not a folder (a MetaSchedule JSONDatabase)")
    check_db(a.db, must_exist=False)
    model = _model(a.model)
    existed = os.path.exists(a.db)
    db = open_db(a.db)
    try:
        report = import_records(db, a.input, model)
    except TensortuneError:
        db.close()
        if not existed:
            _remove_db(a.db)
        raise
    finally:
        db.close()
    return _reported(a, report, created=not existed)


SUBCOMMANDS = {"best": cmd_best, "export": cmd_export, "import": cmd_import, "upgrade": cmd_upgrade}


def cmd_db(a: argparse.Namespace) -> int:
    """``tensortune db COMMAND``."""
    return SUBCOMMANDS[a.db_cmd](a)


COMMANDS = {"db": cmd_db}
