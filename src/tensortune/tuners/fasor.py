"""Fasor (Huang et al., "Fasor: A Fast Tensor Program Optimization Framework for Efficient DNN
Deployment", ICS 2024) as the tuner ``fasor``.

A named composition of :class:`~.model_based.ModelBasedTuner` with Fasor's parts:

1. **Cost model**: the frozen transferable model (``fasor``: the one transferred to this
   machine by ``tensortune fasor transfer`` when there is one, else the shipped one) predicts
   each candidate's latency and its compute- and memory-bound scores.
2. **Start** (:class:`~.fasor_parts.PretunedStart`): the pre-tuned table's exact or most
   Spearman-similar entry above ``tau`` (0.6), else the template default; measured first.
3. **View** (:class:`~.fasor_parts.ShrunkViewMaker`): options pruned, and only the ``n_p``
   knobs the task's sensitivity class moves most are walked.
4. **Explorer**: DQN (pre-trained offline when its weights ship with the model) from the start
   and the best measured config, rewarded by ``phi1 (T_prev - T) + phi2 CS/MS - phi3 #iter`` on
   the model's predictions; the model ranks its ``n_finalists`` (64) and the top ``plan_size``
   (8) are measured.

Modes: ``efficiency`` (phi = 0.35, 0.25, 0.4): one plan, then finished whatever budget is left;
``quality`` (phi = 0.45, 0.35, 0.2): plans until ``patience`` in a row bring no better
measurement, or the budget ends (a task without a Fasor model is tuned by ``fallback`` under the
same rule, in rounds of ``n_finalists`` trials). Ablation switches (Fig. 8): ``primitives`` =
``random`` or ``all``, ``prune`` off, ``start`` off, ``explorer=sa``, ``roofline`` off (phi2 = 0),
and ``cost_model.folder`` of the untransferred model for "no transfer".
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from ..costmodel.fasor import DQN_FILE
from ..explore.dqn import PHI
from ..utils.logs import warn_once
from .fasor_parts import PretunedStart, ShrunkViewMaker
from .model_based import ModelBasedOptions, ModelBasedTuner
from .parts import StopRule

log = logging.getLogger(__name__)

#: Candidates the explorer proposes per plan, and how many of the model's top are measured.
CANDIDATES, VALIDATE = 64, 8
#: Knobs walked (the paper's default n_p, range 5-8).
N_P = 7
#: Pre-tuned start similarity threshold (the paper's tau).
TAU = 0.6
PRIMITIVES = ("sensitivity", "random", "all")


@dataclass(frozen=True)
class FasorOptions(ModelBasedOptions):
    """Fasor's composition (see the module); ``pretuned``: a pre-tuned table file (default: the
    shipped table merged with the user's)."""

    cost_model: str = "fasor"
    explorer: str = "dqn"
    selector: str = "top-k"
    epsilon: float = 0.0
    plan_size: int = VALIDATE
    warmup: int = 0
    n_finalists: int = CANDIDATES
    n_random_pool: int = 0
    transfer: bool | None = False
    patience: int | None = 3
    n_seeds: int | None = 1
    fallback: str = "autotvm"
    mode: str = "efficiency"
    n_p: int = N_P
    primitives: str = "sensitivity"
    prune: bool = True
    start: bool = True
    pretuned: str | None = None
    tau: float = TAU

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [(self.mode in PHI, f"mode must be one of {', '.join(PHI)}"),
                  (self.primitives in PRIMITIVES, f"primitives must be one of {', '.join(PRIMITIVES)}"),
                  (self.n_p >= 1, "n_p must be at least 1"),
                  (self.plan_size <= self.n_finalists, "plan_size must be at most n_finalists"),
                  (0.0 <= self.tau <= 1.0, "tau must lie in [0, 1]")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


class FasorTuner(ModelBasedTuner):
    """Fasor's per-task tuning (see the module)."""

    name = "fasor"
    Options = FasorOptions

    @classmethod
    def check_options(cls, values: Any) -> FasorOptions:
        """The options, the mode's iterations, fallback rounds and DQN reward weights applied."""
        from ..utils.options import make_options

        o = make_options(cls.Options, values, owner=f"tuner {cls.name!r}")
        efficiency = o.mode == "efficiency"
        explorer = dict(o.explorer_options)
        if o.explorer == "dqn":
            phi = tuple(explorer.get("phi", PHI[o.mode]))
            explorer["phi"] = phi if o.roofline else (phi[0], 0.0, phi[2])
        o = dataclasses.replace(o, explorer_options=explorer,
                                iterations=1 if efficiency and o.iterations is None else o.iterations,
                                fallback_trials=o.fallback_trials or (o.plan_size if efficiency else o.n_finalists))
        return super().check_options(o)

    def make_start(self) -> PretunedStart:
        return PretunedStart(self.options.start, self.options.pretuned, self.options.tau)

    def make_view(self) -> ShrunkViewMaker:
        return ShrunkViewMaker(self.options.n_p, self.options.primitives, self.options.prune)

    def make_stop(self) -> StopRule:
        o = self.options
        plans = "one iteration" if o.iterations == 1 else f"{o.iterations} iterations"
        return StopRule(o.iterations, o.patience,
                        iterations_reason=f"{o.mode} mode: {plans}, top {o.plan_size} of {o.n_finalists} validated",
                        patience_reason=f"{o.mode} mode: converged ({o.patience} iterations without a better config)")

    def prepared(self) -> None:
        """The DQN's offline pre-trained weights kept with the model; a note where the shipped
        model was trained on another CPU."""
        from ..costmodel.pretrained import machine_mismatch

        predictor = self.model.predictor_for(self.task)
        if self.model.origin.get(self.task.op) == "shipped":  # type: ignore[attr-defined]
            self.notice = machine_mismatch(predictor, self.task.target_json)
            if self.notice:
                self.notice += "; transfer it with `tensortune fasor transfer`"
                warn_once(log, self.notice)
        folder = predictor.folder
        if self.options.explorer == "dqn" and folder is not None and (folder / DQN_FILE).is_file():
            try:
                self.explorer.load(folder / DQN_FILE)  # type: ignore[union-attr]
            except ValueError as exc:
                log.warning("%s not used (%s)", folder / DQN_FILE, exc)

    @property
    def sensitive(self) -> str:
        """The task's sensitivity class (``compute`` or ``memory``), once prepared."""
        return self.view_part.sensitive  # type: ignore[attr-defined]

    @property
    def status(self) -> str:
        """The model-based line with the start, the class and the view's size."""
        if self.view is None:
            return "fasor: preparing"  # the view is made from the start, when the first plan is
        return (f"fasor {self.options.mode}: start {self.start_part.point.how}, "  # type: ignore[attr-defined]
                f"{self.sensitive}-sensitive, space {self.view.report.get('points')}; {super().status}")

    def search_report(self) -> dict[str, Any]:
        return {**super().search_report(), "mode": self.options.mode, "sensitive": self.sensitive if self.view else "",
                "model": self.model.origin.get(self.task.op, "")}  # type: ignore[attr-defined]


__all__ = ["CANDIDATES", "FasorOptions", "FasorTuner", "N_P", "TAU", "VALIDATE"]
