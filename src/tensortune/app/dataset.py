"""The tuning-dataset generator: sampled tasks, each tuned along a trajectory, every trial stored.

One-Shot Tuner's dataset (Ryu et al., CC 2022, §4): tasks from a task sampler
(:mod:`.tasks`: ``pgs``, ``random``, ``modelzoo``), and for each task the configs a code sampler
measures:

- ``ebs`` (exploration-based sampling): tensortune's ``autotvm`` run without transfer learning
  and without the template default, keeping every config it measures along its trajectory;
- ``random``: uniform random configs (the ablation baseline).

Everything goes into one tensortune database (SQLite), each trial with the machine it was
measured on (CPU model, target, threads, timing), committed as it completes: the generator runs
unattended for hours and resumes where it stopped (a task's stored samples count against its
budget). A task already measured on another machine is left to that machine, so each task's
samples come from one machine. The dataset's settings are kept beside the database
(``DB.dataset.json``), and so is its task list (``DB.tasks.json``): resuming with other settings
is refused, and new layer statistics do not change a dataset already begun.

:func:`export` turns a database into a features-and-labels file for training (``.npz`` of
numbers, read back with ``allow_pickle=False``, and a JSON sidecar naming its tasks and
machines): per sample the candidate's context-relation ("curve") features, its raw knob values,
the task's features, and the label, the task's normalised throughput on its machine
(``best cost / cost``). Samples slower than ``max_slowdown`` (20) times the task's best on that
machine are dropped, as are failed and unverified ones.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..budget import Budget
from ..dataset.layers import OP_ARGS, ZOO_LAYERS, load
from ..dataset.shards import spec_path, tasks_path
from ..dataset.tasks import TASK_SAMPLERS, sample_tasks

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..measure import MeasurerBase
    from ..task import Task

#: Code samplers: name -> the tensortune tuner that walks the trajectory, and its options.
CODE_SAMPLERS: dict[str, tuple[str, dict[str, Any]]] = {"ebs": ("autotvm", {"transfer": False}),
                                                         "random": ("random", {})}
#: Samples slower than this many times the task's best are dropped on export (the paper's 20x).
MAX_SLOWDOWN = 20.0


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset holds: ``n_tasks`` tasks of ``op`` from ``task_sampler``, each with up to
    ``samples`` configs from ``code_sampler``; ``seed`` fixes the tasks and the trajectories.
    With ``blocked`` each task is measured in the form a compiled model runs it (see
    :func:`model_form`: ``conv2d_nchwc``, ``depthwise_conv2d_nchwc``, ``dense_pack``), so a
    predictor learns the templates that model tuning meets. ``repeat`` timed repeats of at least
    ``min_repeat_ms`` each measure a sample (the labels only rank configs within a task, so a
    dataset may time more lightly than tuning does)."""

    op: str = "conv2d"
    n_tasks: int = 150
    samples: int = 200
    task_sampler: str = "pgs"
    code_sampler: str = "ebs"
    seed: int = 0
    blocked: bool = True
    repeat: int = 5
    min_repeat_ms: int = 40

    def __post_init__(self) -> None:
        if self.op not in OP_ARGS:
            raise ValueError(f"unknown op class {self.op!r}; known: {', '.join(OP_ARGS)}")
        if self.task_sampler not in TASK_SAMPLERS:
            raise ValueError(f"unknown task sampler {self.task_sampler!r}; known: {', '.join(TASK_SAMPLERS)}")
        if self.code_sampler not in CODE_SAMPLERS:
            raise ValueError(f"unknown code sampler {self.code_sampler!r}; known: {', '.join(CODE_SAMPLERS)}")
        if self.n_tasks < 1 or self.samples < 1 or self.repeat < 1 or self.min_repeat_ms < 0:
            raise ValueError("n_tasks, samples and repeat must be at least 1, min_repeat_ms at least 0")

    def measure_options(self) -> Any:
        """The measurement settings of the dataset's samples."""
        from ..measure import MeasureOptions

        return MeasureOptions(repeat=self.repeat, min_repeat_ms=self.min_repeat_ms)


@dataclass
class TaskProgress:
    """One task's state after a generator run."""

    name: str
    workload_key: str
    stored: int  # samples of this dataset's code sampler stored for the task on this machine
    measured: int  # measured by this run
    note: str = ""


#: Settings added after datasets were first made, with the values those datasets were made with.
_LEGACY_SETTINGS = {"blocked": False, "repeat": 5, "min_repeat_ms": 40}


