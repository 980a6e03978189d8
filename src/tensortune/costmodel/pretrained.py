"""A cost model trained before compilation and never refitted (One-Shot Tuner's predictor).

It scores a task's candidates with the predictor trained for the task's op (template): the
packaged one (``tensortune/learn/pretrained/<op>/``) unless a folder is given, either one
predictor folder or a folder holding one sub-folder per op. Curve features are extracted in
worker processes (:class:`~tensortune.features.parallel.ParallelExtractor`), since a search asks
for tens of thousands.

It is registered as ``pretrained`` with ``learns = False``: by design measurements do not
change it (:meth:`fit` does nothing), and a tuner plans with it without refitting.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..space import Config
from .base import CostModel, TaskData

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Where the package keeps its pre-trained predictors, one folder per op.
SHIPPED = Path(__file__).resolve().parents[1] / "learn" / "pretrained"


def predictor_folder(op: str, source: str | Path | None = None) -> Path | None:
    """The predictor folder for ``op``: ``source`` itself when it is a predictor of ``op``, its
    sub-folder ``op`` when it has one, else None; the packaged one when ``source`` is None."""
    from ..learn.predictor import SCHEMA_FILE

    root = Path(source) if source is not None else SHIPPED
    if (root / SCHEMA_FILE).is_file():
        try:
            return root if json.loads((root / SCHEMA_FILE).read_text()).get("op") == op else None
        except (json.JSONDecodeError, AttributeError):
            return root  # let the loader say what is wrong with it
    sub = root / op
    return sub if (sub / SCHEMA_FILE).is_file() else None


def available_ops(source: str | Path | None = None) -> list[str]:
    """The ops a predictor source (default: the package) has predictors for."""
    from ..learn.predictor import SCHEMA_FILE

    root = Path(source) if source is not None else SHIPPED
    if (root / SCHEMA_FILE).is_file():
        try:
            return [str(json.loads((root / SCHEMA_FILE).read_text()).get("op"))]
        except (json.JSONDecodeError, AttributeError):
            return []
    return sorted(p.name for p in root.glob("*") if (p / SCHEMA_FILE).is_file()) if root.is_dir() else []


def machine_mismatch(predictor: Any, target_json: dict[str, Any]) -> str:
    """One line when ``predictor`` was trained on measurements of another CPU than this one
    (CPU model or LLVM cpu differ), else ""."""
    from ..target import cpu_model

    trained = predictor.machine
    if not trained:
        return ""
    try:
        trained_cpu = json.loads(trained.get("target", "{}")).get("mcpu", "")
    except json.JSONDecodeError:
        trained_cpu = ""
    here_cpu, here_model = str(target_json.get("mcpu", "")), cpu_model()
    if (trained.get("cpu_model", here_model), trained_cpu or here_cpu) == (here_model, here_cpu):
        return ""
    return (f"note: the {predictor.op} predictor was trained on {trained.get('cpu_model')} ({trained_cpu or '?'}), "
            f"this CPU is {here_model} ({here_cpu or '?'}); its ranking may be less accurate here")


@dataclass(frozen=True)
class PretrainedOptions:
    """``folder``: a predictor folder, or a folder of per-op predictor folders (default: the
    package's); ``workers``: processes extracting curve features (default: one per core)."""

    folder: str | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be at least 1")


class PretrainedCostModel(CostModel):
    """Scores candidates with pre-trained predictors, one per op (see the module)."""

    name = "pretrained"
    learns = False
    Options = PretrainedOptions

    @classmethod
    def create(cls, options: Any, *, feature: str = "", objective: str = "", seed: int = 0,
               acquisition: str | None = None, base: CostModel | None = None) -> CostModel:
        """The model from its options (a tuner's feature, objective and seed do not apply)."""
        return cls(options.folder, workers=options.workers)

    def __init__(self, predictor: str | Path | None = None, workers: int | None = None) -> None:
        """``predictor``: a predictor folder or a folder of per-op folders (default: the packaged
        predictors); ``workers``: processes extracting curve features (default: one per core)."""
        from ..features.parallel import ParallelExtractor

        self.source = predictor
        self.extractor = ParallelExtractor("curve", workers=workers)
        self._loaded: dict[str, Any] = {}

    def predictor_for(self, task: Task) -> Any:
        """The loaded predictor of ``task``'s op; :class:`~tensortune.learn.PredictorError` when
        there is none."""
        from ..learn.predictor import PredictorError, load_predictor

        op = task.op
        if op not in self._loaded:
            folder = predictor_folder(op, self.source)
            if folder is None:
                have = available_ops(self.source)
                where = "the package" if self.source is None else str(self.source)
                raise PredictorError(f"no pre-trained predictor for {op} tasks in {where} (it has: "
                                     f"{', '.join(have) or 'none'}); train one with `tensortune predictor train`")
            self._loaded[op] = load_predictor(folder)
        return self._loaded[op]

    def has_predictor(self, task: Task) -> bool:
        """True when a predictor for ``task``'s op is available."""
        return task.op in self._loaded or predictor_folder(task.op, self.source) is not None

    def covers(self, task: Task) -> bool:
        return self.has_predictor(task)

    def describe(self, task: Task) -> str:
        """The predictor's kind, op and training tasks (the tuner adds any machine note)."""
        p = self.predictor_for(task)
        return f"{p.kind} predictor of {p.op} ({p.schema.get('dataset', {}).get('tasks', '?')} tasks)"

    def fit(self, data: Sequence[TaskData]) -> None:
        """Nothing: a pre-trained model is not updated by measurements (One-Shot Tuner)."""

    def predict(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        if not configs:
            return np.zeros(0)
        p = self.predictor_for(task)
        return p.predict(task, configs, self.extractor.extract(task, configs))

    def position_scorer(self, task: Task, space: Any = None) -> Callable[[np.ndarray], np.ndarray] | None:
        """Scores rows of knob positions of ``space`` (default ``task.space``; the configs are
        built for their curve features)."""
        space = space if space is not None else task.space

        def score(positions: np.ndarray) -> np.ndarray:
            idx = space.indices(positions)
            uniq, inv = np.unique(idx, return_inverse=True)
            return self.predict(task, [space.get(int(i)) for i in uniq])[inv]

        return score
