"""Chameleon (Ahn et al., "Chameleon: Adaptive Code Optimization for Expedited Deep Neural Network
Compilation", ICLR 2020) as the tuner ``chameleon``.

A named composition of :class:`~.model_based.ModelBasedTuner`: an XGBoost cost model with the
regression loss (the paper's setting), the PPO explorer ``ppo`` (adaptive exploration, over the
knob-feature scorer the plan loop gives every explorer) and the selector ``adaptive``
(k-means adaptive sampling with sample synthesis), no epsilon-greedy share, and no random
configs added to the explorer's candidates (they are what the clustering summarises), and no
transfer learning (the paper's comparisons are from cold starts; ``transfer=true`` turns it
on). Adaptive sampling clusters the explorer's candidates without ranking them, so the plan
loop's knob-feature XGBoost model, which scores the PPO rewards, is the only model fitted. It is
finished after ``iterations`` = 16 model-guided plans (Table 7's ``iteration_opt``), or earlier
at the trial or time budget.

The paper's ablation is one option away, ``variant``:

* ``sa-greedy``: simulated annealing + the ``plan_size`` best (top-k);
* ``sa-diversity``: simulated annealing + diversity-aware selection + 5% epsilon-greedy, i.e.
  today's ``autotvm`` composition (with Chameleon's regression loss);
* ``ppo-greedy``: PPO + top-k;
* ``sa-adaptive``: simulated annealing + adaptive sampling;
* ``ppo-adaptive``: PPO + adaptive sampling (``chameleon`` itself).

A variant sets the explorer, the selector and epsilon; giving one of those as well is refused.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .model_based import ModelBasedOptions, ModelBasedTuner

#: Table 7's iteration_opt.
ITERATIONS = 16
#: The ablation's compositions: explorer, selector, epsilon.
VARIANTS: dict[str, tuple[str, str, float]] = {
    "sa-greedy": ("sa", "top-k", 0.0),
    "sa-diversity": ("sa", "diversity", 0.05),
    "ppo-greedy": ("ppo", "top-k", 0.0),
    "sa-adaptive": ("sa", "adaptive", 0.0),
    "ppo-adaptive": ("ppo", "adaptive", 0.0),
}


@dataclass(frozen=True)
class ChameleonOptions(ModelBasedOptions):
    """Chameleon's composition: xgb with the regression loss, explorer ``ppo``, selector
    ``adaptive``, epsilon 0, no random pool, 16 iterations, no transfer; ``variant`` one of
    :data:`VARIANTS`."""

    objective: str = "reg"
    explorer: str = "ppo"
    selector: str = "adaptive"
    epsilon: float = 0.0
    n_random_pool: int = 0
    iterations: int | None = ITERATIONS
    transfer: bool | None = False
    variant: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.variant is not None and self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}")


class ChameleonTuner(ModelBasedTuner):
    """PPO exploration + adaptive sampling over an XGBoost regression model (module docstring)."""

    name = "chameleon"
    Options = ChameleonOptions

    @classmethod
    def check_options(cls, values: Any) -> ChameleonOptions:
        """The options, a ``variant`` expanded into its explorer, selector and epsilon first (so
        the explorer's own options are checked against the variant's explorer)."""
        from ..utils.options import OptionError, make_options

        o = make_options(ChameleonOptions, values, owner=f"tuner {cls.name!r}")
        if o.variant is not None:
            base = ChameleonOptions()
            given = [f for f in ("explorer", "selector", "epsilon") if getattr(o, f) != getattr(base, f)]
            if given:
                raise OptionError(f"variant {o.variant!r} sets the explorer, selector and epsilon; "
                                  f"drop {', '.join(given)}")
            explorer, selector, epsilon = VARIANTS[o.variant]
            o = dataclasses.replace(o, explorer=explorer, selector=selector, epsilon=epsilon)
        return super().check_options(o)


__all__ = ["ChameleonOptions", "ChameleonTuner", "ITERATIONS", "VARIANTS"]