def read_spec(db_path: str | Path) -> DatasetSpec | None:
    """The settings kept beside a dataset database (None when it has none); ValueError when
    the sidecar cannot be read."""
    p = spec_path(db_path)
    if not p.exists():
        return None
    try:
        return DatasetSpec(**{**_LEGACY_SETTINGS, **json.loads(p.read_text())})
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{p}: not dataset settings ({exc})") from None


def check_spec(spec: DatasetSpec, db_path: str | Path) -> None:
    """Write the settings beside a new database; refuse (ValueError) to continue one made with others."""
    from ..utils.atomic import atomic_write

    old = read_spec(db_path)
    if old is None:
        atomic_write(spec_path(db_path), json.dumps(asdict(spec), indent=1))
    elif old != spec:
        diff = ", ".join(f"{k} {getattr(old, k)!r} (asked: {v!r})" for k, v in asdict(spec).items()
                         if getattr(old, k) != v)
        raise ValueError(f"{db_path} holds a dataset made with {diff}; use another --db or the same settings")


def model_form(op: str, args: dict[str, int], target: dict[str, Any] | None = None) -> tuple[str, dict[str, int]]:
    """The op a compiled model runs a standalone ``op`` as on ``target`` (default: this host):
    convolutions blocked by the layout plan's rules, a dense layer on its packed weight
    (``dense_pack``), channels padded to the block where a model pads them; ``(op, args)``
    unchanged where none of this applies."""
    from ..models.chanpad import padded_count
    from ..models.layout import blocked_workload, candidate_blocks
    from ..models.prepack import weight_block
    from ..target import host_target_json

    target = target or host_target_json()
    if op == "dense":
        nb = weight_block(args["N"], target)
        return ("dense_pack", {**args, "NB": nb}) if nb else (op, dict(args))
    form = blocked_workload(op, args, target)
    if form[0] != op:
        return form
    for b in candidate_blocks(target):  # channels a model would pad to a block first
        names = ("IC", "OC") if op == "conv2d" else ("C",)
        padded = {**args, **{n: padded_count(args[n], b) for n in names if n in args}}
        if padded != args and (form := blocked_workload(op, padded, target))[0] != op:
            return form
    return op, dict(args)


def dataset_tasks(spec: DatasetSpec, layers: str | Path | None = None, target: dict[str, Any] | None = None) -> list[Any]:
    """The tensortune tasks of ``spec`` (the same ones for the same settings and statistics)."""
    from ..task import Task

    prior, _ = load(layers or ZOO_LAYERS)
    out = []
    for t in sample_tasks(spec.task_sampler, prior, spec.op, spec.n_tasks, spec.seed):
        op, args = model_form(t.op, t.shape, target) if spec.blocked else (t.op, t.shape)
        out.append(Task.from_op(op, args, target=target))
    return out


def frozen_tasks(spec: DatasetSpec, db_path: str | Path, target: dict[str, Any] | None = None) -> list[Any]:
    """The tasks of the dataset in ``db_path``: the list kept beside it since it was made (so new
    layer statistics never change a dataset half measured), else :func:`dataset_tasks` now,
    written there (:func:`top_up` grows a kept list)."""
    from ..task import Task

    p = tasks_path(db_path)
    if not p.exists():
        tasks = dataset_tasks(spec, target=target)
        _write_tasks(p, tasks)
        return tasks
    try:
        items = json.loads(p.read_text())
        tasks = [Task.from_op(t["op"], t["args"], target=target) for t in items]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{p}: not a dataset task list ({exc}); remove it to sample the tasks again") from None
    return tasks


def top_up(spec: DatasetSpec, db_path: str | Path, tasks: list[Any], target: dict[str, Any] | None = None) -> list[Any]:
    """``tasks`` (a dataset's kept list) topped up to ``spec.n_tasks`` where its sampler ran out of
    distinct tasks under the statistics of its day: the tasks :func:`dataset_tasks` draws now that
    it lacks are appended, in their order, and the list beside ``db_path`` rewritten. Kept tasks
    are never dropped or reordered, so every stored sample stays in the dataset."""
    if len(tasks) >= spec.n_tasks:
        return tasks
    kept = {t.workload_key for t in tasks}
    new = [t for t in dataset_tasks(spec, target=target) if t.workload_key not in kept]
    if not new:
        return tasks
    tasks = tasks + new[:spec.n_tasks - len(tasks)]
    _write_tasks(tasks_path(db_path), tasks)
    return tasks


def _write_tasks(path: Path, tasks: Sequence[Any]) -> None:
    from ..utils.atomic import atomic_write

    atomic_write(path, "[\n" + ",\n".join(json.dumps({"op": t.op, "args": t.args}) for t in tasks) + "\n]\n")


