"""The cost-model interface: fit on measured candidates, score unmeasured ones.

Scores are "higher is faster" and only their order matters to explorers and selectors.
Training labels are per-task normalised throughputs: ``(1/cost) / max(1/cost)`` over the
task's successful trials, and 0 for every failed candidate, so a failure never teaches a
model that it is fast.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..space import Config, ConfigSpace

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


@dataclass
class TaskData:
    """Measured candidates of one task: ``costs`` in seconds, ``inf`` for failures."""

    task: Task
    configs: list[Config] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)

    def labels(self) -> np.ndarray:
        """Normalised throughput in [0, 1]; failures are 0."""
        thr = np.array([1.0 / c if c > 0 and math.isfinite(c) else 0.0 for c in self.costs], dtype=np.float64)
        top = thr.max() if len(thr) else 0.0
        return (thr / top if top > 0 else thr).astype(np.float32)

    def __len__(self) -> int:
        return len(self.configs)


@dataclass(frozen=True)
class NoOptions:
    """A cost model without settings of its own."""


class CostModel(ABC):
    """Learned score of candidates. ``fit`` replaces what the model knew before.

    A registered model declares its settings as :attr:`Options` (a frozen dataclass; a tuner's
    ``cost_model.KEY=VALUE``) and is built by :meth:`create` from them and the tuner's own choices.
    """

    name: str = ""
    #: whether :meth:`fit` learns from measurements; a frozen model (pre-trained, never refitted)
    #: says False, and a tuner then plans without refitting it
    learns: bool = True
    #: the model's settings; the tuner's choices (features, objective, seed, acquisition, the
    #: transfer model to learn on top of) are not among them
    Options: type = NoOptions

    @classmethod
    def create(cls, options: Any, *, feature: str, objective: str, seed: int, acquisition: str | None,
               base: CostModel | None) -> CostModel:
        """The model with ``options`` (an instance of :attr:`Options`) and a tuner's choices."""
        raise NotImplementedError(f"cost model {cls.name!r} is not made by a tuner")

    @abstractmethod
    def fit(self, data: Sequence[TaskData]) -> None:
        """Train on one or more tasks' measured candidates (each task is its own rank group)."""

    @abstractmethod
    def predict(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """Scores of ``configs`` (float64, higher = predicted faster)."""

    def predict_dist(self, task: Task, configs: Sequence[Config]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the score; single models have no spread."""
        mean = self.predict(task, configs)
        return mean, np.zeros_like(mean)

    @property
    def fitted(self) -> bool:
        """True once :meth:`fit` has seen enough data to predict."""
        return True

    def position_scorer(self, task: Task, space: ConfigSpace | None = None
                        ) -> Callable[[np.ndarray], np.ndarray] | None:
        """An optional fast scorer of ``task``'s configs given as knob positions ``[n, n_knobs]``
        (no Config objects built), for explorers that score tens of thousands of configs; None
        when the model has none (a tuner then explores with a knob-feature model of its own).
        ``space``: a view of ``task.space`` (Fasor's shrunk space) whose positions are scored
        instead; a model that cannot score a view returns None for it."""
        return None

    def roofline_scorer(self, task: Task, space: ConfigSpace | None = None
                        ) -> Callable[[np.ndarray], np.ndarray] | None:
        """An optional second score over positions: the predicted compute-over-memory ratio that
        a roofline-shaped reward reads (Fasor's DQN); None when the model predicts none."""
        return None

    def covers(self, task: Task) -> bool:
        """Whether the model can score ``task`` (a pre-trained model has models of some ops only)."""
        return True

    def describe(self, task: Task) -> str:
        """One line on the model as it scores ``task``, for progress output."""
        return self.name

    def save(self, path: str | Path) -> None:
        """Write the model to ``path`` (JSON / safetensors-style formats, never pickle)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be saved")

    def load(self, path: str | Path) -> None:
        """Read a model written by :meth:`save`."""
        raise NotImplementedError(f"{type(self).__name__} cannot be loaded")
