"""Tuners by short name: ``get_tuner("random")`` etc."""
from __future__ import annotations

from typing import Any

from .base import DEFAULT_BATCH_SIZE, Tuner, TuneResult
from .autotvm import AutoTVMTuner
from .baselines import GeneticTuner, GridTuner, RandomTuner

TUNERS: dict[str, type[Tuner]] = {t.name: t for t in (RandomTuner, GridTuner, GeneticTuner, AutoTVMTuner)}
#: Tuners that take cost-model options (cost_model, objective, feature, acquisition, transfer).
MODEL_TUNERS = ("autotvm",)


def get_tuner(name: str | type[Tuner], task: Any, **kwargs: Any) -> Tuner:
    """A tuner for ``task`` by short name (or class)."""
    if isinstance(name, type):
        return name(task, **kwargs)
    try:
        cls = TUNERS[name]
    except KeyError:
        raise ValueError(f"unknown tuner {name!r}; known tuners: {', '.join(TUNERS)}") from None
    return cls(task, **kwargs)


__all__ = ["AutoTVMTuner", "DEFAULT_BATCH_SIZE", "MODEL_TUNERS", "GeneticTuner", "GridTuner", "RandomTuner", "TUNERS", "TuneResult", "Tuner", "get_tuner"]
