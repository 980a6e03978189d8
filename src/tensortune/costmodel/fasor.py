"""Fasor's cost model at tuning time: latency, compute- and memory-bound scores of candidates.

It is the shared pre-trained predictor machinery (:class:`~.pretrained.PretrainedCostModel`)
with the machine's hardware features (:mod:`tensortune.measure.hardware`) appended to every
input row. Which weights it loads, first found:

1. the folder given (``folder=``): one predictor, or one sub-folder per op (``folder=shipped``
   names the shipped weights even where a transferred model exists: Fasor's "no transfer");
2. the model transferred to this machine by ``tensortune fasor transfer``, kept under
   :func:`fasor_home` by the machine's hardware key (CPU model, target, threads);
3. the weights shipped in the package (``tensortune/learn/pretrained/fasor/<op>/``), pre-trained
   on the machine kind named in their schema.

Like One-Shot's predictor it is used for inference only: measurements never refit it.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..space import Config
from .base import CostModel
from .pretrained import SHIPPED, PretrainedCostModel, PretrainedOptions, predictor_folder

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Where the package keeps Fasor's pre-trained models, one folder per op.
FASOR_SHIPPED = SHIPPED / "fasor"
log = logging.getLogger(__name__)

#: ``folder=`` value naming the shipped weights.
SHIPPED_NAME = "shipped"
#: Files of a Fasor model folder beside the predictor: the knobs' sensitivity study, the DQN agent.
SENSITIVITY_FILE, DQN_FILE = "sensitivity.json", "dqn.pt"


def fasor_home() -> Path:
    """Where transferred models are kept: ``$TENSORTUNE_CACHE/fasor`` or ``~/.cache/tensortune/fasor``."""
    from ..utils.cache import cache_root

    return cache_root() / "fasor"


def transferred_folder(profile_key: str) -> Path:
    """The folder of the models transferred to the machine with hardware key ``profile_key``."""
    return fasor_home() / hashlib.sha256(profile_key.encode()).hexdigest()[:16]


def task_threads(task: Task) -> int:
    """The threads a task's kernels run with (its target's ``num-cores``)."""
    return int(task.target_json.get("num-cores") or 1)


def read_sensitivity(predictor: Any) -> dict[str, list[str]]:
    """The sensitivity study kept with a Fasor model: ``{"compute": [knobs], "memory": [knobs]}``
    (most sensitive first); {} when there is none."""
    folder = predictor.folder
    if folder is None or not (folder / SENSITIVITY_FILE).is_file():
        return {}
    try:
        d = json.loads((folder / SENSITIVITY_FILE).read_text())
        return {k: [str(n) for n in d[k]["ranking"]] for k in ("compute", "memory") if k in d}
    except (json.JSONDecodeError, KeyError, TypeError):
        log.warning("%s cannot be read; every knob is tuned", folder / SENSITIVITY_FILE)
        return {}


@dataclass(frozen=True)
class FasorModelOptions(PretrainedOptions):
    """``folder``: a Fasor model folder (default: the transferred model, else the shipped one;
    ``shipped`` names the shipped weights); ``workers``: processes extracting features."""


class FasorCostModel(PretrainedCostModel):
    """Scores candidates with Fasor's transferable model (see the module)."""

    name = "fasor"
    Options = FasorModelOptions

    @classmethod
    def create(cls, options: Any, *, feature: str = "", objective: str = "", seed: int = 0,
               acquisition: str | None = None, base: CostModel | None = None) -> CostModel:
        return cls(options.folder, workers=options.workers)

    def __init__(self, model: str | Path | None = None, workers: int | None = None,
                 profile: Any = None) -> None:
        """``model``: a folder (see the module) instead of the transferred or shipped weights;
        ``profile``: the hardware profile to describe the machine with (default: this machine's
        for each task's target and threads, measured once and cached)."""
        super().__init__(model, workers)
        self.model_source = model
        self.profile = profile
        self._profiles: dict[tuple[str, int], Any] = {}
        self.origin: dict[str, str] = {}  # op -> "given" | "transferred" | "shipped"
        self._memos: dict[tuple[str, int], tuple[Any, Callable[[np.ndarray], np.ndarray]]] = {}

    def profile_for(self, task: Task) -> Any:
        """The hardware profile a task's candidates are scored with."""
        if self.profile is not None:
            return self.profile
        from ..measure.hardware import profile_for
        from ..target import target_key

        key = (target_key(task.target_json), task_threads(task))
        if key not in self._profiles:  # read (or measured) once per model, not per scored batch
            self._profiles[key] = profile_for(task.target_json, task_threads(task))
        return self._profiles[key]

    def folder_for(self, task: Task) -> tuple[Path | None, str]:
        """``(folder, origin)`` of the weights for ``task`` (see the module); ``(None, "")`` when none."""
        if self.model_source is not None and self.model_source != SHIPPED_NAME:
            return predictor_folder(task.op, self.model_source), "given"
        moved = None if self.model_source == SHIPPED_NAME else self._transferred(task)
        if moved is not None:
            return moved, "transferred"
        shipped = predictor_folder(task.op, FASOR_SHIPPED)
        return (shipped, "shipped") if shipped is not None else (None, "")

    def _transferred(self, task: Task) -> Path | None:
        """The folder of the model transferred to this machine for ``task``'s op, if there is one."""
        if self.profile is not None:
            key = self.profile.key()
        else:  # the key, without measuring the profile
            from ..measure.hardware import profile_key
            from ..target import cpu_model

            key = profile_key(cpu_model(), task.target_json, task_threads(task))
        return predictor_folder(task.op, transferred_folder(key))

    def predictor_for(self, task: Task) -> Any:
        from ..learn.predictor import PredictorError, load_predictor

        op = task.op
        if op not in self._loaded:
            folder, origin = self.folder_for(task)
            if folder is None:
                where = str(self.model_source) if self.model_source is not None else f"{FASOR_SHIPPED} or {fasor_home()}"
                raise PredictorError(f"no Fasor model for {op} tasks in {where}; pre-train one with "
                                     "`tensortune fasor pretrain`")
            p = load_predictor(folder)
            if not p.hw_features:
                raise PredictorError(f"{folder}: not a Fasor model (it reads no hardware features)")
            self._loaded[op], self.origin[op] = p, origin
        return self._loaded[op]

    def has_predictor(self, task: Task) -> bool:
        return task.op in self._loaded or self.folder_for(task)[0] is not None

    def outputs(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """``[n, 3]``: predicted ``-ln(seconds)``, compute score and memory score of ``configs``."""
        if not configs:
            return np.zeros((0, 3))
        p = self.predictor_for(task)
        rows = p.rows(task, configs, self.extractor.extract(task, configs), self.profile_for(task).vector())
        return p.predict_outputs(rows)

    def predict(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """The ranking score, ``-ln`` of the predicted seconds (higher is faster)."""
        return self.outputs(task, configs)[:, 0] if configs else np.zeros(0)

    def latency(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """Predicted seconds of ``configs``."""
        return np.exp(-self.predict(task, configs))

    def describe(self, task: Task) -> str:
        """Where the model for ``task`` comes from (the tuner adds any machine note)."""
        self.predictor_for(task)
        return f"{self.origin.get(task.op, '')} {self.name} model of {task.op}"

    def _position_outputs(self, task: Task, space: Any = None, fresh: bool = True
                          ) -> Callable[[np.ndarray], np.ndarray]:
        """The model's three outputs over positions of ``space``, memoised per config: a new memo
        (``fresh``), or the latest one of this task and space (the roofline ratio shares the
        score's, so one search predicts each config once)."""
        space = space if space is not None else task.space
        key = (task.workload_key, id(space))
        if not fresh and key in self._memos and self._memos[key][0] is space:
            return self._memos[key][1]
        cache: dict[int, np.ndarray] = {}

        def outputs(positions: np.ndarray) -> np.ndarray:
            idx = space.indices(positions)
            new = [int(i) for i in np.unique(idx) if int(i) not in cache]
            if new:
                for i, row in zip(new, self.outputs(task, [space.get(i) for i in new])):
                    cache[i] = row
            return np.stack([cache[int(i)] for i in idx]) if len(idx) else np.zeros((0, 3))

        self._memos[key] = (space, outputs)
        return outputs

    def position_scorer(self, task: Task, space: Any = None) -> Callable[[np.ndarray], np.ndarray]:
        """Scores rows of knob positions of ``space`` (default ``task.space``; a shrunken view of
        it works too), memoised per config in a new memo."""
        out = self._position_outputs(task, space)
        return lambda positions: out(positions)[:, 0]

    def roofline_scorer(self, task: Task, space: Any = None) -> Callable[[np.ndarray], np.ndarray]:
        """The compute-over-memory score ratio CS/MS over positions of ``space`` (DQN's roofline
        reward term), sharing the memo of the latest :meth:`position_scorer` of this task and space."""
        out = self._position_outputs(task, space, fresh=False)
        return lambda p: (lambda o: np.maximum(o[:, 1], 0.0) / np.maximum(o[:, 2], 1e-3))(out(p))


