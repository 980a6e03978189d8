"""Making Fasor's models: pre-training, the one-time sensitivity study, DQN pre-training, transfer.

- :func:`pretrain`: the transferable model trained on the shared dataset (exported training
  files, :mod:`tensortune.learn.fasor` adds hardware features and the three targets) with
  Fasor's settings, held-out tasks evaluated, saved as ``OUT/<op>/``; then the sensitivity
  study and the DQN's offline pre-training are kept beside it.
- :func:`sensitivity_study`: for sample tasks of the op, how much changing each knob (from
  random base configs, one knob at a time) moves the model's compute-bound and memory-bound
  scores; the knobs ranked for each class (``sensitivity.json``).
- :func:`pretrain_dqn`: the DQN explorer trained offline on the dataset: each of some dataset
  tasks is an environment whose walk is scored by an XGBoost surrogate fitted on that task's
  measured samples (knob values -> measured ``-ln`` seconds; a second one for the measured
  compute/memory score ratio), 20 epochs (``dqn.pt``).
- :func:`transfer`: few-shot transfer to this machine: ``k`` representative tasks of the
  pre-training data (clustered by Spearman similarity of their features) are measured here into
  a database (resumable: the dataset generator's trajectory sampler), and the model is
  fine-tuned on them with alpha = K / (K + T); the result goes to the machine's folder under
  :func:`~tensortune.costmodel.fasor.fasor_home` where the tuner finds it.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..learn.data import TrainingData
from ..costmodel.fasor import FasorCostModel, transferred_folder

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..measure import MeasurerBase
    from ..task import Task

#: Tasks and base configs of the sensitivity study.
STUDY_TASKS, STUDY_BASES = 12, 48
#: Dataset tasks that serve as DQN pre-training environments, and its epochs (the paper's 20).
DQN_TASKS, DQN_EPOCHS = 16, 20


def tasks_of(data: TrainingData, target: dict[str, Any], ids: Sequence[int] | None = None) -> list[Any]:
    """The tensortune tasks of a training file's summary (``ids``: which; default all) for ``target``."""
    from ..task import Task

    summary = data.summary.get("tasks", [])
    op = data.op
    out = []
    for i in (range(len(summary)) if ids is None else ids):
        out.append(Task.from_op(op, dict(summary[int(i)]["args"]), target=target))
    return out


def sensitivity_study(model: FasorCostModel, tasks: Sequence[Any], bases: int = STUDY_BASES,
                      seed: int = 0) -> dict[str, Any]:
    """Knob sensitivity of the model's scores (see the module): per class (``compute``,
    ``memory``) the mean relative change of that score when one knob moves, and the knobs
    ranked by it."""
    import random

    rng = random.Random(seed)
    names = [k.name for k in tasks[0].space.knobs] if tasks else []
    change = {"compute": {n: [] for n in names}, "memory": {n: [] for n in names}}
    for task in tasks:
        space = task.space
        base = space.sample(rng, bases)
        if not base:
            continue
        moved: list[Any] = []
        which: list[tuple[int, str]] = []
        for b, c in enumerate(base):
            pos = space.positions(c)
            for j, k in enumerate(space.knobs):
                if len(k) < 2:
                    continue
                for _ in range(8):
                    q = list(pos)
                    q[j] = rng.choice([p for p in range(len(k)) if p != pos[j]])
                    other = space.from_positions(q)
                    if space.is_valid(other):
                        moved.append(other)
                        which.append((b, k.name))
                        break
        out_base = model.outputs(task, base)
        out_moved = model.outputs(task, moved)
        for (b, name), o in zip(which, out_moved):
            for col, cls in ((1, "compute"), (2, "memory")):
                ref = max(abs(out_base[b, col]), 1e-6)
                change[cls][name].append(abs(o[col] - out_base[b, col]) / ref)
    result: dict[str, Any] = {"tasks": len(tasks), "bases": bases, "seed": seed,
                              "method": "mean |score(one knob moved) - score(base)| / |score(base)| over random "
                                        "base configs of sample tasks, scores predicted by the model"}
    for cls, per in change.items():
        mean = {n: float(np.mean(v)) if v else 0.0 for n, v in per.items()}
        result[cls] = {"ranking": sorted(mean, key=lambda n: (-mean[n], n)), "change": mean}
    return result


