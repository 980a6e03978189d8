"""Model-based tuning: a cost model + an explorer + a selector, and the plan loop that drives them.

Every plan (``plan_size`` measurements) the tuner

1. refits its cost model on the task's measured candidates (failures labelled 0);
2. asks its explorer for the ``n_finalists`` configs a fast score rates highest (the cost
   model's own position scorer when it has one, else a knob-feature XGBoost model fitted on
   the same data), and adds ``n_random_pool`` random unmeasured configs;
3. rescores those candidates with the cost model and lets its selector pick the plan (the
   selector is wrapped by epsilon-greedy: a share ``epsilon`` of random unmeasured configs);

and each :meth:`ask` takes the next configs of the plan; a batch ends where its plan ends (an
adaptive selector's plan may be shorter than a batch). Before the first fit (``warmup``
trials) candidates are random. With ``iterations`` the tuner is finished after that many
model-guided plans (Chameleon's ``iteration_opt``). With ``transfer`` (on by default when a database holds enough
other tasks' records) a global model, fitted once per tuner on other tasks' records, is added
to the local one (``f = f_global + f_local``) and guides the very first plan.

Each published system is a named composition of this class (``autotvm``: XGBoost, simulated
annealing, diversity; ``chameleon``: PPO and adaptive sampling; ...), declared as an options
dataclass with its paper's defaults. ``model-based`` is the composition by options alone:
``--tuner model-based --tuner-option explorer=random --tuner-option selector=top-k``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..costmodel import COST_MODELS, make_cost_model, model_kind
from ..costmodel.base import CostModel, TaskData
from ..costmodel.xgb import ACQUISITIONS, OBJECTIVES
from ..features import FEATURES
from ..explore import EXPLORERS, Explorer, make_explorer
from ..measure import MeasureResult
from ..select import EPSILON, SELECTOR_WRAPPERS, SELECTORS, SelectContext, Selector, make_selector, wrap_selector
from ..space import Config
from .base import DEFAULT_BATCH_SIZE, Tuner

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: AutoTVM's plan size (measurements between model refits).
PLAN_SIZE = 64
#: Random trials before the first model fit (AutoTVM waits a whole plan; one batch is enough
#: for a ranking model and saves 48 random trials of a small budget).
WARMUP = DEFAULT_BATCH_SIZE
#: Finalists the explorer hands to the cost model, and random configs added to them.
N_FINALISTS = 4 * PLAN_SIZE
N_RANDOM_POOL = 2 * PLAN_SIZE


@dataclass(frozen=True)
class ModelBasedOptions:
    """Settings of a model-based tuner; the defaults are AutoTVM's.

    Parts by registered name, with their own options as dicts (on the command line
    ``explorer.n_chains=32``, ``selector.lam=3``, ``cost_model.max_rounds=100``).
    """

    cost_model: str = "xgb"
    feature: str = "itervar"
    objective: str = "rank"
    acquisition: str | None = None
    cost_model_options: dict[str, Any] = field(default_factory=dict)
    explorer: str = "sa"
    explorer_options: dict[str, Any] = field(default_factory=dict)
    selector: str = "diversity"
    selector_options: dict[str, Any] = field(default_factory=dict)
    epsilon: float = EPSILON
    plan_size: int = PLAN_SIZE
    warmup: int = WARMUP
    n_finalists: int = N_FINALISTS
    n_random_pool: int = N_RANDOM_POOL
    transfer: bool | None = None
    iterations: int | None = None
    cold_filter: bool = False
    cold_filter_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = [(self.cost_model in COST_MODELS, f"cost_model must be one of {', '.join(COST_MODELS)}"),
                  (self.feature in FEATURES, f"feature must be one of {', '.join(FEATURES)}"),
                  (self.objective in OBJECTIVES, f"objective must be one of {', '.join(OBJECTIVES)}"),
                  (self.acquisition is None or self.acquisition in ACQUISITIONS,
                   f"acquisition must be one of {', '.join(ACQUISITIONS)}"),
                  (self.explorer in EXPLORERS, f"explorer must be one of {', '.join(EXPLORERS)}"),
                  (self.selector in SELECTORS, f"selector must be one of {', '.join(SELECTORS)}"),
                  (0.0 <= self.epsilon <= 1.0, "epsilon must lie in [0, 1]"),
                  (self.plan_size >= 1, "plan_size must be at least 1"),
                  (self.warmup >= 0 and self.n_finalists >= 0 and self.n_random_pool >= 0,
                   "warmup, n_finalists and n_random_pool must be at least 0"),
                  (self.iterations is None or self.iterations >= 1, "iterations must be at least 1")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


class ModelBasedTuner(Tuner):
    """The plan loop over a cost model, an explorer and a selector (see the module docstring).

    The parts are made from :attr:`options` by their registered names. ``cost_model``,
    ``explorer`` and ``selector`` given as names are options; given as objects, they are the
    parts themselves (a selector object is used as it is, not wrapped; a cost model object
    cannot take a transfer model, so transfer then stays off).
    """

    name = "model-based"
    Options = ModelBasedOptions

    def __init__(self, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, options: Any = None, *,
                 cost_model: str | CostModel | None = None, explorer: str | Explorer | None = None,
                 selector: str | Selector | None = None, **overrides: Any) -> None:
        parts: dict[str, Any] = {}
        for key, value in (("cost_model", cost_model), ("explorer", explorer), ("selector", selector)):
            if isinstance(value, str):
                overrides[key] = value  # a registered name: an option
            elif value is not None:
                parts[key] = value  # the part itself
        cost_model, explorer, selector = parts.get("cost_model"), parts.get("explorer"), parts.get("selector")
        super().__init__(task, seed, batch_size, start_from_default, options, **overrides)
        o = self.options
        self.own_model = cost_model is None
        self.model: CostModel = cost_model if cost_model is not None else self._new_model(None)
        # the explorer's score: the model's fast scorer, else a knob-feature model of its own
        fast = not o.acquisition and self.model.position_scorer(task) is not None
        self.explore_model: CostModel = self.model if fast else make_cost_model(
            "xgb", feature="knob", objective=o.objective, seed=seed)
        self.explorer: Explorer = explorer if explorer is not None else make_explorer(
            o.explorer, self.space, seed=seed, options=o.explorer_options)
        self.selector: Selector = selector if selector is not None else wrap_selector(
            "epsilon-greedy", make_selector(o.selector, o.selector_options), {"epsilon": o.epsilon})
        if o.cold_filter:  # Trimmer's filter sees every proposed candidate, epsilon's random ones too
            self.selector = wrap_selector("cold-filter", self.selector, o.cold_filter_options)
        self.global_model: CostModel | None = None
        self.transfer_tried = False  # transfer is fitted once per tuner, in its first session with a database
        self.data = TaskData(task)
        self.plan: list[Config] = []
        #: sizes of the model-guided plans made (an adaptive selector's batch sizes)
        self.plan_sizes: list[int] = []
        self.fits = 0
        self.fit_at = -1  # data size at the last fit
        self.notice = ""  # one-line transfer status for progress output
        self.timings: dict[str, float] = {"fit": 0.0, "explore": 0.0, "rescore": 0.0, "select": 0.0,
                                          "transfer": 0.0}

    @classmethod
    def check_options(cls, values: Any) -> ModelBasedOptions:
        """The options checked, the parts' own options included (against the explorer's,
        selector's and cost model's ``Options``)."""
        import dataclasses

        from ..utils.options import make_options

        o = super().check_options(values)
        make_options(EXPLORERS.get(o.explorer).Options, o.explorer_options, owner=f"explorer {o.explorer!r}")
        make_options(SELECTORS.get(o.selector).Options, o.selector_options, owner=f"selector {o.selector!r}")
        make_options(SELECTOR_WRAPPERS.get("cold-filter").Options, o.cold_filter_options,
                     owner="selector wrapper 'cold-filter'")
        kind = model_kind(o.cost_model, o.acquisition)
        checked = make_options(COST_MODELS.get(kind).Options, o.cost_model_options, owner=f"cost model {kind!r}")
        return dataclasses.replace(o, cost_model_options={k: getattr(checked, k) for k in o.cost_model_options})

    def _new_model(self, base: CostModel | None) -> CostModel:
        o = self.options
        return make_cost_model(o.cost_model, feature=o.feature, objective=o.objective, seed=self.seed,
                               acquisition=o.acquisition, base=base, options=o.cost_model_options)

    # ------------------------------------------------------------ learning
    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        super().update(configs, results)
        for c, r in zip(configs, results):
            self.data.configs.append(c)
            self.data.costs.append(r.cost if r.ok else float("inf"))

    def _need_plan(self) -> bool:
        n = len(self.data)
        if self.fit_at < 0:  # no plan made yet
            return n >= self.options.warmup or self.global_model is not None
        return not self.plan or n - self.fit_at >= self.options.plan_size

    @property
    def rescores(self) -> bool:
        """Whether the plan's candidates are rescored by the cost model. An adaptive selector
        clusters them and does not rank them, so with a separate explorer model (the knob-feature
        scorer) the cost model is neither fitted nor asked: the candidates keep the explorer's
        order."""
        return self.explore_model is self.model or not self.selector.adaptive

    def _refit(self) -> None:
        t0 = time.perf_counter()
        if len(self.data) and self.fit_at != len(self.data):
            if self.rescores:
                self.model.fit([self.data])
            if self.explore_model is not self.model:
                self.explore_model.fit([self.data])
            self.fits += 1
        self.fit_at = len(self.data)
        self.timings["fit"] += time.perf_counter() - t0

    def _candidates(self, exclude: set[int]) -> tuple[list[Config], bool]:
        """The explorer's finalists (when the models are fitted) plus random unmeasured configs,
        and whether the explorer was asked (the plan is model-guided)."""
        o = self.options
        finalists: list[Config] = []
        scorer = self.explore_model.position_scorer(self.task) if self.explore_model.fitted and (
            self.explore_model is not self.model or self.model.fitted) else None
        if scorer is not None:
            ranked = sorted((c, i) for i, c in enumerate(self.data.costs) if c < float("inf"))
            seeds = [self.data.configs[i].index for _, i in ranked]
            idx = self.explorer.find_maximums(scorer, o.n_finalists, exclude=exclude, seeds=seeds)
            finalists = [self.space.get(int(i)) for i in idx]
        taken = exclude | {c.index for c in finalists}
        n_random = o.n_random_pool if finalists else o.n_random_pool + o.n_finalists
        return finalists + self.space.sample(self.rng, n_random, exclude=taken), scorer is not None

    def _make_plan(self) -> None:
        self._refit()
        exclude = set(self.visited)
        t0 = time.perf_counter()
        candidates, guided = self._candidates(exclude)
        self.timings["explore"] += time.perf_counter() - t0
        if not candidates:
            self.plan = []
            return
        t0 = time.perf_counter()
        if self.rescores and self.model.fitted:
            scores = self.model.predict(self.task, candidates)
        elif guided:  # the explorer's order (best first), random configs after it
            scores = -np.arange(len(candidates), dtype=np.float64)
        else:
            scores = np.zeros(len(candidates))
        self.timings["rescore"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        context = SelectContext(self.space, self.rng, exclude, self.task, self.data)
        self.plan = self.selector(candidates, scores, self.options.plan_size, context)
        self.timings["select"] += time.perf_counter() - t0
        if guided or self.model.fitted:
            self.plan_sizes.append(len(self.plan))

    def next_batch(self, n: int) -> list[Config]:
        iterations = self.options.iterations
        if self._need_plan():
            if iterations is not None and len(self.plan_sizes) >= iterations:
                self.finished = f"{iterations} iterations"
                return []
            self._make_plan()
        out: list[Config] = []
        while self.plan and len(out) < n:
            c = self.plan.pop(0)
            if c.index not in self.visited:
                out.append(c)
        if not out:  # before the first model, or no plan to be had: random unmeasured configs
            out = self.space.sample(self.rng, n, exclude=set(self.visited))
        return out

    # ------------------------------------------------------------ transfer learning
    def begin(self, database: Any) -> None:
        """A session with a database starts: fit the transfer model, once per tuner (unless
        ``transfer`` is False). A tuner tuned again keeps its models, with or without transfer."""
        if self.options.transfer is not False and not self.transfer_tried:
            self.enable_transfer(database)
        self.selector.begin(database, self.seed)  # the cold filter trains its network on the database

    def enable_transfer(self, database: Any) -> bool:
        """Fit the global model from ``database``; on too little history (or a cost model handed
        in) set :attr:`notice` and return False (tuning goes on without transfer). Marks the
        tuner's transfer as tried."""
        from ..costmodel.transfer import fit_global_model

        self.transfer_tried = True
        if not self.own_model:
            self.notice = "no transfer (the cost model was given)"
            return False
        t0 = time.perf_counter()
        model, self.notice = fit_global_model(database, self.task, objective=self.options.objective, seed=self.seed)
        self.timings["transfer"] += time.perf_counter() - t0
        if model is None:
            return False
        self.global_model = model
        self.model = self._new_model(model)
        return True

    def search_report(self) -> dict[str, Any]:
        """Where the tuner's own time went and what its parts did, for benchmarks: seconds of
        fitting, exploring, rescoring and selecting; the explorer's effort (its ``stats``:
        searches, steps, configs scored); the model-guided plans' sizes; the model fits; and
        the adaptive selector's k per plan when it has one."""
        return {"timings": dict(self.timings), "explorer": self.explorer.name,
                "explorer_stats": dict(self.explorer.stats), "selector": self.selector.innermost.name,
                "plan_sizes": list(self.plan_sizes), "fits": self.fits, "finished": self.finished,
                **self.selector.report()}

    @property
    def status(self) -> str:
        """Cost model, objective, features and transfer in one line (and the iteration, when
        the tuner counts them)."""
        o = self.options
        model = f"{o.cost_model}/{o.objective}/{getattr(self.model, 'feature', o.feature)}"
        line = f"{model}, " + (self.notice or "no transfer")
        if self.selector.notice:
            line += f", {self.selector.notice}"
        if o.iterations is not None:
            line += f", iteration {len(self.plan_sizes)}/{o.iterations}"
        return line
