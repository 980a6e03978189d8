"""The library's own error type.

Every fault a user can cause (bad input, an unusable file, an environment that cannot run a step)
is raised as a :class:`TensortuneError` with a one-line message. The command line prints it as
``tensortune: error: <message>`` and exits with :attr:`TensortuneError.exit_code`; any other
exception that escapes is a bug.
"""
from __future__ import annotations


class TensortuneError(Exception):
    """A fault the user can act on, said in one line (exit status 2: bad input or data)."""

    exit_code = 2


class UsageError(TensortuneError):
    """An argument the caller got wrong (a command-line flag or an API parameter), said in one line."""