def generate(spec: DatasetSpec, db: Database, measurer: MeasurerBase, tasks: Sequence[Any] | None = None,
             time_budget: float | None = None, on_task: Callable[[TaskProgress], None] = lambda p: None,
             callbacks: Sequence[Any] = ()) -> list[TaskProgress]:
    """Measure the dataset's samples into ``db`` (a :class:`~tensortune.database.Database`),
    task by task, until every task has ``spec.samples`` or ``time_budget`` seconds are spent."""
    from ..tuners import get_tuner
    from ..database.trials import measure_context

    tuner_name, options = CODE_SAMPLERS[spec.code_sampler]
    tasks = list(tasks) if tasks is not None else dataset_tasks(spec)
    start = time.perf_counter()
    out = []
    for i, task in enumerate(tasks):
        context = measure_context(task, measurer.options)
        others = [c for c, _ in db.contexts(task.workload_key)
                  if (c.cpu_model, c.target) != (context.cpu_model, context.target)]
        if others:
            p = TaskProgress(task.name, task.workload_key, 0, 0, f"measured on another machine ({others[0].cpu_model})")
            out.append(p)
            on_task(p)
            continue
        left = None if time_budget is None else time_budget - (time.perf_counter() - start)
        if left is not None and left <= 0:
            break
        tuner = get_tuner(tuner_name, task, seed=spec.seed + i, start_from_default=False, options=options)
        tuner.confirm_top = 0  # samples, not a best: no confirmation rounds
        res = tuner.tune(Budget(trials=spec.samples, wall_s=left), measurer, database=db, callbacks=callbacks)
        stored = sum(1 for t in db.trials(task.workload_key) if t.context == context and t.tuner == tuner_name
                     and t.confirmation is None)
        p = TaskProgress(task.name, task.workload_key, stored, res.trials_measured,
                         "" if stored >= spec.samples else res.stop_reason)
        out.append(p)
        on_task(p)
    return out


def space_measured(task: Task, stored: int) -> bool:
    """Whether ``stored`` samples cover every valid config of the task's space: a space with fewer
    configs than the samples asked for is done once all of them are measured."""
    import itertools

    # iterating a space yields its valid configs only: is there one beyond the first ``stored``?
    return stored >= len(task.space) or next(itertools.islice(task.space, stored, None), None) is None


def status(spec: DatasetSpec, db: Database, tasks: Sequence[Any]) -> dict[str, Any]:
    """How far the dataset is: tasks complete (``spec.samples`` stored, or, counted apart as
    ``exhausted``, every valid config of a smaller space), samples stored, and the measuring time
    spent (per task, the span from its first to its last stored sample plus one mean gap, summed;
    the one-time cost of the dataset), per machine."""
    tuner_name, _ = CODE_SAMPLERS[spec.code_sampler]
    complete, exhausted, samples, seconds = 0, 0, 0, 0.0
    machines: dict[str, dict[str, float]] = {}
    # a task is its op and arguments: its samples may come from any machine's target (a task
    # kept in the list is built for this machine, whose workload key another machine's lacks)
    stored: dict[str, list[str]] = {}
    for rec in db.tasks():
        stored.setdefault(_task_key(json.loads(rec.task_json)), []).append(rec.workload_key)
    for task in tasks:
        keys = stored.get(_task_key({"op": task.op, "args": task.args}), [task.workload_key])
        count = 0
        for key in keys:
            trials = sorted((t for t in db.trials(key) if t.tuner == tuner_name and t.confirmation is None),
                            key=lambda t: t.timestamp)
            if not trials:
                continue
            count += len(trials)
            span = trials[-1].timestamp - trials[0].timestamp
            span += span / max(len(trials) - 1, 1)
            seconds += span
            m = machines.setdefault(f"{trials[0].cpu_model} {trials[0].target}",
                                    {"tasks": 0, "samples": 0, "seconds": 0.0})
            m["tasks"] += 1
            m["samples"] += len(trials)
            m["seconds"] += span
        if not count:
            continue
        samples += count
        if count >= spec.samples:
            complete += 1
        elif space_measured(task, count):
            exhausted += 1
    return {"tasks": len(tasks), "complete": complete + exhausted, "exhausted": exhausted, "samples": samples,
            "measuring_hours": seconds / 3600, "machines": machines}


def _task_key(item: dict[str, Any]) -> str:
    """A task as text from its ``op`` and ``args`` (a kept task list's item or a stored task's JSON)."""
    return json.dumps([item["op"], item["args"]], sort_keys=True)


