"""Dataset shards: a dataset kept as one gzip JSON-lines file per task, in a folder under version
control, so that a dataset measured over many sessions (and machines) survives each of them.

A working dataset is a SQLite database (:mod:`.generate`); a shard folder is its durable copy:

- ``dataset.json`` and ``tasks.json``: the dataset's settings and frozen task list (the
  database's sidecars, see :func:`spec_path` and :func:`tasks_path`);
- ``<hash>.jsonl.gz``: one task's task line and trial lines (the records of
  :func:`tensortune.database.jsonl.export_jsonl`), each trial with the machine it was measured
  on, written again each time the generator finishes the task.

:func:`restore` fills a database from a shard folder (sidecars first, then each shard whose task
the database lacks; every line validated before anything is written), and :func:`save_task`
writes one task's shard after it is measured. The gzip files carry no timestamp, so the same
records give the same bytes.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database

#: The sidecar files a shard folder keeps, by the name of the database's sidecar function.
SUFFIX = ".jsonl.gz"


def spec_path(db_path: str | Path) -> Path:
    """The sidecar that keeps a dataset's settings beside its database."""
    return Path(str(db_path) + ".dataset.json")


def tasks_path(db_path: str | Path) -> Path:
    """The sidecar that keeps a dataset's task list beside its database."""
    return Path(str(db_path) + ".tasks.json")


#: The sidecar files a shard folder keeps, by the function that names each beside a database.
SIDECAR_PATHS = {"dataset.json": spec_path, "tasks.json": tasks_path}


def shard_path(folder: str | Path, workload_key: str) -> Path:
    """The shard file of one task."""
    return Path(folder) / (hashlib.sha1(workload_key.encode()).hexdigest()[:16] + SUFFIX)


def save_task(db: Database, folder: str | Path, workload_key: str) -> Path | None:
    """Write the task's records in ``db`` to its shard (atomically); None when it has none."""
    from ..database.jsonl import export_jsonl
    from ..utils.atomic import atomic_write

    if not db.trials(workload_key):
        return None
    text = io.StringIO()
    export_jsonl(db, text, workload_key)
    path = shard_path(folder, workload_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, gzip.compress(text.getvalue().encode(), mtime=0))
    return path


def save_sidecars(db_path: str | Path, folder: str | Path) -> None:
    """Copy the database's settings and task list into the shard folder (where missing, or
    changed: a task list grown by :func:`~tensortune.app.dataset.top_up`)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, path_of in SIDECAR_PATHS.items():
        src, dst = path_of(db_path), Path(folder) / name
        if src.exists() and (not dst.exists() or dst.read_bytes() != src.read_bytes()):
            shutil.copyfile(src, dst)


def read_shard(path: str | Path) -> Any:
    """One shard's records, every line validated (:func:`tensortune.database.jsonl.parse_jsonl`:
    ``ParsedRecords``); raises :class:`~tensortune.database.DatabaseError` naming the shard (and
    the line) of a bad file or record."""
    from ..database import DatabaseError
    from ..database.jsonl import parse_jsonl

    try:
        text = gzip.decompress(Path(path).read_bytes()).decode()
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:  # zlib.error: a corrupt deflate stream
        raise DatabaseError(f"{path}: not a gzip JSON-lines shard ({exc})") from None
    stream = io.StringIO(text)
    stream.name = str(path)  # named in the error of a bad line
    return parse_jsonl(stream)


def restore(db_path: str | Path, db: Database, folder: str | Path) -> tuple[int, int]:
    """Bring the shard folder's dataset into the database at ``db_path`` (open as ``db``): the
    settings and task list where the database has none, then every shard whose task the
    database does not hold yet. Returns (shards imported, trials added); raises
    :class:`~tensortune.database.DatabaseError` naming the shard and line of a bad record."""
    from ..database.jsonl import import_jsonl

    folder = Path(folder)
    if not folder.is_dir():
        return 0, 0
    for name, path_of in SIDECAR_PATHS.items():
        src, dst = folder / name, path_of(db_path)
        if src.exists() and not dst.exists():
            shutil.copyfile(src, dst)
    held = {shard_path(folder, t.workload_key).name for t in db.tasks()}  # a shard is named by its task
    shards, trials = 0, 0
    for path in sorted(folder.glob("*" + SUFFIX)):
        if path.name in held:  # not decompressed again on every resume
            continue
        trials += import_jsonl(db, read_shard(path)).trials_added
        shards += 1
    return shards, trials


__all__ = ["SIDECAR_PATHS", "read_shard", "restore", "save_sidecars", "save_task", "shard_path", "spec_path",
           "tasks_path"]
