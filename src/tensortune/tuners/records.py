"""Glue between tuners and the database: store trials, load a task's history."""
from __future__ import annotations

import time
from typing import Any

from ..database import Database, TaskRecord, TrialRecord
from ..measure import ErrorKind, MeasureInput, MeasureResult
from ..space import Config
from ..target import target_key


def tvm_version() -> str:
    """The TVM version string recorded with every trial."""
    import tvm

    return str(tvm.__version__)


def ensure_task(db: Database, task: Any) -> None:
    """Store the task's record once."""
    if db.get_task(task.workload_key) is None:
        db.add_task(TaskRecord(
            workload_key=task.workload_key, op=task.op, kernel_class=task.kernel_class,
            target=target_key(task.target_json), flops=float(task.flops),
            task_json=task.json_text, created=time.time(),
        ))


def record_trial(db: Database, tuner: Any, inp: MeasureInput, res: MeasureResult) -> None:
    """Commit one measured candidate (its task must be stored: :func:`ensure_task`)."""
    db.add_trial(TrialRecord(
        workload_key=inp.task.workload_key, config_index=inp.config.index, config=inp.config.to_json()["knobs"],
        costs=list(res.costs), error=res.error.value, error_msg=res.error_msg, build_time=res.build_time,
        run_time=res.run_time, timestamp=res.timestamp or time.time(), tuner=tuner.name, seed=tuner.seed,
        tvm_version=tvm_version(), target=target_key(inp.task.target_json), threads=res.threads,
        verified=bool(res.extra.get("verified", False)), energy_j=res.energy_j,
    ))


def result_of(trial: TrialRecord) -> MeasureResult:
    """A MeasureResult rebuilt from a stored trial."""
    return MeasureResult(list(trial.costs), ErrorKind(trial.error), trial.error_msg, trial.build_time,
                         trial.run_time, trial.timestamp, trial.threads,
                         extra={"verified": trial.verified})


def history_from_db(db: Database, tuner: Any) -> tuple[list[Config], list[MeasureResult], int]:
    """Configs and results stored for the tuner's task, and how many of them this tuner made."""
    ensure_task(db, tuner.task)
    configs, results, mine = [], [], 0
    for t in db.trials(tuner.task.workload_key):
        try:
            c = tuner.space.get(t.config_index)
        except IndexError:
            continue
        configs.append(c)
        results.append(result_of(t))
        mine += t.tuner == tuner.name
    return configs, results, mine
