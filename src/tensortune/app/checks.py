"""Checks of what a caller passes in, made before anything is imported, measured or written.

Each raises :class:`~tensortune.errors.UsageError` with one line; ``what`` names the argument as
the caller knows it (``--db`` on the command line, ``database`` from Python).
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..database import Database, DatabaseError, TaskRecord, TrialRecord, TrialCheck
from ..errors import UsageError

DB = "database"


def check_db_path(path: str, must_exist: bool, what: str = DB) -> None:
    """Reject an unusable database path before anything is written."""
    try:
        Path(path).resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop (RuntimeError on Python 3.11, OSError later)
        raise UsageError(f"{what} {path}: {e}") from None
    if os.path.isdir(path):
        raise UsageError(f"{what} {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{what} {path}: folder {parent} does not exist")
    if must_exist and not os.path.exists(path):
        raise UsageError(f"{what} {path}: no such database")
    if os.path.exists(path) and not os.access(path, os.R_OK):
        raise UsageError(f"{what} {path}: not readable")
    if not must_exist and not os.access(parent if not os.path.exists(path) else path, os.W_OK):
        raise UsageError(f"{what} {path}: not writable")


def check_output(path: str, force: bool, db: str | None = None, what: str = "output") -> None:
    """UsageError unless ``path`` may be written: never the database or any SQLite file, and an
    existing file only with ``force``."""
    from ..utils.atomic import OutputError, check_output_path

    try:
        check_output_path(path, overwrite=force, protect=[db] if db else [], what=what)
    except OutputError as e:
        raise UsageError(str(e)) from None


def open_db(path: str, readonly: bool = False) -> Database:
    """The database at ``path`` (a DatabaseError as a UsageError)."""
    try:
        return Database(path, readonly=readonly)
    except DatabaseError as e:
        raise UsageError(str(e)) from None


@contextlib.contextmanager
def readonly_db(path: str | None, what: str = DB) -> Iterator[Database | None]:
    """The database at ``path`` opened read-only (None without a path), closed afterwards."""
    if path is None:
        yield None
        return
    check_db_path(path, must_exist=True, what=what)
    db = open_db(path, readonly=True)
    try:
        yield db
    finally:
        db.close()


def tuner_options(tuner: str, items: Sequence[str] | Mapping[str, Any] = (),
                  extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The tuner's options from ``KEY=VALUE`` items or a mapping (and ``extra``: values given by
    option flags, None ones left out), checked now, before anything is imported or measured."""
    from ..tuners import TUNERS
    from ..utils.options import OptionError, parse_assignments

    if tuner not in TUNERS:
        raise UsageError(f"unknown tuner {tuner!r}; known tuners: {', '.join(TUNERS)}")
    try:
        given = dict(items) if isinstance(items, Mapping) else parse_assignments(items)
        values: dict[str, Any] = {**given, **{k: v for k, v in (extra or {}).items() if v is not None}}
        TUNERS.get(tuner).check_options(values)
    except OptionError as e:
        raise UsageError(str(e)) from None
    return values


def check_scheduler(name: str) -> None:
    """UsageError unless ``name`` is a registered task scheduler."""
    from ..scheduler import SCHEDULERS

    if name not in SCHEDULERS:
        raise UsageError(f"unknown scheduler {name!r}; known: {', '.join(SCHEDULERS)}")


def check_energy(energy_j: float | None) -> None:
    """UsageError when an energy limit is asked for on a machine that cannot count energy."""
    if energy_j is None:
        return
    from ..measure.energy import EnergyUnavailable, require

    try:
        require()
    except EnergyUnavailable as e:
        raise UsageError(str(e)) from None


def config_check() -> TrialCheck:
    """A check of an imported trial against its task: the task must be one this version can
    rebuild, and the config index must lie in its space and name the trial's knob values."""
    from ..task import Task

    spaces: dict[str, Any] = {}

    def check(task: TaskRecord, trial: TrialRecord) -> None:
        if task.workload_key not in spaces:
            try:
                t = Task.from_json(json.loads(task.task_json))
                spaces[task.workload_key] = (t.space, t.workload_key)
            except Exception as e:  # noqa: BLE001 - any failure to rebuild is a bad record
                spaces[task.workload_key] = (None, f"task {task.workload_key} cannot be rebuilt here "
                                                   f"({str(e).splitlines()[0][:120] if str(e) else type(e).__name__})")
        space, key = spaces[task.workload_key]
        if space is None:
            raise ValueError(key)
        if key != task.workload_key:
            raise ValueError(f"task {task.workload_key} was stored by another template version (now {key})")
        if not 0 <= trial.config_index < len(space):
            raise ValueError(f"config_index {trial.config_index} outside the task's space (0..{len(space) - 1})")
        knobs = space.get(trial.config_index).to_json()["knobs"]
        if json.loads(json.dumps(trial.config)) != json.loads(json.dumps(knobs)):
            raise ValueError(f"config does not match config_index {trial.config_index} of the task's space")

    return check


def target_of(target: str | dict[str, Any] | None) -> dict[str, Any]:
    """The target dict of a ``target`` argument (:func:`tensortune.target.parse_target`);
    UsageError in one line for one that cannot be built here."""
    from ..target import TargetError, parse_target

    try:
        return parse_target(target)
    except TargetError as e:
        raise UsageError(str(e)) from None


def check_precision(precision: str, target_json: dict[str, Any]) -> str:
    """``precision`` when the target (and this CPU, when the target is its own) can run it; one
    line otherwise (:func:`tensortune.precision.require`)."""
    from ..precision import require
    from ..target import is_host

    return require(precision, target_json, runs_here=is_host(target_json))


def check_runnable(target_json: dict[str, Any], rpc: str | None) -> None:
    """Refuse to time kernels here that this machine cannot run (another triple) without ``rpc``,
    and CUDA kernels in any case (they are built here; no GPU runner times them yet)."""
    from ..target import TRIPLES, is_cuda, runs_here

    if is_cuda(target_json):
        raise UsageError(f"--target cuda:{target_json.get('arch')}: CUDA kernels are built here but timed only on a "
                         "GPU, and this version has no GPU runner")
    if rpc is None and not runs_here(target_json):
        arch = TRIPLES.get(target_json.get("mtriple", ""), target_json.get("mtriple"))
        raise UsageError(f"--target {arch}: this machine cannot run its kernels; time them on its devices "
                         "with --rpc TRACKER:PORT:KEY (compile --target builds for it here)")
