"""Scratch folders under the system's temporary folder that a killed process does not leave behind.

A process removes its scratch folder when it closes what uses it, but a process killed first
(SIGKILL, a Ray actor stopped, the machine's OOM killer) cannot. Each folder's name carries the
pid of the process that made it (``PREFIX<pid>-<random>``), and making a new one removes those
of the same prefix whose process has exited on this host.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

#: Folders of the older name without a pid are removed once this old (seconds since last change).
UNNAMED_AGE_S = 24 * 3600.0


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` of this host exists (someone else's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def sweep(prefix: str, root: str | None = None) -> int:
    """Remove ``prefix`` folders in ``root`` (the temporary folder) whose process has exited;
    return how many were removed."""
    removed = 0
    for path in Path(root or tempfile.gettempdir()).glob(prefix + "*"):
        pid, dash, _ = path.name[len(prefix):].partition("-")
        try:
            if dash and pid.isdigit():
                stale = not pid_alive(int(pid))
            else:
                stale = time.time() - path.stat().st_mtime > UNNAMED_AGE_S
        except OSError:  # removed meanwhile
            continue
        if stale and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def scratch_dir(prefix: str, root: str | None = None) -> str:
    """A new folder ``<root>/<prefix><pid>-<random>``, after :func:`sweep` of the same prefix."""
    sweep(prefix, root)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root)
