"""``tensortune report``: one HTML page (with PNGs) of what a tuning database says about a run."""
from __future__ import annotations

import argparse
from typing import Any

from .args import check_db, check_output, positive_int


def add_parsers(sub: Any) -> None:
    """The ``report`` command."""
    r = sub.add_parser("report", help="an HTML page of a tuning run: curves, errors, time, compile choices")
    r.add_argument("--db", required=True, help="SQLite database file of the run")
    r.add_argument("--model", default=None, help="a model (as for tune): only its tasks, weighted, with its "
                   "estimated latency over the run and what compile chooses")
    r.add_argument("--batch", type=positive_int, default=1, help="batch size of a built-in model (default 1)")
    r.add_argument("-o", "--output", default="report.html",
                   help="HTML file to write (default report.html; its PNGs go in REPORT_files/)")
    r.add_argument("--force", action="store_true", help="overwrite an existing output file")
    r.add_argument("--no-compile", action="store_true", help="with --model: skip the compile choices "
                   "(compiling takes a minute or two)")


def cmd_report(a: argparse.Namespace) -> int:
    """``tensortune report``."""
    from .. import app

    check_db(a.db, must_exist=True)
    check_output(a.output, a.force, db=a.db)
    model = app.load(a.model, batch=a.batch) if a.model else None
    rep = app.write_report(a.db, model, a.output, compile_choices=not a.no_compile)
    trials = sum(t.trials for t in rep.tasks)
    print(f"wrote {a.output}: {len(rep.tasks)} tasks, {trials} trials, {sum(rep.errors().values())} errors"
          + (f"; {rep.model}'s estimate {rep.timeline[-1][1]:.2f} ms" if rep.timeline else ""))
    return 0


COMMANDS = {"report": cmd_report}
