"""One-Shot Tuner (Ryu et al., CC 2022): one search over a pre-trained predictor, one validation.

The predictor for the task's op (:class:`~tensortune.costmodel.pretrained.PretrainedCostModel`,
trained once by ``tensortune predictor train`` on a dataset from ``tensortune dataset``) guides
a single search, simulated annealing (512 chains, at most 160 steps, early stop after 50 steps
without a new top config) or a genetic algorithm (population 512, 120 steps, mutation 0.1,
96 elites), the paper's Table 2. Its ``top_k`` (64) best configs are then measured on the
hardware, once each, and the best verified one wins.

The predictor reads each candidate's curve features, which here cost milliseconds per config
(the schedule is applied and its loops analysed), and a 512-chain search visits tens of
thousands. So by default the search runs on a surrogate distilled from the predictor: the
predictor scores ``distill`` (2048) random configs, an XGBoost rank model on knob values is
fitted to its scores, the search runs on that model with the paper's settings, and the
predictor itself ranks the search's ``finalists`` (512) together with the scored sample; its
``top_k`` are validated. ``distill=0`` runs the search on the predictor directly (the paper's
form; minutes per task on two cores). Either way nothing measured changes the ranking. Measurements never update the model and
there is no second round: the tuner is finished when the ``top_k`` are measured, whatever trial
budget is left.

The search is seeded, so a resumed run finds the same ``top_k`` and measures only those its
database does not hold yet. The template default is measured first unless
``start_from_default`` is off (as for every tuner: a tuned result is never worse than the
untuned one). Where the predictor was trained on another CPU, the tuner says so in one line and
still works.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..explore import EXPLORERS, make_explorer
from ..measure import MeasureResult
from ..space import Config
from ..utils.logs import warn_once
from .base import DEFAULT_BATCH_SIZE, Tuner

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

log = logging.getLogger(__name__)

#: Candidates validated on the hardware (the paper's top-K).
TOP_K = 64
#: Configs the predictor scores to fit the search's surrogate, and the search's finalists that
#: the predictor rescores (see the module).
DISTILL, FINALISTS = 2048, 512
#: The paper's search settings per explorer (its Table 2); ``search_options`` override them.
SEARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "sa": {"n_chains": 512, "max_steps": 160, "early_stop": 50, "persistent": False},
    "ga": {"population": 512, "steps": 120, "mutation": 0.1, "elites": 96},
}


@dataclass(frozen=True)
class OneShotOptions:
    """``predictor``: a predictor folder, or a folder of per-op predictor folders (default: the
    package's); ``search``: ``sa`` or ``ga`` (or any registered explorer) with
    ``search_options`` over the paper's settings; ``top_k`` configs validated; ``workers``
    processes extracting features (default: one per core); ``distill``: configs the predictor
    scores to fit the search's knob-space surrogate (0: the search scores with the predictor
    itself), whose ``finalists`` best are rescored by the predictor; ``fallback``: the tuner that spends
    the same ``top_k`` trials on a task whose op has no predictor (a model's elementwise or
    pooling functions), "" to refuse such tasks."""

    predictor: str | None = None
    search: str = "sa"
    search_options: dict[str, Any] = field(default_factory=dict)
    top_k: int = TOP_K
    workers: int | None = None
    fallback: str = "autotvm"
    distill: int = DISTILL
    finalists: int = FINALISTS

    def __post_init__(self) -> None:
        if self.search not in EXPLORERS:
            raise ValueError(f"search must be one of {', '.join(EXPLORERS)}")
        if self.top_k < 1:
            raise ValueError("top_k must be at least 1")
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be at least 1")
        from . import TUNERS

        if self.fallback == "oneshot" or (self.fallback and self.fallback not in TUNERS):
            raise ValueError(f"fallback must be \"\" or one of {', '.join(n for n in TUNERS if n != 'oneshot')}")
        if self.distill < 0 or self.finalists < self.top_k:
            raise ValueError("distill must be at least 0 and finalists at least top_k")


class OneShotTuner(Tuner):
    """One search over a pre-trained predictor, then one validation of its top-k (see the module)."""

    name = "oneshot"
    Options = OneShotOptions

    def __init__(self, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, options: Any = None, **overrides: Any) -> None:
        from ..costmodel.pretrained import PretrainedCostModel

        super().__init__(task, seed, batch_size, start_from_default, options, **overrides)
        o = self.options
        self.model = PretrainedCostModel(o.predictor, workers=o.workers)
        search = {**SEARCH_DEFAULTS.get(o.search, {}), **o.search_options}
        self.explorer = make_explorer(o.search, self.space, seed=seed, options=search)
        self.candidates: list[Config] | None = None  # the search's top-k, best first
        self.search_seconds = 0.0
        self.notice = ""
        self.delegate: Tuner | None = None  # the fallback tuner of a task without a predictor
        if o.fallback and not self.model.has_predictor(task):
            from . import get_tuner

            self.delegate = get_tuner(o.fallback, task, seed=seed, batch_size=batch_size, start_from_default=False)
            self.notice = f"no {task.op} predictor: {o.fallback} spends the top_k={o.top_k} trials"

    @classmethod
    def check_options(cls, values: Any) -> OneShotOptions:
        """The options, the search's own options included (checked against its explorer)."""
        from ..utils.options import make_options

        o = super().check_options(values)
        make_options(EXPLORERS.get(o.search).Options, {**SEARCH_DEFAULTS.get(o.search, {}), **o.search_options},
                     owner=f"explorer {o.search!r}")
        return o

    def search(self) -> list[Config]:
        """Run the one search (once; later calls return its result): the ``top_k`` configs the
        predictor rates highest, best first. A task whose op has no predictor gets the
        ``fallback`` tuner instead (an empty list here); with no fallback,
        :class:`~tensortune.learn.PredictorError` is raised."""
        from ..costmodel.pretrained import machine_mismatch

        if self.candidates is None:
            if self.delegate is not None:
                self.candidates = []
                return self.candidates
            predictor = self.model.predictor_for(self.task)
            self.notice = machine_mismatch(predictor, self.task.target_json)
            if self.notice:
                warn_once(log, self.notice)
            t0 = time.perf_counter()
            self.candidates = self._distilled_search() if self.options.distill else [
                self.space.get(int(i)) for i in self.explorer.find_maximums(self.model.position_scorer(self.task),
                                                                            self.options.top_k)]
            self.search_seconds = time.perf_counter() - t0
        return self.candidates

    def _distilled_search(self) -> list[Config]:
        """The search over a knob-space surrogate of the predictor: ``distill`` random configs
        scored by the predictor fit an XGBoost rank model on knob values (microseconds per
        config, where the predictor's curve features cost milliseconds); the explorer runs on
        it with the paper's settings; its ``finalists`` and the scored sample are ranked by the
        predictor itself, and the ``top_k`` of that ranking are the candidates."""
        import numpy as np

        from ..costmodel import make_cost_model
        from ..costmodel.base import TaskData

        o = self.options
        sample = self.space.sample(self.rng, o.distill)
        scores = self.model.predict(self.task, sample)
        if len(sample) >= len(self.space):  # the whole space is scored: nothing to search
            pool, pool_scores = sample, scores
        else:
            surrogate = make_cost_model("xgb", feature="knob", objective="rank", seed=self.seed)
            # rank labels from the predictor's scores (any increasing map of them will do)
            surrogate.fit([TaskData(self.task, sample, list(1.0 / (scores - scores.min() + 1e-3)))])
            idx = self.explorer.find_maximums(surrogate.position_scorer(self.task), o.finalists)
            seen = {c.index for c in sample}
            extra = [self.space.get(int(i)) for i in idx if int(i) not in seen]
            pool = sample + extra
            pool_scores = np.concatenate([scores, self.model.predict(self.task, extra)])
        order = np.argsort(-np.asarray(pool_scores), kind="stable")[: o.top_k]
        return [pool[int(i)] for i in order]

    def next_batch(self, n: int) -> list[Config]:
        candidates = self.search()
        if self.delegate is not None:
            left = self.options.top_k - len(self.visited)
            out = self.delegate.next_batch(min(n, left)) if left > 0 else []
        else:
            out = [c for c in candidates if c.index not in self.visited][:n]
        if not out:
            self.finished = f"validated the top {self.options.top_k}" if self.delegate is None else \
                f"{self.options.fallback} spent the top_k={self.options.top_k} trials (no {self.task.op} predictor)"
        return out

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Bookkeeping only: the predictor is never updated (a fallback tuner learns as it does)."""
        super().update(configs, results)
        if self.delegate is not None:
            self.delegate.update(configs, results)

    @property
    def status(self) -> str:
        """Predictor, search time and any machine notice, in one line."""
        if self.candidates is None:
            return f"oneshot: {self.options.search} search pending"
        if self.delegate is not None:
            return f"oneshot: {self.notice}"
        p = self.model.predictor_for(self.task)
        line = (f"oneshot: {p.kind} predictor of {p.op} ({p.schema.get('dataset', {}).get('tasks', '?')} tasks), "
                f"{self.options.search} search {self.search_seconds:.1f} s, top {len(self.candidates)}")
        return f"{line}; {self.notice}" if self.notice else line
