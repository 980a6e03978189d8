"""Cost models: XGBoost (rank / regression, bootstrap ensembles), a TreeGRU over the loop AST,
and the frozen pre-trained ones (One-Shot's predictor, Fasor's transferable model).

``make_cost_model("xgb" | "xgb-ensemble" | "treegru" | "pretrained" | "fasor", ...)`` builds one
by short name.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..registry import Registry
from .base import CostModel, TaskData

#: Cost models by name (``"module:Class"``, imported on first use: XGBoost and PyTorch load
#: only with the model that needs them). A new model subclasses :class:`CostModel`, is added
#: here with its ``Options`` and ``create``, and the contract test (``tests/costmodel/test_costmodel_contract.py``)
#: checks it.
COST_MODELS: Registry = Registry("cost model", {
    "xgb": "tensortune.costmodel.xgb:XGBoostCostModel",
    "xgb-ensemble": "tensortune.costmodel.xgb:BootstrapEnsemble",
    "treegru": "tensortune.costmodel.treegru:TreeGRUCostModel",
    "pretrained": "tensortune.costmodel.pretrained:PretrainedCostModel",
    "fasor": "tensortune.costmodel.fasor:FasorCostModel",
})


def model_kind(kind: str, acquisition: str | None) -> str:
    """The registered model a tuner's choice names: ``xgb`` with an acquisition is the ensemble."""
    return "xgb-ensemble" if kind == "xgb" and acquisition is not None else kind


def make_cost_model(kind: str, feature: str = "itervar", objective: str = "rank", seed: int = 0,
                    acquisition: str | None = None, base: CostModel | None = None,
                    options: Mapping[str, Any] | None = None, **settings: Any) -> CostModel:
    """A cost model by short name, with its ``options`` (and ``settings``: more of them) checked
    against its ``Options``.

    ``xgb`` with an ``acquisition`` ("ei", "ucb", "mean") becomes a bootstrap ensemble, which
    regresses; ``base`` (a fitted global model) makes an XGBoost model learn on top of its margin.
    ``treegru`` reads the loop AST itself (``feature`` is ignored) and takes no base model.
    """
    from ..utils.options import make_options

    name = model_kind(kind, acquisition)
    if name != kind:
        objective = "reg"
    if name not in COST_MODELS:
        raise ValueError(f"unknown cost model {kind!r}; known: {', '.join(COST_MODELS.names())}")
    cls = COST_MODELS.get(name)
    opts = make_options(cls.Options, {**(options or {}), **settings}, owner=f"cost model {name!r}")
    return cls.create(opts, feature=feature, objective=objective, seed=seed, acquisition=acquisition, base=base)


__all__ = ["COST_MODELS", "CostModel", "TaskData", "make_cost_model", "model_kind"]
