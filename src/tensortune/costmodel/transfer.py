"""Transfer learning (AutoTVM Sec. 5): a global model from other tasks' records in the database.

The global model is XGBoost on the context-relation ("curve") features, whose length and
meaning do not depend on the loop nest, so it can learn from conv2d layers of other shapes
(or other ops) and score this task's candidates. Only records for the same target key are
used; records of a template version other than the current one are skipped (their config
indices mean other configs now).
"""
from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from ..target import target_key
from .base import TaskData
from .xgb import XGBoostCostModel

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..task import Task

#: Fewer successful records than this (over all other tasks) is too little history.
MIN_TRANSFER_RECORDS = 64
#: Records used per source task (the best ones and a spread of the rest are kept by order).
MAX_RECORDS_PER_TASK = 512
#: The invariant representation the global model learns on.
TRANSFER_FEATURE = "curve"
#: Rows the process-wide transfer extractor keeps (history rows and the candidates the global
#: models scored; ~2 KB each).
TRANSFER_CACHE = 100_000

@functools.cache
def transfer_extractor() -> Any:
    """The process-wide extractor of the global models' features, in worker processes (one per
    core), with one cache for every tuner of the process. A model's tasks are tuned one after
    another, each fitting a global model on the others' records: with one cache a source task's
    records are extracted once per run, not once per later task (on resnet18 the refits took
    15 s before the 2nd task and 93 s before the 15th, a quarter of a 60-minute budget)."""
    from ..features.parallel import ParallelExtractor

    return ParallelExtractor(TRANSFER_FEATURE, cache_size=TRANSFER_CACHE)


def history_for_transfer(database: Database, task: Task, max_per_task: int = MAX_RECORDS_PER_TASK
                         ) -> tuple[list[TaskData], int, int]:
    """Other tasks' records for ``task``'s target: (data per task, ok records, records for other targets)."""
    from ..task import Task

    target = target_key(task.target_json)
    data: list[TaskData] = []
    n_ok = n_foreign = 0
    for rec in database.tasks():
        if rec.workload_key == task.workload_key:
            continue
        if rec.target != target:
            n_foreign += database.count(rec.workload_key)
            continue
        try:
            src = Task.from_json(json.loads(rec.task_json))
        except Exception:  # noqa: BLE001 - a task this version cannot rebuild: skip its records
            continue
        if src.workload_key != rec.workload_key:  # stored under an older template version
            continue
        d = TaskData(src)
        for t in database.trials(rec.workload_key)[:max_per_task]:
            try:
                c = src.space.get(t.config_index)
            except IndexError:
                continue
            d.configs.append(c)
            d.costs.append(t.cost)
            n_ok += t.ok
        if len(d):
            data.append(d)
    return data, n_ok, n_foreign


def fit_global_model(database: Database, task: Task, objective: str = "rank", seed: int = 0,
                     min_records: int = MIN_TRANSFER_RECORDS) -> tuple[XGBoostCostModel | None, str]:
    """The fitted global model and a one-line notice; ``None`` when history is too little."""
    data, n_ok, n_foreign = history_for_transfer(database, task)
    if n_ok < min_records:
        why = f"{n_ok} successful records of other tasks for this target, need {min_records}"
        if n_foreign:
            why += f"; {n_foreign} for other targets are not used"
        return None, f"no transfer ({why})"
    model = XGBoostCostModel(transfer_extractor(), objective=objective, seed=seed)
    model.fit(data)
    if not model.fitted:
        return None, "no transfer: the global model could not be fitted"
    return model, f"transfer from {len(data)} tasks ({n_ok} records)"
