"""Trials between the measurer, the tuners and the database: store a measured candidate in its measure
context, load a task's history back as results, pick the context to compare in."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .records import MeasureContext, TaskRecord, TrialRecord
from .sqlite import Database
from ..measure import ErrorKind, MeasureInput, MeasureOptions, MeasureResult
from ..space import Config
from ..target import cpu_model, target_key

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


#: The CPU model recorded for trials timed on an RPC device: ``rpc:KEY``.
RPC_PREFIX = "rpc:"


def stored_task(rec: TaskRecord) -> Task | None:
    """The task a stored task record describes, rebuilt (None: this version cannot rebuild it)."""
    import json

    from ..task import Task

    try:
        return Task.from_json(json.loads(rec.task_json))
    except Exception:  # noqa: BLE001 - a record of another version or of a plug-in op
        return None


def task_name(rec: TaskRecord) -> str:
    """A stored task's name for people (``op[key]`` when it cannot be rebuilt)."""
    task = stored_task(rec)
    return task.name if task is not None else f"{rec.op}[{rec.workload_key[:8]}]"


def tvm_version() -> str:
    """The TVM version string recorded with every trial."""
    import tvm

    return str(tvm.__version__)


def task_record(task: Task) -> TaskRecord:
    """The record that stores ``task`` (created now)."""
    return TaskRecord(workload_key=task.workload_key, op=task.op, kernel_class=task.kernel_class,
                      target=target_key(task.target_json), flops=float(task.flops), task_json=task.json_text,
                      created=time.time())


def ensure_task(db: Database, task: Task) -> None:
    """Store the task's record once."""
    if db.get_task(task.workload_key) is None:
        db.add_task(task_record(task))


def measure_context(task: Task, options: MeasureOptions) -> MeasureContext:
    """The context in which ``options`` measure ``task`` on this machine, or on the RPC device
    ``options.rpc`` names (its CPU recorded as ``rpc:KEY``; see ``MeasureContext``)."""
    where = f"{RPC_PREFIX}{options.rpc.rsplit(':', 1)[-1]}" if getattr(options, "rpc", None) else cpu_model()
    return MeasureContext(target_key(task.target_json), int(options.threads), options.timing_key(), where)


def record_trial(db: Database, tuner: Any, inp: MeasureInput, res: MeasureResult, context: MeasureContext,
                 extra: dict[str, Any] | None = None) -> int:
    """Commit one measured candidate (its task must be stored: :func:`ensure_task`) with the
    context it was measured in (the thread count is the one the runner reports) and ``extra``
    (e.g. a confirmation mark); return its row id. The CPU-seconds of building and running it
    go into ``extra["cpu_s"]`` (``{"build", "run"}``, each present when it could be read), the
    contention verdict of its timing into ``extra["noise"]`` (:mod:`tensortune.measure.noise`)."""
    extra = dict(extra or {})
    cpu = {k: round(v, 6) for k, v in (("build", res.build_cpu), ("run", res.run_cpu)) if v is not None}
    if cpu:
        extra["cpu_s"] = cpu
    if "noise" in res.extra:  # the contention verdict of its timing (measure.noise)
        extra["noise"] = res.extra["noise"]
    return db.add_trial(TrialRecord(
        workload_key=inp.task.workload_key, config_index=inp.config.index, config=inp.config.to_json()["knobs"],
        costs=list(res.costs), error=res.error.value, error_msg=res.error_msg, build_time=res.build_time,
        run_time=res.run_time, timestamp=res.timestamp or time.time(), tuner=tuner.name, seed=tuner.seed,
        tvm_version=tvm_version(), target=context.target, threads=res.threads,
        verified=bool(res.extra.get("verified", False)), energy_j=res.energy_j,
        timing=context.timing, cpu_model=context.cpu_model, extra=extra,
    ))


def result_of(trial: TrialRecord) -> MeasureResult:
    """A MeasureResult rebuilt from a stored trial; ``extra["stored"]`` says where it came from
    and ``extra["verified"]`` whether its output was checked."""
    stored = {"trial_id": trial.id, "tuner": trial.tuner, "timestamp": trial.timestamp}
    return MeasureResult(list(trial.costs), ErrorKind(trial.error), trial.error_msg, trial.build_time,
                         trial.run_time, trial.timestamp, trial.threads,
                         extra={"verified": trial.verified, "stored": stored})


def history_from_db(db: Database, tuner: Any, context: MeasureContext, seen: set[int] | None = None
                    ) -> tuple[list[Config], list[MeasureResult], int]:
    """Search trials stored for the tuner's task in ``context``: their configs and results, and how
    many of them this tuner made (they count against its ``n_trial``).

    Trials of other contexts (another machine, thread count or timing mode) are left out: their
    costs do not compare with this run's, and their configs may be measured again. Confirmation
    re-measurements are left out too (they are no new configs and no part of the budget). With
    ``seen`` (trial ids the tuner already has), only the other trials are returned, and their ids
    are added to it; the count still covers all of them."""
    ensure_task(db, tuner.task)
    configs, results, mine = [], [], 0
    for t in db.trials(tuner.task.workload_key):
        if t.context != context or t.confirmation is not None:
            continue
        try:
            c = tuner.space.get(t.config_index)
        except IndexError:
            continue
        mine += t.tuner == tuner.name
        if seen is not None:
            if t.id in seen:
                continue
            if t.id is not None:
                seen.add(t.id)
        configs.append(c)
        results.append(result_of(t))
    return configs, results, mine


def pick_context(db: Database, task: Task, preferred: MeasureContext) -> tuple[MeasureContext | None, str]:
    """The context whose best trial should stand for ``task`` on this machine, and why, in words.

    In order: ``preferred`` itself; else, on this machine (same target and CPU model), the
    context with the most verified trials (never an in-model one: those only rank a model's
    candidates, see :mod:`tensortune.models.in_model`); else trials whose CPU model was not recorded but whose
    target matches (schema-1 records); else trials timed on an RPC device (``rpc:KEY``) for this
    target, as ``tune --rpc`` leaves them. Trials of other machines (another target, or another
    CPU model not reached over RPC) are never used: their costs say nothing about this one. Returns (None, reason) when no context qualifies.
    """
    contexts = [(ctx, n) for ctx, n in db.contexts(task.workload_key) if not ctx.in_model]
    if not contexts:
        return None, ""
    if any(ctx == preferred for ctx, _ in contexts):
        return preferred, ""
    here = [ctx for ctx, _ in contexts if ctx.target == preferred.target and ctx.cpu_model == preferred.cpu_model]
    if here:
        return here[0], f"measured {here[0].describe()}, not {describe_timing_of(preferred)}"
    legacy = [ctx for ctx, _ in contexts if ctx.target == preferred.target and not ctx.cpu_model]
    if legacy:
        return legacy[0], "CPU model and timing of the records not recorded"
    remote = [ctx for ctx, _ in contexts if ctx.target == preferred.target and ctx.cpu_model.startswith(RPC_PREFIX)]
    if remote:  # `tune --rpc` built them for this target: the device they were timed on is the deployment
        return remote[0], f"measured on RPC device {remote[0].cpu_model[len(RPC_PREFIX):]!r} for this target"
    return None, f"{sum(n for _, n in contexts)} verified trials, none measured on this machine ({preferred.cpu_model})"


def describe_timing_of(context: MeasureContext) -> str:
    """The timing and threads of ``context`` in words."""
    from .records import describe_timing

    return f"{describe_timing(context.timing)}, {context.threads} threads"
