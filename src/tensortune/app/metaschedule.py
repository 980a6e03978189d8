"""Tuning records that TVM's MetaSchedule reads, and MetaSchedule records read back as trials.

Every template schedules with ``tvm.s_tir.Schedule``, so a config is a trace. The export
writes a MetaSchedule ``JSONDatabase`` (``database_workload.json``, ``database_tuning_record.json``):
per task one record, the config ``compile`` would choose (with a model: its confirmed choice, else
the template default where that was measured), its trace over the workload as MetaSchedule
normalises it, its measured costs as ``run_secs``. TVM's own ``MetaScheduleApplyDatabase``
then schedules a plain Relax pipeline with them; with a model, the fused module the records
belong to is written beside them (``model.json``, ``tvm.ir.save_json``), so TVM alone compiles it.

Each exported trace ends with one annotation on the root block that carries the trial it came
from, whole (its uid included), and the description of its task; the import turns such records
back into the same trials, after checking that the record's workload is that task's function and
its config one of the task's space. So a new database can take them: the task is rebuilt from
its description when neither the database nor ``--model`` holds it, and a trial already stored
(its uid) is not added twice. Records exported before they carried all that (a few fields of
the trial, no task) still import into a database or model that knows their task, matched by what
was measured. A record of MetaSchedule's own search has no config of our spaces: it is refused,
never guessed. An import says what it added, found stored, and refused and why
(:class:`~tensortune.database.jsonl.ImportReport`).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database, ImportReport, TaskRecord, TrialRecord
    from ..models.importer import Model
    from ..task import Task

#: The root-block annotation that carries an exported record's trial (JSON text).
TRIAL_KEY = "tensortune_trial"
WORKLOADS, RECORDS, MODULE = "database_workload.json", "database_tuning_record.json", "model.json"

#: Why an imported record is refused (the import report counts them by reason).
FOREIGN = "records of another tuner (no config of ours)"
UNKNOWN_TASK = "tasks neither in the database nor in --model (records exported without their task)"
CANNOT_REBUILD = "tasks this version cannot rebuild"
NOT_ITS_FUNCTION = "workloads that are not their task's function"
NOT_OF_SPACE = "configs not of the task's space"
NO_RUN_TIMES = "records without run times"
BAD_TRIAL = "records whose trial does not read"


@dataclass
class Transfer:
    """What an export did: records written, and what was skipped, by reason."""

    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    module: str | None = None  # the model's fused module, written beside the records
    #: functions whose chosen config transforms a constant input (Winograd), exported as their task's
    #: best verified config that does not (MetaSchedule cannot transform a model's constants)
    substituted: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "skipped": dict(self.skipped), "module": self.module,
                "substituted": self.substituted}

    def describe(self) -> str:
        skipped = "; ".join(f"{n} {why}" for why, n in self.skipped.most_common())
        plain = (f" ({self.substituted} of them the best direct config: tensortune's choice is Winograd, which "
                 "transforms the kernel at compile time)") if self.substituted else ""
        return f"{self.records} records{plain}" + (f"; skipped: {skipped}" if skipped else "")


def _plain_trial(task: Task, database: Database, trial: TrialRecord) -> TrialRecord | None:
    """The task's fastest verified trial, in ``trial``'s context, whose config computes on the task's
    own inputs (None: none measured)."""
    runs = [t for t in database.trials(task.workload_key) if t.context == trial.context and t.ok and t.verified
            and not task.template.input_variant(task, task.space.config_from_json({"knobs": t.config}))]
    return min(runs, key=lambda t: t.cost) if runs else None


def _workload(func: Any) -> Any:
    """The workload module MetaSchedule looks a function up by (its own normalisation)."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(func)


def _trace(task: Task, trial: TrialRecord) -> Any:
    """The trace of the trial's config, ending with the annotation that carries the trial (all but
    its row id) and its task's description (``task``), so an import can rebuild both."""
    config = task.space.config_from_json({"knobs": trial.config})
    sch = task.template.schedule(task, config)
    mark = {**{k: v for k, v in trial.to_json().items() if k != "id"}, "task": task.json_text}
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
        if task.template.input_variant(task, task.space.config_from_json({"knobs": trial.config})):
            # its schedule is of another function (Winograd's), on a kernel transformed at compile time
            trial = _plain_trial(task, database, trial)
            if trial is None:
                out.skipped["tasks whose only measured configs are Winograd's (MetaSchedule cannot transform "
                            "the kernel)"] += len(funcs)
                continue
            out.substituted += len(funcs)
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


def import_records(database: Database, in_dir: str, model: Model | None = None) -> ImportReport:
    """Read the MetaSchedule JSONDatabase in ``in_dir`` and store each record this package
    exported as the trial it carries, once, in one transaction, with its task where ``database``
    lacks it; return what was added, found stored and refused (by reason: a record that names no
    trial of ours, whose task is unknown or cannot be rebuilt, whose workload is not that task's
    function, or whose config is not of its space)."""
    from ..database.jsonl import ImportReport, import_records as store

    records = _read_records(in_dir)
    report = ImportReport(source=in_dir, records=len(records))
    tasks = _Tasks(database, model)
    have: set[tuple[Any, ...]] | None = None  # what records without a uid are matched by (read when one comes)
    trials: list[TrialRecord] = []
    for record in records:
        try:
            trial = _record_trial(record, tasks)
        except _Refused as e:
            report.refused[e.reason] += 1
            continue
        if not trial.uid:
            if have is None:
                have = {_measured(t) for t in database.trials()}
            if _measured(trial) in have:
                report.trials_present += 1
                continue
            have.add(_measured(trial))
        trials.append(trial)
    return store(database, tasks.new_records({t.workload_key for t in trials}), trials, report)


