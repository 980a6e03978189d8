"""Training data of the pre-trained cost models: a dataset export read back, split by task.

A training file is what ``tensortune dataset export`` writes (:func:`tensortune.app.dataset.export`):
an ``.npz`` of numbers (read with ``allow_pickle=False``) and a JSON summary beside it. Each row
is one measured candidate: its context-relation ("curve") features, its raw knob values, its
task's features and its label, the task's normalised throughput on the machine that measured it.
Rows of one task stay together: splits are by task, so held-out figures are about tasks the
model never saw.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

#: The arrays a training file holds (and their order in the model's flat input row); ``hw``
#: (the measuring machine's hardware features, Fasor) is empty unless added by
#: :func:`tensortune.learn.fasor.fasor_data`.
INPUT_PARTS = ("curve", "knob", "task", "hw")


@dataclass
class TrainingData:
    """Rows of one op's dataset: inputs by part, labels, and which task / machine each row is from."""

    curve: np.ndarray  # float32 [n, curve_dim]
    knob: np.ndarray  # float32 [n, knob_dim]
    task: np.ndarray  # float32 [n, n_task_features]
    label: np.ndarray  # float32 [n], best cost / cost on the row's machine
    task_index: np.ndarray  # int32 [n]
    summary: dict[str, Any] = field(default_factory=dict)  # the export's JSON sidecar
    hw: np.ndarray | None = None  # float32 [n, hw_dim]: the measuring machine's features (empty: none)
    targets: np.ndarray | None = None  # float32 [n, m]: what a multi-output net regresses (None: the label)
    machine_index: np.ndarray | None = None  # int [n]: the row's machine in ``summary["machines"]``

    def __post_init__(self) -> None:
        n = len(self.label)
        if self.hw is None:
            self.hw = np.zeros((n, 0), dtype=np.float32)
        if self.machine_index is None:
            self.machine_index = np.zeros(n, dtype=np.int64)
        for name in ("curve", "knob", "task", "task_index", "hw", "machine_index"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"training data: {name} has {len(getattr(self, name))} rows, labels {n}")
        if self.targets is not None and len(self.targets) != n:
            raise ValueError(f"training data: targets has {len(self.targets)} rows, labels {n}")

    @property
    def regression_targets(self) -> np.ndarray:
        """What a net is trained to output: ``targets`` [n, m] when set, else the label as [n, 1]."""
        return (self.targets if self.targets is not None else self.label[:, None]).astype(np.float32)

    def __len__(self) -> int:
        return int(len(self.label))

    @property
    def op(self) -> str:
        """The op (template) of the tasks."""
        return str(self.summary.get("op", ""))

    @property
    def task_features(self) -> list[str]:
        """Names of the task-feature columns."""
        return list(self.summary.get("task_features", []))

    def inputs(self) -> np.ndarray:
        """The flat input rows ``[curve | knob | task | hw]`` (float32)."""
        return np.concatenate([self.curve, self.knob, self.task, self.hw], axis=1).astype(np.float32)

    def tasks(self) -> np.ndarray:
        """The distinct task indices present."""
        return np.unique(self.task_index)

    def subset(self, tasks: Sequence[int] | np.ndarray) -> "TrainingData":
        """The rows of the given task indices."""
        mask = np.isin(self.task_index, np.asarray(tasks))
        return TrainingData(self.curve[mask], self.knob[mask], self.task[mask], self.label[mask],
                            self.task_index[mask], self.summary, self.hw[mask],
                            None if self.targets is None else self.targets[mask], self.machine_index[mask])

    def split(self, fraction: float, seed: int = 0) -> tuple["TrainingData", "TrainingData"]:
        """``(rest, held)``: ``fraction`` of the tasks (at least one, when ``fraction`` > 0 and
        there are two or more) held out, chosen reproducibly by ``seed``."""
        tasks = self.tasks()
        n_held = int(round(fraction * len(tasks)))
        if fraction > 0 and len(tasks) > 1:
            n_held = min(max(n_held, 1), len(tasks) - 1)
        held = np.random.default_rng(seed).permutation(tasks)[:n_held]
        return self.subset(np.setdiff1d(tasks, held)), self.subset(held)