def dqn_envs(data: TrainingData, target: dict[str, Any], n_tasks: int = DQN_TASKS, seed: int = 0) -> list[Any]:
    """DQN pre-training environments from a Fasor training set (targets present): one per
    sampled task, scored by surrogates of its measured samples (see the module)."""
    from ..explore.dqn import DQNEnv

    if data.targets is None:
        raise ValueError("DQN environments need Fasor targets (fasor_data)")
    rng = np.random.default_rng(seed)
    ids = data.tasks()
    ids = np.sort(rng.choice(ids, size=min(n_tasks, len(ids)), replace=False))
    tasks = tasks_of(data, target, [int(i) for i in ids])
    out = []
    for tid, task in zip(ids, tasks):
        m = data.task_index == tid
        x = data.knob[m][:, :task.space.vector_width]  # the samples' knob encodings (the exporter's)
        t = data.targets[m]
        ratio = np.maximum(t[:, 1], 0.0) / np.maximum(t[:, 2], 1e-3)
        score, roof = _fit_on_vectors(task, x, t[:, 0], ratio, seed)
        seeds = [_nearest_index(task, x[i]) for i in np.argsort(-t[:, 0])[:4]]
        out.append(DQNEnv(space=task.space, score=score, roofline=roof, context=None,
                          seeds=[s for s in seeds if s is not None]))
    return out


def _fit_on_vectors(task: Task, x: np.ndarray, y: np.ndarray, ratio: np.ndarray, seed: int
                    ) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Position scorers of ``task.space`` fitted on measured knob encodings ``x``: ``y`` and
    the CS/MS ``ratio`` (log1p-fitted)."""
    import xgboost as xgb

    from ..features.knob import KnobTable

    table = KnobTable(task.space)
    params = {"max_depth": 6, "eta": 0.1, "subsample": 0.9, "seed": seed, "nthread": 1, "objective": "reg:squarederror"}
    b_score = xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=120)
    b_ratio = xgb.train(params, xgb.DMatrix(x, label=np.log1p(ratio)), num_boost_round=80)
    return (lambda p: b_score.predict(xgb.DMatrix(table.encode(p))).astype(np.float64),
            lambda p: np.expm1(np.maximum(b_ratio.predict(xgb.DMatrix(table.encode(p))), 0.0)).astype(np.float64))


def _nearest_index(task: Task, vector: np.ndarray) -> int | None:
    """The config of ``task.space`` whose encoding is ``vector`` (None when none matches)."""
    space = task.space
    # decode knob by knob: each knob's encoding is a fixed-width slice
    pos, o = [], 0
    for k in space.knobs:
        w = k.width
        want = np.asarray(vector[o:o + w], dtype=np.float64)
        o += w
        enc = np.array([k.encode(e) for e in k.entities], dtype=np.float64).reshape(len(k), -1)
        pos.append(int(np.argmin(np.abs(enc - want).sum(axis=1))))
    c = space.from_positions(pos)
    return c.index if space.is_valid(c) else None


def pretrain(data: TrainingData, out: str | Path, holdout: float = 0.1, options: Any = None,
             study: bool = True, dqn_epochs: int = DQN_EPOCHS, seed: int = 0,
             log: Callable[[str], None] = print, command: str = "",
             weights_dtype: str | None = None) -> dict[str, Any]:
    """Pre-train the Fasor model of ``data`` (a Fasor training set: :func:`~tensortune.learn.fasor.fasor_data`)
    into ``out/<op>/`` (see the module); returns the summary written as the schema's ``fasor`` entry.
    ``command``, the command line that made it, is kept in the schema so the model can be remade;
    ``weights_dtype`` is how the net's weights are stored (:meth:`Predictor.save`)."""
    from ..learn.fasor import FASOR_TRAIN
    from ..learn.trainer import evaluate, train_predictor
    from ..measure.hardware import HardwareProfile

    options = options or FASOR_TRAIN
    train, held = data.split(holdout, seed=seed) if holdout > 0 else (data, None)
    t0 = time.perf_counter()
    predictor, report = train_predictor(train, options, on_epoch=lambda e, tl, vl: log(
        f"epoch {e}: train {tl:.4f}, validation {vl:.4f}"))
    summary: dict[str, Any] = {"train_seconds": time.perf_counter() - t0, "epochs": report.epochs,
                               "val": report.val_metrics}
    if held is not None and len(held):
        summary["heldout"] = evaluate(predictor, held)
        summary["heldout"]["task_ids"] = [int(i) for i in held.tasks()]
        predictor.schema["heldout"] = summary["heldout"]
    folder = Path(out) / data.op
    predictor.save(folder, weights_dtype)
    predictor.folder = folder
    profile = HardwareProfile.from_json(data.summary["hardware"][0])
    target = dict(profile.target)
    if study:
        model = FasorCostModel(folder, profile=profile)
        ids = list(train.tasks())
        rng = np.random.default_rng(seed)
        pick = sorted(rng.choice(ids, size=min(STUDY_TASKS, len(ids)), replace=False).tolist())
        t1 = time.perf_counter()
        st = sensitivity_study(model, tasks_of(data, target, pick), seed=seed)
        st["seconds"] = time.perf_counter() - t1
        from ..utils.atomic import atomic_write

        atomic_write(folder / "sensitivity.json", json.dumps(st, indent=1))
        summary["sensitivity"] = {k: st[k]["ranking"] for k in ("compute", "memory")}
        log(f"sensitivity study ({st['seconds']:.0f} s): compute {st['compute']['ranking']}, "
            f"memory {st['memory']['ranking']}")
    if dqn_epochs:
        summary["dqn"] = pretrain_dqn(train, target, folder, epochs=dqn_epochs, seed=seed)
        log(f"DQN pre-trained: {summary['dqn']}")
    predictor.schema["fasor"] = summary
    predictor.schema["command"] = command
    predictor.save(folder, weights_dtype)
    return summary


