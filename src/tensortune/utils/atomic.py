"""Writing output files without ever losing data: atomic replacement and target checks.

Every file tensortune writes for a user (exports, compiled libraries, benchmark results) goes
through :func:`atomic_write` or :func:`atomic_path`: the content lands in a temporary file in
the same folder and is renamed over the target only once complete, so a crash leaves either
the old file or the new one, never a partial file. :func:`check_output_path` refuses targets
whose loss would cost a user data: a tuning database, any SQLite file, and (unless
``overwrite``) any existing file.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import TensortuneError

_SQLITE_HEADER = b"SQLite format 3\x00"


class OutputError(TensortuneError):
    """An output target that must not be written (printed as one line by the CLI)."""


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is an existing file that starts with the SQLite header."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # opening a FIFO would block
            return False
        with open(path, "rb") as f:
            return f.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def check_output_path(path: str | os.PathLike[str], overwrite: bool = False,
                      protect: Iterable[str | os.PathLike[str]] = (), what: str = "output") -> Path:
    """Return ``path`` as a Path if it may be written, else raise :class:`OutputError`.

    Refused: a folder; a missing parent folder; any path in ``protect`` (compared after
    resolving links, and including their ``-wal``/``-shm``/``-journal`` files); any existing
    SQLite file (whatever ``overwrite`` says: a database is never an output); any other
    existing file unless ``overwrite``; anything that is not a regular file, whatever ``overwrite``
    says (a device, a FIFO, a socket: the output is written beside it and renamed over it, which
    would put a regular file in its place; a symbolic link: the link would be replaced, not its
    target).
    """
    p = Path(path)
    try:
        resolved = p.resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop: RuntimeError before Python 3.13
        raise OutputError(f"{what} {p}: cannot resolve the path ({e})") from None
    for q in protect:
        base = Path(q).resolve()
        if resolved == base or resolved in {Path(f"{base}{s}") for s in ("-wal", "-shm", "-journal")}:
            raise OutputError(f"{what} {p} is the database itself; refusing to overwrite it")
    if p.is_dir():
        raise OutputError(f"{what} {p} is a folder")
    if p.is_symlink():
        raise OutputError(f"{what} {p} is a symbolic link; give the path of the file itself")
    if p.exists() and not stat.S_ISREG(p.stat().st_mode):
        raise OutputError(f"{what} {p} is not a regular file (a device, FIFO or socket); refusing to replace it")
    if not resolved.parent.is_dir():
        raise OutputError(f"{what} {p}: folder {resolved.parent} does not exist")
    if p.exists():
        if is_sqlite_file(p):
            raise OutputError(f"{what} {p} is an SQLite file (a database?); refusing to overwrite it")
        if not overwrite:
            raise OutputError(f"{what} {p} exists; pass --force to overwrite it")
    return p


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``, on error remove it.

    ``suffix`` keeps an extension a writer insists on (e.g. ``.so`` for TVM's ``export_library``).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{suffix}", dir=target.resolve().parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if target.exists():  # keep the permissions of the file being replaced
            os.chmod(tmp_path, target.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` atomically (text as UTF-8) and return the path."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
    return Path(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
