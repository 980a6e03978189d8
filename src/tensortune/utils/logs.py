"""The library's messages go through :mod:`logging` (logger ``tensortune.*``), never ``print``.

A Python user captures or silences them like any library's (``logging.getLogger("tensortune")``).
The command line shows warnings and errors on stderr as ``tensortune: warning: ...``
(:func:`log_to_stderr`).
"""
from __future__ import annotations

import logging
import sys

ROOT = "tensortune"


class _StderrHandler(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is when a record is written (tests replace it)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{ROOT}: {record.levelname.lower()}: {record.getMessage()}"


_SAID: set[tuple[str, str]] = set()


def warn_once(logger: logging.Logger, message: str) -> None:
    """Log ``message`` as a warning the first time this process says it (a notice that every
    task of a model would repeat, such as a predictor trained on another machine)."""
    if (logger.name, message) not in _SAID:
        _SAID.add((logger.name, message))
        logger.warning("%s", message)


def log_to_stderr(level: int = logging.WARNING) -> None:
    """Show the library's messages of ``level`` and above on stderr, one line each (idempotent).

    For the command line's own process: records stop at this handler. A library that logs through
    the root logger's functions (TVM's legalization calls ``logging.info``) gives the root logger a
    stderr handler of its own, which would print every message a second time."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_Format())
        logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(level)
