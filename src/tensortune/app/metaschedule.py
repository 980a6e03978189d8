"""Tuning records that TVM's MetaSchedule reads, and MetaSchedule records read back as trials.

Every template schedules with ``tvm.s_tir.Schedule``, so a config is a trace. The export
writes a MetaSchedule ``JSONDatabase`` (``database_workload.json``, ``database_tuning_record.json``):
per task one record, the config ``compile`` would choose (with a model: its confirmed choice, else
the template default where that was measured), its trace over the workload as MetaSchedule
normalises it, its measured costs as ``run_secs``. TVM's own ``MetaScheduleApplyDatabase``
then schedules a plain Relax pipeline with them; with a model, the fused module the records
belong to is written beside them (``model.json``, ``tvm.ir.save_json``), so TVM alone compiles it.

Each exported trace ends with one annotation on the root block that names the trial it came
from (task, config, how and where it was measured); the import turns such records back into
trials of a task it knows, after checking that the record's workload is that task's function and
its config one of the task's space. A record of MetaSchedule's own search has no config of our
spaces: it is counted as skipped, never guessed.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database, TrialRecord
    from ..models.importer import Model
    from ..task import Task

#: The root-block annotation that carries an exported record's trial (JSON text).
TRIAL_KEY = "tensortune_trial"
WORKLOADS, RECORDS, MODULE = "database_workload.json", "database_tuning_record.json", "model.json"


@dataclass
class Transfer:
    """What an export or an import did: records written or read, and what was skipped, by reason."""

    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    module: str | None = None  # the model's fused module, written beside the records

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "skipped": dict(self.skipped), "module": self.module}

    def describe(self) -> str:
        skipped = "; ".join(f"{n} {why}" for why, n in self.skipped.most_common())
        return f"{self.records} records" + (f"; skipped: {skipped}" if skipped else "")


def _workload(func: Any) -> Any:
    """The workload module MetaSchedule looks a function up by (its own normalisation)."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(func)


def _trace(task: Task, trial: TrialRecord) -> Any:
    """The trace of the trial's config, ending with the annotation that names the trial."""
    config = task.space.config_from_json({"knobs": trial.config})
    sch = task.template.schedule(task, config)
    mark = {"workload_key": trial.workload_key, "config_index": trial.config_index, "config": trial.config,
            "target": trial.target, "threads": trial.threads, "timing": trial.timing,
            "cpu_model": trial.cpu_model, "tuner": trial.tuner, "tvm_version": trial.tvm_version,
            "verified": trial.verified}
    sch.annotate(sch.get_sblock("root"), TRIAL_KEY, json.dumps(mark, sort_keys=True))
    return sch.trace


def _pairs(database: Database, model: Model | None) -> tuple[list[tuple[Task, list[Any], str]], Any]:
    """(task, its functions, the model name its confirmed choice is looked up under) to export,
    and the model's fused module (None without a model)."""
    from ..database.trials import stored_task
    from ..models.compile import model_tasks_of

    if model is not None:
        fused, mts = model_tasks_of(model)
        return [(mt.task, [fused[name] for name in mt.funcs], model.name) for mt in mts if mt.tunable], fused
    tasks = [stored_task(rec) for rec in database.tasks()]  # one this version cannot rebuild: nothing to schedule
    return [(task, [task.prim_func()], "") for task in tasks if task is not None], None


def export_records(database: Database, out_dir: str, model: Model | None = None) -> Transfer:
    """Write ``database``'s records as a MetaSchedule JSONDatabase into ``out_dir`` (with
    ``model``: its tasks, and its fused module as ``model.json``)."""
    import tvm
    import tvm.s_tir.meta_schedule as ms

    from ..models.compile import chosen_trial
    from ..target import host_target_json, make_target

    for name in (WORKLOADS, RECORDS):
        if os.path.exists(os.path.join(out_dir, name)):
            raise UsageError(f"{out_dir} already holds {name}: export into an empty folder")
    os.makedirs(out_dir, exist_ok=True)
    target = make_target(dict(host_target_json()))
    pairs, fused = _pairs(database, model)
    out = Transfer()
    msdb = ms.database.JSONDatabase(work_dir=out_dir)
    for task, funcs, model_name in pairs:
        trial, why = chosen_trial(task, database, model_name)
        if trial is None:
            out.skipped[why] += len(funcs)
            continue
        try:
            trace = _trace(task, trial)
        except Exception:  # noqa: BLE001 - a config this version's template refuses
            out.skipped["configs the template no longer schedules"] += len(funcs)
            continue
        for func in funcs:
            workload = msdb.commit_workload(_workload(func))
            msdb.commit_tuning_record(ms.database.TuningRecord(
                trace, workload, [float(c) for c in trial.costs], target, ms.arg_info.ArgInfo.from_prim_func(func)))
            out.records += 1
    if fused is not None:
        out.module = os.path.join(out_dir, MODULE)
        with open(out.module, "w") as f:
            f.write(tvm.ir.save_json(fused))
    return out