def pretrain_dqn(data: TrainingData, target: dict[str, Any], folder: str | Path, epochs: int = DQN_EPOCHS,
                 n_tasks: int = DQN_TASKS, seed: int = 0, options: Any = None) -> dict[str, Any]:
    """Offline DQN pre-training on the dataset (see the module), saved as ``folder/dqn.pt``."""
    from ..explore.dqn import DQNSearch
    from ..costmodel.fasor import DQN_FILE

    envs = dqn_envs(data, target, n_tasks, seed)
    agent = DQNSearch(envs[0].space, seed=seed, options=options)
    report = agent.pretrain(envs, epochs=epochs)
    agent.save(Path(folder) / DQN_FILE)
    return {k: v for k, v in report.items() if k != "mean_reward"} | {
        "tasks": len(envs), "final_mean_reward": (report.get("mean_reward") or [None])[-1]}


def measure_tasks(tasks: Sequence[Any], db: Database, measurer: MeasurerBase, samples: int, op_class: str,
                  seed: int = 0,
                  log: Callable[[str], None] = print) -> tuple[list[Any], float]:
    """Measure ``samples`` configs of each task into ``db`` along the dataset generator's
    trajectory sampler (resumes: stored samples count); ``(progress per task, seconds)``."""
    from .dataset import DatasetSpec, generate

    spec = DatasetSpec(op=op_class, n_tasks=len(tasks), samples=samples, seed=seed)
    t0 = time.perf_counter()
    progress = generate(spec, db, measurer, tasks, on_task=lambda p: log(f"{p.name}: {p.stored} samples"))
    return progress, time.perf_counter() - t0


@dataclass(frozen=True)
class PretrainingTasks:
    """The tasks a model was pre-trained on, as transfer needs them: ``op`` as stored (e.g.
    ``conv2d_nchwc``), the dataset's ``op_class`` (``conv2d``), each task's ``args`` (by task
    id), their task ``features`` (one row per task, the predictor's task features) and the ids
    held out at pre-training (never shots, so they stay a fair test)."""

    op: str
    op_class: str
    args: list[dict[str, int]]
    features: np.ndarray
    heldout: tuple[int, ...] = ()

    @classmethod
    def of_data(cls, data: TrainingData) -> "PretrainingTasks":
        """From the pre-training file itself."""
        from ..learn.fasor import task_matrix

        ids, feats = task_matrix(data)
        rows = np.zeros((len(data.summary.get("tasks", [])), feats.shape[1]))
        rows[ids] = feats
        return cls(data.op, (data.summary.get("spec") or {}).get("op", "conv2d"),
                   [dict(t["args"]) for t in data.summary.get("tasks", [])], rows)

    @classmethod
    def of_model(cls, predictor: Any) -> "PretrainingTasks":
        """From a pre-trained model alone (its schema names every pre-training task and the
        held-out ones), so a user with the shipped model and no dataset can transfer it; the
        task features are computed again from the tasks (the generic target: they are shapes)."""
        from ..target import generic_target_json
        from ..task import Task

        ds = predictor.schema.get("dataset") or {}
        names = ds.get("task_names") or []
        if not names:
            raise ValueError(f"the {predictor.op} model names no pre-training tasks; give its training file")
        args = [parse_task_name(n)[1] for n in names]
        wanted = list(predictor.schema["inputs"]["task_features"])
        target = generic_target_json(1)
        feats = np.array([[Task.from_op(predictor.op, a, target=target).features.get(f, 0.0) for f in wanted]
                          for a in args])
        held = tuple(int(i) for i in (predictor.schema.get("heldout") or {}).get("task_ids", []))
        return cls(predictor.op, (ds.get("spec") or {}).get("op", "conv2d"), args, feats, held)

    def representatives(self, k: int) -> list[int]:
        """Ids of ``k`` representative tasks among those not held out (clusters' medoids)."""
        from ..learn.fasor import representative_tasks

        pool = [i for i in range(len(self.args)) if i not in set(self.heldout)]
        return [pool[j] for j in representative_tasks(self.features[pool], k)]

    def tasks(self, ids: Sequence[int], target: dict[str, Any]) -> list[Any]:
        """The tensortune tasks of ``ids`` for ``target``."""
        from ..task import Task

        return [Task.from_op(self.op, dict(self.args[int(i)]), target=target) for i in ids]


