"""Cost models: XGBoost (rank / regression, bootstrap ensembles) and a TreeGRU over the loop AST.

``make_cost_model("xgb" | "xgb-ensemble" | "treegru", ...)`` builds one by short name.
"""
from __future__ import annotations

from typing import Any

from ..registry import Registry
from .base import CostModel, TaskData

#: Cost models by name (``"module:Class"``, imported on first use: XGBoost and PyTorch load
#: only with the model that needs them). A new model subclasses :class:`CostModel`, is added
#: here and to :func:`make_cost_model`, and the contract test (``tests/costmodel/test_costmodel_contract.py``)
#: checks it.
COST_MODELS: Registry = Registry("cost model", {
    "xgb": "tensortune.costmodel.xgb:XGBoostCostModel",
    "xgb-ensemble": "tensortune.costmodel.xgb:BootstrapEnsemble",
    "treegru": "tensortune.costmodel.treegru:TreeGRUCostModel",
})


def make_cost_model(kind: str, feature: str = "itervar", objective: str = "rank", seed: int = 0,
                    acquisition: str | None = None, base: CostModel | None = None, **kwargs: Any) -> CostModel:
    """A cost model by short name.

    ``xgb`` with an ``acquisition`` ("ei", "ucb", "mean") becomes a bootstrap ensemble;
    ``base`` (a fitted global model) makes an XGBoost model learn on top of its margin.
    ``treegru`` reads the loop AST itself (``feature`` is ignored) and takes no base model.
    """
    from .xgb import BootstrapEnsemble, XGBoostCostModel

    if kind == "xgb" and acquisition is None:
        return XGBoostCostModel(feature, objective, seed, base=base, **kwargs)
    if kind in ("xgb", "xgb-ensemble"):
        return BootstrapEnsemble(feature, objective if kind == "xgb-ensemble" else "reg", seed,
                                 acquisition=acquisition or "ei", base=base, **kwargs)
    if kind == "treegru":
        if base is not None:
            raise ValueError("the treegru model cannot learn on top of a global model; use xgb for transfer")
        from .treegru import TreeGRUCostModel

        return TreeGRUCostModel(loss=objective, seed=seed, **kwargs)
    raise ValueError(f"unknown cost model {kind!r}; known: {', '.join(COST_MODELS.names())}")


__all__ = ["COST_MODELS", "CostModel", "TaskData", "make_cost_model"]