def _marked_trial(record: Any) -> dict[str, Any] | None:
    """The trial an exported record's trace names (None: a record of another tuner)."""
    for inst in reversed(list(record.trace.insts)):
        if inst.kind.name == "Annotate" and len(inst.attrs) and str(inst.attrs[0]) == TRIAL_KEY:
            try:
                mark = json.loads(str(inst.inputs[1]))
            except (ValueError, IndexError):
                return None
            return mark if isinstance(mark, dict) else None
    return None


def import_records(database: Database, in_dir: str, model: Model | None = None) -> Transfer:
    """Read the MetaSchedule JSONDatabase in ``in_dir`` and store each record this package
    exported as a trial of its task (a task of ``database``, or of ``model``), once; a record
    whose workload is not that task's function, whose config is not of its space, or that
    names no trial of ours, is counted as skipped."""
    import tvm.s_tir.meta_schedule as ms

    from ..database import TrialRecord
    from ..database.trials import ensure_task, stored_task

    for name in (WORKLOADS, RECORDS):
        if not os.path.isfile(os.path.join(in_dir, name)):
            raise UsageError(f"{in_dir}: no {name} (a MetaSchedule JSONDatabase folder)")
    try:
        msdb = ms.database.JSONDatabase(work_dir=in_dir, allow_missing=False)
        records = list(msdb.get_all_tuning_records())
    except Exception as e:  # noqa: BLE001 - TVM's parser: a file that is not a JSONDatabase
        raise UsageError(f"{in_dir}: not a readable MetaSchedule database: {str(e).splitlines()[0][:200]}") from None
    known: dict[str, tuple[Task, list[Any]]] = {}
    if model is not None:
        from ..models.compile import model_tasks_of

        fused, mts = model_tasks_of(model)
        known = {mt.task.workload_key: (mt.task, [fused[n] for n in mt.funcs]) for mt in mts}
    out = Transfer()
    have = {(t.workload_key, t.config_index, t.timing, t.target, tuple(t.costs)) for t in database.trials()}
    for record in records:
        mark = _marked_trial(record)
        if mark is None:
            out.skipped["records of another tuner (no config of ours)"] += 1
            continue
        key = str(mark.get("workload_key", ""))
        if key not in known:
            rec = database.get_task(key)
            if rec is None:
                out.skipped["tasks neither in the database nor in --model"] += 1
                continue
            task = stored_task(rec)
            if task is None:
                out.skipped["tasks this version cannot rebuild"] += 1
                continue
            known[key] = (task, [task.prim_func()])
        task, funcs = known[key]
        if not _same_workload(record.workload.mod, funcs):
            out.skipped["workloads that are not their task's function"] += 1
            continue
        try:
            config = task.space.config_from_json({"knobs": mark["config"]})
        except Exception:  # noqa: BLE001 - a config of another space version
            out.skipped["configs not of the task's space"] += 1
            continue
        costs = [float(x) for x in (record.run_secs or [])]
        sig = (key, config.index, str(mark.get("timing", "")), str(mark.get("target", "")), tuple(costs))
        if not costs or sig in have:
            out.skipped["records already stored" if costs else "records without run times"] += 1
            continue
        ensure_task(database, task)
        database.add_trial(TrialRecord(
            workload_key=key, config_index=config.index, config=config.to_json()["knobs"], costs=costs, error="none",
            tuner=str(mark.get("tuner", "")), tvm_version=str(mark.get("tvm_version", "")),
            target=str(mark.get("target", "")), threads=int(mark.get("threads", 0)),
            verified=bool(mark.get("verified", False)), timing=str(mark.get("timing", "")),
            cpu_model=str(mark.get("cpu_model", "")), extra={"imported": "metaschedule"}))
        have.add(sig)
        out.records += 1
    return out


def _same_workload(mod: Any, funcs: list[Any]) -> bool:
    """Whether ``mod`` is the workload of one of ``funcs`` (structurally equal)."""
    import tvm

    for f in funcs:
        try:
            tvm.ir.assert_structural_equal(mod, _workload(f))
            return True
        except ValueError:
            continue
    return False