def parse_task_name(name: str) -> tuple[str, dict[str, int]]:
    """``("conv2d_nchwc", {"H": 28, ...})`` from a task name ``conv2d_nchwc(H=28,...)``;
    ValueError for anything else."""
    import re

    m = re.fullmatch(r"(\w+)\(([^()]*)\)", name.strip())
    if not m:
        raise ValueError(f"not a task name: {name!r}")
    try:
        args = {k.strip(): int(v) for k, v in (part.split("=") for part in m.group(2).split(",") if part)}
    except ValueError:
        raise ValueError(f"not a task name: {name!r}") from None
    return m.group(1), args


def transfer(pretrained: str | Path, pretrain: PretrainingTasks | None, db: Database, measurer: MeasurerBase,
             target: dict[str, Any], threads: int, k: int = 10, samples: int = 64, seed: int = 0,
             out: str | Path | None = None, options: Any = None, op: str = "conv2d_nchwc",
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Few-shot transfer of the ``op`` model in ``pretrained`` (a folder with ``<op>/``) to the
    machine ``measurer`` times on (see the module); ``pretrain``: its pre-training tasks (None:
    read from the model). Resumes: samples already in ``db`` are kept."""
    from .dataset import export
    from ..learn.data import load_training
    from ..learn.fasor import FEWSHOT_TRAIN, fasor_data
    from ..learn.predictor import load_predictor
    from ..learn.trainer import train_predictor
    from ..measure.hardware import profile_for
    from ..costmodel.pretrained import predictor_folder

    op = pretrain.op if pretrain is not None else op
    src = predictor_folder(op, pretrained)
    if src is None:
        raise ValueError(f"no Fasor {op} model in {pretrained}")
    base = load_predictor(src)
    pretrain = pretrain or PretrainingTasks.of_model(base)
    tasks = pretrain.tasks(pretrain.representatives(k), target)
    log(f"{len(tasks)} representative tasks of {len(pretrain.args)}: {', '.join(t.name for t in tasks)}")
    progress, measure_s = measure_tasks(tasks, db, measurer, samples, pretrain.op_class, seed, log)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "transfer.npz"
        export(db, op, path)
        new = load_training(path)
    profile = profile_for(target, threads)
    new = fasor_data(new, [profile] * max(1, len(new.summary.get("machines", []))))
    t1 = time.perf_counter()
    tuned, report = train_predictor(new, options or FEWSHOT_TRAIN, init_from=base)
    tuned.schema["transfer"] = {"from": str(src), "from_machine": base.machine, "to": profile.key(),
                                "k": k, "tasks": [t.name for t in tasks], "samples_per_task": samples,
                                "records": len(new), "alpha": f"K / (K + T), K = {FEWSHOT_TRAIN.fewshot_k:g}",
                                "measure_seconds": measure_s, "train_seconds": time.perf_counter() - t1,
                                "epochs": report.epochs}
    dest = Path(out) / op if out is not None else transferred_folder(profile.key()) / op
    tuned.save(dest)
    for extra in ("sensitivity.json", "dqn.pt"):
        if (src / extra).is_file():
            shutil.copyfile(src / extra, dest / extra)
    return {"folder": str(dest), "stored": sum(p.stored for p in progress), **tuned.schema["transfer"]}
