"""Command lines for child Python processes that run no code from the working directory.

``python -c`` and ``python -m`` put the current directory first on ``sys.path``, so a ``tvm.py``
left in the folder where a user runs tensortune would run in every worker. Children start with
``-P`` (Python 3.11+: no unsafe path) and, for older interpreters, drop that entry themselves before
importing anything that is not built in.
"""
from __future__ import annotations

import sys

_DROP_UNSAFE_PATH = "import sys\nif sys.path and sys.path[0] in ('', '.'):\n    del sys.path[0]\n"


def python_command(code: str, *args: str) -> list[str]:
    """argv that runs ``code`` (then sees ``args`` as ``sys.argv[1:]``) in a fresh interpreter
    without the working directory on ``sys.path``."""
    safe = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe, "-c", _DROP_UNSAFE_PATH + code, *args]


def module_command(module: str, *args: str) -> list[str]:
    """argv that runs ``module`` as ``__main__`` with ``args``, as ``python -m`` would, without the
    working directory on ``sys.path``."""
    return python_command(f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n", *args)
