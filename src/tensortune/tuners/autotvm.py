"""AutoTVM (Chen et al., "Learning to Optimize Tensor Programs", NeurIPS 2018) as the tuner ``autotvm``.

Every plan (``plan_size`` measurements, 64 by default) the tuner

1. refits its cost model on the task's measured candidates (failures labelled 0);
2. runs parallel simulated annealing (persistent chains) to find the configs the model
   rates highest. The annealer's energy is a cheap knob-feature XGBoost model fitted on the
   same data, so tens of thousands of configs can be scored per plan; its finalists, plus a
   random pool, are rescored by the rich model (loop-AST features by default);
3. picks the plan by diversity-aware selection from the top ``lam * plan_size`` and mixes
   in ``epsilon`` random unmeasured configs;

and batches are taken from the plan in order. Before the first fit (``warmup`` trials)
candidates are random. With transfer learning a global model, fitted on other tasks'
records in the database on the invariant context-relation features, is added to the local
one (``f = f_global + f_local``) and guides the very first plan.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from ..costmodel import make_cost_model
from ..costmodel.base import CostModel, TaskData
from ..costmodel.xgb import XGBoostCostModel
from ..explore import SimulatedAnnealing
from ..features.knob import KnobTable
from ..measure import MeasureResult
from ..select import DIVERSITY_ALPHA, DIVERSITY_LAMBDA, EPSILON, diversity_select, epsilon_mix, top_k
from ..space import Config
from .base import DEFAULT_BATCH_SIZE, Tuner

#: AutoTVM defaults (plan size = measurements between model refits).
PLAN_SIZE = 64
#: Random trials before the first model fit (AutoTVM waits a whole plan; one batch is enough
#: for a ranking model and saves 48 random trials of a small budget).
WARMUP = DEFAULT_BATCH_SIZE
#: Finalists the annealer hands to the rich model, and random configs added to them.
N_FINALISTS = 4 * PLAN_SIZE
N_RANDOM_POOL = 2 * PLAN_SIZE


class AutoTVMTuner(Tuner):
    """Cost-model-guided search: XGBoost (or TreeGRU) + simulated annealing + diversity + epsilon-greedy."""

    name = "autotvm"

    def __init__(self, task: Any, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, cost_model: str | CostModel = "xgb", feature: str = "itervar",
                 objective: str = "rank", acquisition: str | None = None, plan_size: int = PLAN_SIZE,
                 warmup: int = WARMUP, diversity: bool = True, lam: float = DIVERSITY_LAMBDA,
                 alpha: float = DIVERSITY_ALPHA, epsilon: float = EPSILON, transfer: bool | None = None,
                 n_finalists: int = N_FINALISTS, n_random_pool: int = N_RANDOM_POOL,
                 sa_options: dict[str, Any] | None = None) -> None:
        super().__init__(task, seed, batch_size, start_from_default)
        self.model_kind = cost_model if isinstance(cost_model, str) else cost_model.name
        self.feature, self.objective, self.acquisition = feature, objective, acquisition
        self.global_model: CostModel | None = None
        self.model = (make_cost_model(cost_model, feature=feature, objective=objective, seed=seed,
                                      acquisition=acquisition)
                      if isinstance(cost_model, str) else cost_model)
        # the annealer's energy: knob features, cheap to compute for any positions
        self.cheap = self.model if getattr(self.model, "feature", None) == "knob" and not acquisition else \
            XGBoostCostModel("knob", objective="rank", seed=seed)
        self.table = KnobTable(self.space)
        self.sa = SimulatedAnnealing(self.space, seed=seed, **(sa_options or {}))
        self.plan_size, self.warmup = plan_size, warmup
        self.diversity, self.lam, self.alpha, self.epsilon = diversity, lam, alpha, epsilon
        self.transfer = transfer
        self.transfer_tried = False  # transfer is fitted once per tuner, on its first tune() with a database
        self.n_finalists, self.n_random_pool = n_finalists, n_random_pool
        self.data = TaskData(task)
        self.plan: list[Config] = []
        self.fits = 0
        self.fit_at = -1  # data size at the last fit
        self.notice = ""  # one-line transfer status for progress output
        self.timings: dict[str, float] = {"fit": 0.0, "explore": 0.0, "rescore": 0.0, "select": 0.0,
                                          "transfer": 0.0}

    # ------------------------------------------------------------ learning
    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        super().update(configs, results)
        for c, r in zip(configs, results):
            self.data.configs.append(c)
            self.data.costs.append(r.cost if r.ok else float("inf"))

    def _need_plan(self) -> bool:
        n = len(self.data)
        have_global = self.global_model is not None
        if self.fit_at < 0:  # no plan made yet
            return n >= self.warmup or have_global
        return not self.plan or n - self.fit_at >= self.plan_size

    def _refit(self) -> None:
        t0 = time.perf_counter()
        if len(self.data) and self.fit_at != len(self.data):
            self.model.fit([self.data])
            if self.cheap is not self.model:
                self.cheap.fit([self.data])
            self.fits += 1
        self.fit_at = len(self.data)
        self.timings["fit"] += time.perf_counter() - t0

    def _make_plan(self) -> None:
        self._refit()
        exclude = set(self.visited)
        t0 = time.perf_counter()
        finalists: list[Config] = []
        if self.cheap.fitted and (self.cheap is not self.model or self.model.fitted):
            cheap = self.cheap

            def energy(pos: np.ndarray) -> np.ndarray:
                return cheap.predict_matrix(self.table.encode(pos))

            best_seen = sorted(((c, i) for i, c in enumerate(self.data.costs)), key=lambda t: t[0])
            seeds = [self.data.configs[i].index for c, i in best_seen[: self.sa.n_chains] if c < float("inf")]
            idx = self.sa.find_maximums(energy, self.n_finalists, exclude=exclude, seeds=seeds)
            finalists = [self.space.get(int(i)) for i in idx]
        taken = exclude | {c.index for c in finalists}
        n_random = self.n_random_pool if finalists else self.n_random_pool + self.n_finalists
        finalists += self.space.sample(self.rng, n_random, exclude=taken)
        self.timings["explore"] += time.perf_counter() - t0
        if not finalists:
            self.plan = []
            return
        t0 = time.perf_counter()
        scores = self.model.predict(self.task, finalists) if self.model.fitted else np.zeros(len(finalists))
        self.timings["rescore"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        if self.diversity:
            plan = diversity_select(finalists, scores, self.plan_size, self.space, self.lam, self.alpha)
        else:
            plan = top_k(finalists, scores, self.plan_size)
        self.plan = epsilon_mix(plan, self.space, self.rng, self.epsilon, exclude=exclude)
        self.timings["select"] += time.perf_counter() - t0

    def next_batch(self, n: int) -> list[Config]:
        if self._need_plan():
            self._make_plan()
        out: list[Config] = []
        while self.plan and len(out) < n:
            c = self.plan.pop(0)
            if c.index not in self.visited:
                out.append(c)
        if len(out) < n:  # before the first model, or a short plan: random unmeasured configs
            taken = self.visited | {c.index for c in out}
            out += self.space.sample(self.rng, n - len(out), exclude=taken)
        return out

    # ------------------------------------------------------------ transfer learning
    def tune(self, n_trial: int, measurer: Any, early_stopping: int | None = None,
             time_budget: float | None = None, callbacks: Sequence[Any] = (), database: Any = None) -> Any:
        """The shared loop; with a database (and ``transfer`` not False) a global model is
        first fitted on other tasks' records for the same target, when there are enough. That
        happens on the first call with a database only: a tuner tuned again (a scheduler's next
        round) keeps its models, with or without transfer."""
        if database is not None and self.transfer is not False and not self.transfer_tried:
            self.enable_transfer(database)
        return super().tune(n_trial, measurer, early_stopping, time_budget, callbacks, database)

    def enable_transfer(self, database: Any) -> bool:
        """Fit the global model from ``database``; on too little history set :attr:`notice` and
        return False (tuning goes on without transfer). Marks the tuner's transfer as tried."""
        from ..costmodel.transfer import fit_global_model

        self.transfer_tried = True
        t0 = time.perf_counter()
        model, self.notice = fit_global_model(database, self.task, objective=self.objective, seed=self.seed)
        self.timings["transfer"] += time.perf_counter() - t0
        if model is None:
            return False
        self.global_model = model
        self.model = make_cost_model(self.model_kind, feature=self.feature, objective=self.objective,
                                     seed=self.seed, acquisition=self.acquisition, base=model)
        return True

    @property
    def status(self) -> str:
        """Short description for progress output."""
        model = f"{self.model_kind}/{self.objective}/{getattr(self.model, 'feature', self.feature)}"
        return f"{model}, " + (self.notice or "no transfer")
