"""Tuners by short name: ``get_tuner("autotvm", task, options={"plan_size": 32})``.

The registry imports a tuner's module only when the tuner is asked for, so listing the names
(``tensortune --help``) loads no XGBoost, PyTorch or Ray. A new tuner is a :class:`Tuner`
subclass (a published system: a :class:`~.model_based.ModelBasedTuner` composition with its
own ``Options`` defaults) added to :data:`TUNERS`; the contract test
(``tests/tuners/test_tuner_contract.py``) runs over everything registered.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..registry import Registry
from .base import DEFAULT_BATCH_SIZE, Tuner, TuneResult
from .session import TuningSession

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Tuners by name (``"module:Class"``, imported on first use).
TUNERS: Registry = Registry("tuner", {
    "random": "tensortune.tuners.baselines:RandomTuner",
    "grid": "tensortune.tuners.baselines:GridTuner",
    "genetic": "tensortune.tuners.baselines:GeneticTuner",
    "autotvm": "tensortune.tuners.autotvm:AutoTVMTuner",
    "model-based": "tensortune.tuners.model_based:ModelBasedTuner",
    "oneshot": "tensortune.tuners.oneshot:OneShotTuner",
    "chameleon": "tensortune.tuners.chameleon:ChameleonTuner",
    "trimmer": "tensortune.tuners.trimmer:TrimmerTuner",
    "fasor": "tensortune.tuners.fasor:FasorTuner",
})


def get_tuner(name: str | type[Tuner], task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
              start_from_default: bool = True, options: Mapping[str, Any] | Any = None, **overrides: Any) -> Tuner:
    """A tuner for ``task`` by short name (or class), with its options (a mapping, ``key=value``
    text allowed, or an instance of its ``Options``) and keyword overrides of them."""
    cls = TUNERS.get(name) if isinstance(name, str) else name
    return cls.create(task, seed=seed, batch_size=batch_size, start_from_default=start_from_default, options=options,
                      **overrides)


def tuner_options(name: str) -> type:
    """The options dataclass of the tuner called ``name``."""
    return TUNERS.get(name).Options


def __getattr__(attr: str) -> Any:
    """The tuner classes, loaded on first access (``from tensortune.tuners import AutoTVMTuner``)."""
    classes = {"RandomTuner": "random", "GridTuner": "grid", "GeneticTuner": "genetic", "AutoTVMTuner": "autotvm",
               "ModelBasedTuner": "model-based", "OneShotTuner": "oneshot",
               "ChameleonTuner": "chameleon", "TrimmerTuner": "trimmer", "FasorTuner": "fasor"}
    if attr in classes:
        return TUNERS.get(classes[attr])
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["AutoTVMTuner", "ChameleonTuner", "DEFAULT_BATCH_SIZE", "FasorTuner", "GeneticTuner", "GridTuner", "ModelBasedTuner", "OneShotTuner", "RandomTuner",
           "TUNERS", "TrimmerTuner", "TuneResult", "Tuner", "TuningSession", "get_tuner", "tuner_options"]