def load_training(path: str | Path) -> TrainingData:
    """A training file (``X.npz`` with its ``X.npz.json`` summary); ValueError naming what is wrong."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such training file (make one with `tensortune dataset export`)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a training file ({exc})") from None
    missing = [k for k in ("curve", "knob", "task", "label", "task_index") if k not in arrays]
    if missing:
        raise ValueError(f"{path}: not a training file (missing {', '.join(missing)})")
    side = Path(str(path) + ".json")
    try:
        summary = json.loads(side.read_text()) if side.exists() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{side}: not valid JSON ({exc})") from None
    machine = arrays["machine_index"].astype(np.int64) if "machine_index" in arrays else None
    hw = arrays["hw"].astype(np.float32) if "hw" in arrays else None
    targets = arrays["targets"].astype(np.float32) if "targets" in arrays else None
    return TrainingData(arrays["curve"].astype(np.float32), arrays["knob"].astype(np.float32),
                        arrays["task"].astype(np.float32), arrays["label"].astype(np.float32),
                        arrays["task_index"].astype(np.int64), summary, hw, targets, machine)


def concat(parts: Sequence[TrainingData]) -> TrainingData:
    """Several training sets of one op as one (task indices renumbered, knob columns padded)."""
    if not parts:
        raise ValueError("nothing to concatenate")
    ops = {p.op for p in parts}
    if len(ops) > 1:
        raise ValueError(f"training files of different ops: {', '.join(sorted(ops))}")
    names = parts[0].task_features
    if any(p.task_features != names for p in parts):
        raise ValueError("training files with different task features")
    width = max(p.knob.shape[1] for p in parts)
    if len({p.hw.shape[1] for p in parts}) > 1 or len({None if p.targets is None else p.targets.shape[1] for p in parts}) > 1:
        raise ValueError("training files with different hardware features or targets")
    offset, idx, tasks, machines, mach = 0, [], [], [], []
    for p in parts:
        idx.append(p.task_index + offset)
        offset += int(p.task_index.max()) + 1 if len(p) else 0
        remap = []
        for m in p.summary.get("machines", []) or [{}]:
            if m not in machines:
                machines.append(m)
            remap.append(machines.index(m))
        mach.append(np.asarray(remap, dtype=np.int64)[np.clip(p.machine_index, 0, len(remap) - 1)])
        tasks += [{**t, "machine": remap[min(int(t.get("machine", 0)), len(remap) - 1)]} for t in p.summary.get("tasks", [])]
    summary = {**parts[0].summary, "tasks": tasks, "machines": machines, "samples": int(sum(len(p) for p in parts))}
    targets = None if parts[0].targets is None else np.concatenate([p.targets for p in parts])
    return TrainingData(np.concatenate([p.curve for p in parts]),
                        np.concatenate([np.pad(p.knob, ((0, 0), (0, width - p.knob.shape[1]))) for p in parts]),
                        np.concatenate([p.task for p in parts]), np.concatenate([p.label for p in parts]),
                        np.concatenate(idx), summary, np.concatenate([p.hw for p in parts]), targets,
                        np.concatenate(mach))


@dataclass
class Standardizer:
    """Per-column ``(x - mean) / std`` fitted on training rows (constant columns pass through centred)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> "Standardizer":
        """Column statistics of ``x``."""
        mean = x.mean(axis=0).astype(np.float32)
        std = x.std(axis=0).astype(np.float32)
        return cls(mean, np.where(std > 1e-6, std, 1.0).astype(np.float32))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.std).astype(np.float32)

    def to_json(self) -> dict[str, list[float]]:
        """JSON form (for the predictor's schema)."""
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_json(cls, d: dict[str, list[float]]) -> "Standardizer":
        """Inverse of :meth:`to_json`."""
        return cls(np.asarray(d["mean"], dtype=np.float32), np.asarray(d["std"], dtype=np.float32))


def oversampling_weights(labels: np.ndarray, bins: int = 10) -> np.ndarray:
    """Per-row sampling weights inversely proportional to how many rows share the row's label
    bin (``bins`` equal bins over [0, 1]): the rare fast candidates are drawn as often as the
    common slow ones (One-Shot Tuner's oversampling). Weights sum to 1."""
    b = np.clip((np.asarray(labels, dtype=np.float64) * bins).astype(np.int64), 0, bins - 1)
    counts = np.bincount(b, minlength=bins).astype(np.float64)
    w = 1.0 / counts[b]
    return w / w.sum()