def export(db: Database, op: str, out: str | Path, max_slowdown: float = MAX_SLOWDOWN,
           workers: int | None = None, spec: DatasetSpec | None = None, max_tasks: int | None = None,
           max_samples: int | None = None, order: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write the features-and-labels file of every ``op`` task in ``db`` (see the module);
    returns its summary (also in the JSON sidecar ``OUT.json``). Curve features are extracted
    in ``workers`` processes (default: one per core); ``spec``, the dataset's settings, goes
    into the summary.

    ``max_tasks`` keeps the first tasks with samples, in the order of ``order`` (the dataset's
    kept task list, ``{"op", "args"}`` items; else as stored), and ``max_samples`` the first
    samples measured of each task and machine. A sampler's first tasks and an EBS trajectory's
    first samples do not depend on how many are asked, so such a cut is the smaller dataset
    that generating it with those numbers would store: the ablation reuses the main dataset."""
    from ..features import get_extractor
    from ..features.parallel import ParallelExtractor
    from ..task import Task
    from ..utils.atomic import atomic_path, atomic_write

    curve, knob = ParallelExtractor("curve", workers=workers), get_extractor("knob")
    xs_curve, xs_knob, xs_task, ys, task_idx, mach_idx = [], [], [], [], [], []
    tasks_out, machines = [], []
    task_feature_names: list[str] | None = None
    dropped = 0
    records = [r for r in db.tasks() if r.op == op]
    if order is not None:
        rank = {_task_key(t): i for i, t in enumerate(order)}
        records.sort(key=lambda r: rank.get(_task_key(json.loads(r.task_json)), len(rank)))
    for rec in records:
        if max_tasks is not None and len({t["workload_key"] for t in tasks_out}) >= max_tasks:
            break
        task = Task.from_json(json.loads(rec.task_json))
        stored = [t for t in db.trials(rec.workload_key) if t.confirmation is None]
        for ctx, _ in db.contexts(rec.workload_key):
            every = [t for t in stored if t.context == ctx][:max_samples]
            trials = [t for t in every if t.ok and t.verified]
            if not trials:
                continue
            best = min(t.cost for t in trials)
            keep = [t for t in trials if t.cost <= max_slowdown * best]
            dropped += len(every) - len(keep)
            pairs = []
            for t in keep:
                try:
                    pairs.append((t, task.space.get(t.config_index)))
                except IndexError:  # a record of another space version
                    dropped += 1
            configs = [c for _, c in pairs]
            if not configs:
                continue
            machine = {"cpu_model": ctx.cpu_model, "target": ctx.target, "threads": ctx.threads, "timing": ctx.timing}
            if machine not in machines:
                machines.append(machine)
            feats = task.features
            task_feature_names = task_feature_names or sorted(feats)
            xs_curve.append(curve.extract(task, configs))
            xs_knob.append(knob.extract(task, configs))
            xs_task.append(np.tile([feats[k] for k in task_feature_names], (len(configs), 1)))
            ys.append(np.array([best / t.cost for t, _ in pairs]))
            task_idx += [len(tasks_out)] * len(configs)
            mach_idx += [machines.index(machine)] * len(configs)
            tasks_out.append({"workload_key": rec.workload_key, "name": task.name, "args": task.args,
                              "machine": machines.index(machine), "samples": len(configs), "best_s": best})
    if not tasks_out:
        raise ValueError(f"no verified {op} samples in the database")
    width = max(x.shape[1] for x in xs_knob)
    knob_rows = np.concatenate([np.pad(x, ((0, 0), (0, width - x.shape[1]))) for x in xs_knob]).astype(np.float32)
    arrays = {"curve": np.concatenate(xs_curve).astype(np.float32), "knob": knob_rows,
              "task": np.concatenate(xs_task).astype(np.float32), "label": np.concatenate(ys).astype(np.float32),
              "task_index": np.array(task_idx, dtype=np.int32), "machine_index": np.array(mach_idx, dtype=np.int32)}
    out = Path(out)
    with atomic_path(out, suffix=".npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
    summary = {"op": op, "samples": int(len(arrays["label"])), "tasks": tasks_out, "machines": machines,
               "task_features": task_feature_names, "dropped": dropped, "max_slowdown": max_slowdown,
               "arrays": {k: list(v.shape) for k, v in arrays.items()},
               "spec": asdict(spec) if spec is not None else None,
               "cut": {"max_tasks": max_tasks, "max_samples": max_samples}}
    atomic_write(str(out) + ".json", json.dumps(summary, indent=1))
    return summary
