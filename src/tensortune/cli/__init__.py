"""The ``tensortune`` command line: one module per command group, each a client of
:mod:`tensortune.app` with an ``add_parsers(sub)`` and a ``COMMANDS`` table.

- :mod:`.models`: the deploy flow on a model (``tune``, ``tasks``, ``compile``, ``bench``, ``profile``,
  ``check``, ``demo``);
- :mod:`.ops`: ``tune-op``; :mod:`.db`: ``db best|export|import|upgrade``; :mod:`.report`: ``report``;
- research tools: :mod:`.dataset`, :mod:`.predictor`, :mod:`.fasor` (``hardware``, ``fasor``), :mod:`.race`.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from ..errors import TensortuneError, UsageError
from ..extras import missing_extra
from .args import Parser

#: The command groups, in the order ``--help`` lists them, with the title it lists each under.
GROUPS = ("models", "ops", "db", "report", "dataset", "predictor", "fasor", "race")
TITLES = {"models": "deploy a model", "ops": "one operator", "db": "tuning databases", "report": "tuning databases",
          "dataset": "research tools", "predictor": "research tools", "fasor": "research tools",
          "race": "research tools"}

__all__ = ["GROUPS", "UsageError", "build_parser", "main"]


def _groups() -> list[object]:
    return [import_module(f"{__name__}.{g}") for g in GROUPS]


class _Listing:
    """Stands in for the sub-parsers action while a group adds its commands, keeping each
    command's help line for the grouped listing of ``tensortune --help``."""

    def __init__(self, sub: argparse._SubParsersAction, rows: list[tuple[str, str]]) -> None:
        self._sub, self._rows = sub, rows

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        self._rows.append((name, str(kwargs.get("help", ""))))
        return self._sub.add_parser(name, **kwargs)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs); ``--help`` lists the commands by group,
    the deploy flow first."""
    p = Parser(prog="tensortune", usage="tensortune [-h] [--version] COMMAND ...",
               description="Auto-tune tensor programs on Apache TVM.",
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser, metavar="COMMAND", help=argparse.SUPPRESS,
                           prog="tensortune")
    listing: dict[str, list[tuple[str, str]]] = {}
    for name, group in zip(GROUPS, _groups()):
        group.add_parsers(_Listing(sub, listing.setdefault(TITLES[name], [])))  # type: ignore[attr-defined]
    width = max(len(n) for rows in listing.values() for n, _ in rows) + 2
    p.epilog = "\n\n".join(title + ":\n" + "\n".join(f"  {n:{width}}{h}" for n, h in rows)
                            for title, rows in listing.items())
    p.epilog += "\n\n`tensortune COMMAND --help` tells a command's options."
    return p


def _version() -> str:
    """``tensortune X (Apache TVM Y, Python Z)``, read from the installed metadata (nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    try:
        tvm = version("apache-tvm")
    except PackageNotFoundError:
        tvm = "not installed"
    return f"tensortune {__version__} (Apache TVM {tvm}, Python {sys.version.split()[0]})"


def commands() -> dict[str, Callable[[argparse.Namespace], int]]:
    """Every sub-command's function, by name."""
    table: dict[str, Callable[[argparse.Namespace], int]] = {}
    for group in _groups():
        table.update(group.COMMANDS)  # type: ignore[attr-defined]
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensortune`` console script.

    Every fault ends in one line on stderr and a non-zero status: the library's own errors
    (:class:`TensortuneError`) with their exit code, and faults of the environment (a full disk, a
    read-only or corrupt database file, a closed stdout, memory) with status 1."""
    from ..utils.logs import log_to_stderr
    from ..utils.quiet import quiet_third_party_warnings

    quiet_third_party_warnings()
    log_to_stderr()
    command = "tensortune"
    try:
        try:
            a = build_parser().parse_args(argv)
        except SystemExit:  # --help or --version printed: flush now, where a closed pipe can be caught
            sys.stdout.flush()
            raise
        command = f"tensortune {a.cmd}"
        return commands()[a.cmd](a)
    except TensortuneError as e:
        return _fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        print("tensortune: interrupted; measured trials are in the database, rerun to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (`| head`)
        _silence_stdout()
        return 141
    except ImportError as e:  # an optional library the command needs
        missing = missing_extra(e, command)
        if missing is None:
            raise
        return _fail(str(missing), missing.exit_code)
    except (OSError, sqlite3.Error, MemoryError, RecursionError) as e:
        return _fail(_environment_fault(e), 1)


def _environment_fault(e: BaseException) -> str:
    """One line for a fault of the machine rather than of the input."""
    if isinstance(e, MemoryError):
        return f"out of memory{': ' + str(e) if str(e) else ''}"
    if isinstance(e, RecursionError):
        return "input nested too deeply to read"
    if isinstance(e, sqlite3.Error):
        return f"database: {e}"
    where = f"{e.filename}: " if getattr(e, "filename", None) else ""
    return f"{where}{e.strerror or e}" if isinstance(e, OSError) else str(e)


def _fail(message: str, code: int) -> int:
    """Print ``tensortune: error: message`` on stderr; stdout is silenced if it cannot be flushed
    (a full or closed stdout would otherwise raise again at exit)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _silence_stdout()
    print(f"tensortune: error: {message.splitlines()[0] if message else 'failed'}", file=sys.stderr)
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
