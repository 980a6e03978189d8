"""AutoTVM (Chen et al., "Learning to Optimize Tensor Programs", NeurIPS 2018) as the tuner ``autotvm``.

A named composition of :class:`~.model_based.ModelBasedTuner` with AutoTVM's parts and
defaults: an XGBoost rank model on loop-AST ("itervar") features, parallel simulated annealing
(persistent chains) whose energy is a cheap knob-feature XGBoost model, diversity-aware
selection from the top ``2 x plan_size`` with 5% epsilon-greedy, a refit every 64 trials,
and transfer learning from other tasks' records when the database has them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .model_based import N_FINALISTS, N_RANDOM_POOL, PLAN_SIZE, WARMUP, ModelBasedOptions, ModelBasedTuner


@dataclass(frozen=True)
class AutoTVMOptions(ModelBasedOptions):
    """AutoTVM's composition: the defaults of :class:`ModelBasedOptions` (xgb / itervar / rank,
    explorer ``sa``, selector ``diversity``, epsilon 0.05, plan 64)."""


class AutoTVMTuner(ModelBasedTuner):
    """Cost-model-guided search: XGBoost (or TreeGRU) + simulated annealing + diversity + epsilon-greedy."""

    name = "autotvm"
    Options = AutoTVMOptions


__all__ = ["AutoTVMOptions", "AutoTVMTuner", "N_FINALISTS", "N_RANDOM_POOL", "PLAN_SIZE", "WARMUP"]
