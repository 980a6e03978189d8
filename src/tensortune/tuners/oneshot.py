"""One-Shot Tuner (Ryu et al., CC 2022) as the tuner ``oneshot``.

A named composition of :class:`~.model_based.ModelBasedTuner`: the frozen pre-trained predictor
(cost model ``pretrained``, trained once by ``tensortune predictor train`` on a dataset from
``tensortune dataset``) guides a single search, simulated annealing (512 chains, at most 160
steps, early stop after 50 steps without a new top config) or a genetic algorithm (population
512, 120 steps, mutation 0.1, 96 elites), the paper's Table 2; its ``plan_size`` (the paper's
top-K, 64) best configs are measured once each, and the tuner is finished after that one plan
whatever trial budget is left. Measurements never update the model.

The predictor reads each candidate's curve features, which cost milliseconds per config, and a
512-chain search visits tens of thousands; so the search runs on a surrogate distilled from the
predictor (``distill`` = 2048 configs it scores; see the plan loop), and the predictor ranks the
search's ``n_finalists`` (512) with the scored sample. ``distill=0`` runs the search on the
predictor itself (the paper's form; minutes per task on two cores). The first plan of a frozen
model depends on the seed alone, so a resumed run finds the same top-K and measures only those
its database lacks. A task whose op has no predictor is tuned by ``fallback`` (autotvm) for the
same ``plan_size`` trials. Where the predictor was trained on another CPU, the tuner says so in
one line and still works.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from ..costmodel.pretrained import machine_mismatch
from ..utils.logs import warn_once
from .model_based import ModelBasedOptions, ModelBasedTuner
from .parts import StopRule

log = logging.getLogger(__name__)

#: Candidates validated on the hardware (the paper's top-K).
TOP_K = 64
#: Configs the predictor scores to fit the search's surrogate, and the search's finalists.
DISTILL, FINALISTS = 2048, 512
#: The paper's search settings per explorer (its Table 2); ``explorer_options`` override them.
SEARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "sa": {"n_chains": 512, "max_steps": 160, "early_stop": 50, "persistent": False},
    "ga": {"population": 512, "steps": 120, "mutation": 0.1, "elites": 96},
}


@dataclass(frozen=True)
class OneShotOptions(ModelBasedOptions):
    """One-Shot's composition: the ``pretrained`` predictor (``cost_model.folder``,
    ``cost_model.workers``), explorer ``sa`` with Table 2's settings, the top ``plan_size`` (64)
    of the ``n_finalists`` and the distilled sample, one plan, no transfer, fallback autotvm."""

    cost_model: str = "pretrained"
    explorer: str = "sa"
    selector: str = "top-k"
    epsilon: float = 0.0
    plan_size: int = TOP_K
    warmup: int = 0
    n_finalists: int = FINALISTS
    n_random_pool: int = 0
    transfer: bool | None = False
    iterations: int | None = 1
    distill: int = DISTILL
    fallback: str = "autotvm"


class OneShotTuner(ModelBasedTuner):
    """One search over a pre-trained predictor, then one validation of its top-K (see the module)."""

    name = "oneshot"
    Options = OneShotOptions

    @classmethod
    def check_options(cls, values: Any) -> OneShotOptions:
        """The options, the paper's search settings under the explorer's own."""
        from ..utils.options import make_options

        o = make_options(cls.Options, values, owner=f"tuner {cls.name!r}")
        o = dataclasses.replace(o, explorer_options={**SEARCH_DEFAULTS.get(o.explorer, {}), **o.explorer_options})
        return super().check_options(o)

    def make_stop(self) -> StopRule:
        o = self.options
        return StopRule(o.iterations, o.patience, iterations_reason=f"validated the top {o.plan_size}")

    def prepared(self) -> None:
        """Say once where the predictor was trained on another CPU."""
        self.notice = machine_mismatch(self.model.predictor_for(self.task), self.task.target_json)
        if self.notice:
            warn_once(log, self.notice)


__all__ = ["DISTILL", "FINALISTS", "OneShotOptions", "OneShotTuner", "SEARCH_DEFAULTS", "TOP_K"]