class _Refused(Exception):
    """A record not imported, and why (one of the reasons above)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _read_records(in_dir: str) -> list[Any]:
    """The tuning records of the JSONDatabase in ``in_dir``; UsageError in one line when it is none."""
    import tvm.s_tir.meta_schedule as ms

    for name in (WORKLOADS, RECORDS):
        if not os.path.isfile(os.path.join(in_dir, name)):
            raise UsageError(f"{in_dir}: no {name} (a MetaSchedule JSONDatabase folder)")
    try:
        msdb = ms.database.JSONDatabase(work_dir=in_dir, allow_missing=False)
        return list(msdb.get_all_tuning_records())
    except Exception as e:  # noqa: BLE001 - TVM's parser: a file that is not a JSONDatabase
        raise UsageError(f"{in_dir}: not a readable MetaSchedule database: {str(e).splitlines()[0][:200]}") from None


class _Tasks:
    """The tasks records are of, by workload key: a model's, the database's, else the one a record
    describes; and the records of those the database lacks."""

    def __init__(self, database: Database, model: Model | None) -> None:
        self._db = database
        self._known: dict[str, tuple[Task, list[Any]] | str] = {}  # a task and its functions, or why none
        self._new: dict[str, TaskRecord] = {}
        if model is not None:
            from ..models.compile import model_tasks_of

            from ..database.trials import task_record

            fused, mts = model_tasks_of(model)
            self._known = {mt.task.workload_key: (mt.task, [fused[n] for n in mt.funcs]) for mt in mts}
            self._new = {mt.task.workload_key: task_record(mt.task) for mt in mts
                         if database.get_task(mt.task.workload_key) is None}

    def get(self, key: str, mark: dict[str, Any]) -> tuple[Task, list[Any]]:
        """The task of workload ``key`` and its functions; _Refused when there is none."""
        if key not in self._known:
            try:
                task, stored = self._find(key, mark)
                self._known[key] = (task, [task.prim_func()])
                if not stored:
                    from ..database.trials import task_record

                    self._new[key] = task_record(task)
            except _Refused as e:
                self._known[key] = e.reason
        found = self._known[key]
        if isinstance(found, str):
            raise _Refused(found)
        return found

    def _find(self, key: str, mark: dict[str, Any]) -> tuple[Task, bool]:
        """The task of ``key`` and whether the database holds it; _Refused when there is none."""
        from ..database.trials import stored_task
        from ..task import Task

        rec = self._db.get_task(key)
        if rec is not None:
            task = stored_task(rec)
        elif isinstance(mark.get("task"), str):
            try:
                task = Task.from_json(json.loads(mark["task"]))
                task = task if task.workload_key == key else None  # another template version
            except Exception:  # noqa: BLE001 - a description of another version or of a plug-in op
                task = None
        else:
            raise _Refused(UNKNOWN_TASK)
        if task is None:
            raise _Refused(CANNOT_REBUILD)
        return task, rec is not None

    def new_records(self, keys: set[str]) -> list[TaskRecord]:
        """The records of the tasks of ``keys`` that the database lacks."""
        return [rec for key, rec in self._new.items() if key in keys]


def _record_trial(record: Any, tasks: _Tasks) -> TrialRecord:
    """The trial an exported record carries, checked against its task; _Refused with the reason."""
    mark = _marked_trial(record)
    if mark is None:
        raise _Refused(FOREIGN)
    task, funcs = tasks.get(str(mark.get("workload_key", "")), mark)
    if not _same_workload(record.workload.mod, funcs):
        raise _Refused(NOT_ITS_FUNCTION)
    try:
        config = task.space.config_from_json({"knobs": mark["config"]})
    except Exception:  # noqa: BLE001 - a config of another space version
        raise _Refused(NOT_OF_SPACE) from None
    trial = _whole_trial(mark) if "uid" in mark else _partial_trial(mark, record)
    if trial.config_index != config.index:
        raise _Refused(NOT_OF_SPACE)
    return trial


def _whole_trial(mark: dict[str, Any]) -> TrialRecord:
    """The trial a record carries whole (its costs at full precision, its uid; the task's
    description beside it is ignored as an unknown key)."""
    return _checked_trial({**mark, "id": None})


def _partial_trial(mark: dict[str, Any], record: Any) -> TrialRecord:
    """The trial of a record exported with a few of its fields: costs from its run times, no uid."""
    costs = [float(x) for x in (record.run_secs or [])]
    if not costs:
        raise _Refused(NO_RUN_TIMES)
    names = ("workload_key", "config_index", "config", "tuner", "tvm_version", "target", "threads", "verified",
             "timing", "cpu_model")
    data = {k: mark[k] for k in names if k in mark}
    return _checked_trial({**data, "costs": costs, "error": "none", "extra": {"imported": "metaschedule"}})


def _checked_trial(data: dict[str, Any]) -> TrialRecord:
    """``data`` as a validated trial; _Refused when it does not read as one."""
    from ..database import TrialRecord

    try:
        trial = TrialRecord.from_json(data)
        trial.validate()
    except ValueError:
        raise _Refused(BAD_TRIAL) from None
    return trial


def _measured(t: TrialRecord) -> tuple[Any, ...]:
    """What a record without a uid is matched by: task, config, how and where, costs."""
    return t.workload_key, t.config_index, t.timing, t.target, tuple(t.costs)


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
