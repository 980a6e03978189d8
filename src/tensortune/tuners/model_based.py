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

A frozen cost model (one that does not learn from measurements, ``learns = False``: One-Shot's
predictor, Fasor's model) is never refitted; its first plan depends on the seed and the starts
alone (no measured config excluded or seeded), so a resumed run finds the same plan and
measures only what its database lacks. With ``distill`` the explorer scores with a knob-feature
surrogate fitted to the frozen model's scores of that many random configs, and those configs
join the candidates. Injected parts (:mod:`.parts`): a start provider (configs measured first
and seeded), a view maker (the part of the space the explorer walks), a stop rule
(``iterations``, ``patience``); on a task a frozen model does not cover, :meth:`create` returns
a :class:`~.parts.Fallback` to the ``fallback`` tuner.

Each published system is a named composition of this class (``autotvm``: XGBoost, simulated
annealing, diversity; ``chameleon``: PPO and adaptive sampling; ...), declared as an options
dataclass with its paper's defaults. ``model-based`` is the composition by options alone:
``--tuner model-based --option explorer=random --option selector=top-k``.
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
from .parts import Fallback, FullView, PartContext, StartProvider, StopRule, View, ViewMaker

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
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
    ``explorer.n_chains=32``, ``selector.lam=3``, ``cost_model.max_rounds=100``). The loop
    ends by design after ``iterations`` model-guided plans or ``patience`` plans in a row with
    no better measurement; ``n_seeds``: measured configs (best first) handed to the explorer as
    seeds (None: all); ``distill``, ``roofline``: see the module and the explorer;
    ``fallback``: the tuner for tasks a frozen cost model does not cover ("" refuses them),
    in rounds of ``fallback_trials`` trials (default ``plan_size``) under the same stop rule.
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
    patience: int | None = None
    n_seeds: int | None = None
    distill: int = 0
    roofline: bool = True
    fallback: str = ""
    fallback_trials: int | None = None
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
                  (self.iterations is None or self.iterations >= 1, "iterations must be at least 1"),
                  (self.patience is None or self.patience >= 1, "patience must be at least 1"),
                  (self.n_seeds is None or self.n_seeds >= 0, "n_seeds must be at least 0"),
                  (self.distill >= 0, "distill must be at least 0"),
                  (self.fallback_trials is None or self.fallback_trials >= 1, "fallback_trials must be at least 1")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)
        if self.fallback:
            from . import TUNERS

            if self.fallback not in TUNERS:
                raise ValueError(f"fallback must be \"\" or one of {', '.join(TUNERS)}")


class ModelBasedTuner(Tuner):
    """The plan loop over a cost model, an explorer and a selector (see the module docstring).

    The parts are made from :attr:`options` by their registered names. ``cost_model``,
    ``explorer`` and ``selector`` given as names are options; given as objects, they are the
    parts themselves (a selector object is used as it is, not wrapped; a cost model object
    cannot take a transfer model, so transfer then stays off). ``start``, ``view`` and ``stop``
    (:mod:`.parts`) default to :meth:`make_start`, :meth:`make_view` and :meth:`make_stop`,
    which a composition overrides.
    """

    name = "model-based"
    Options = ModelBasedOptions

    def __init__(self, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, options: Any = None, *,
                 cost_model: str | CostModel | None = None, explorer: str | Explorer | None = None,
                 selector: str | Selector | None = None, start: StartProvider | None = None,
                 view: ViewMaker | None = None, stop: StopRule | None = None, **overrides: Any) -> None:
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
        #: whether the cost model learns from measurements (a frozen one is never refitted)
        self.learns = self.model.learns
        # the explorer's score: the model's fast scorer, else (or to distill a frozen model) a
        # knob-feature model of its own
        fast = not o.acquisition and self.model.position_scorer(task) is not None and not (
            o.distill and not self.learns)
        self.explore_model: CostModel = self.model if fast else make_cost_model(
            "xgb", feature="knob", objective=o.objective if self.learns else "rank", seed=seed)
        self.explorer: Explorer | None = explorer  # made on the view, when the first plan is
        self.selector: Selector = selector if selector is not None else wrap_selector(
            "epsilon-greedy", make_selector(o.selector, o.selector_options), {"epsilon": o.epsilon})
        if o.cold_filter:  # Trimmer's filter sees every proposed candidate, epsilon's random ones too
            self.selector = wrap_selector("cold-filter", self.selector, o.cold_filter_options)
        self.start_part = start if start is not None else self.make_start()
        self.view_part = view if view is not None else self.make_view()
        self.stop = stop if stop is not None else self.make_stop()
        self.starts: list[Config] = []
        self.measure_first: list[Config] = []
        self.view: View | None = None
        self._prepared = False
        if not self.view_part.needs_starts:
            self._make_view(PartContext(task, self.model, self.rng))
        self.global_model: CostModel | None = None
        self.transfer_tried = False  # transfer is fitted once per tuner, in its first session with a database
        self.data = TaskData(task)
        self.plan: list[Config] = []
        #: the latest plan as it was made (the configs still to measure are :attr:`plan`)
        self.last_plan: list[Config] = []
        #: sizes of the model-guided plans made (an adaptive selector's batch sizes)
        self.plan_sizes: list[int] = []
        self.fits = 0
        self.fit_at = -1  # data size at the last fit
        self.notice = ""  # one-line transfer status for progress output
        self.timings: dict[str, float] = {"prepare": 0.0, "fit": 0.0, "explore": 0.0, "rescore": 0.0,
                                          "select": 0.0, "transfer": 0.0}

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
        if o.fallback == cls.name:
            raise ValueError(f"fallback must be another tuner than {cls.name!r}")
        return dataclasses.replace(o, cost_model_options={k: getattr(checked, k) for k in o.cost_model_options})

    @classmethod
    def create(cls, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE, start_from_default: bool = True,
               options: Any = None, **overrides: Any) -> Tuner:
        """The tuner for ``task``; on a task its frozen cost model does not cover, a
        :class:`~.parts.Fallback` to the ``fallback`` tuner (when there is one; else the
        tuner, which says what is missing when it first asks its model)."""
        from ..utils.options import make_options

        given = make_options(cls.Options, options, owner=f"tuner {cls.name!r}", **overrides)
        o = cls.check_options(given)  # (the tuner checks ``given`` again: check_options need not be idempotent)
        if COST_MODELS.get(model_kind(o.cost_model, o.acquisition)).learns:
            return cls(task, seed, batch_size, start_from_default, given)
        model = make_cost_model(o.cost_model, seed=seed, options=o.cost_model_options)
        if model.covers(task) or not o.fallback:
            return cls(task, seed, batch_size, start_from_default, given, cost_model=model)
        from . import get_tuner

        fallback = get_tuner(o.fallback, task, seed=seed, batch_size=batch_size, start_from_default=False)
        trials = o.fallback_trials or o.plan_size
        stop = StopRule(o.iterations, o.patience, iterations_reason=f"{o.fallback} spent {trials} trials")
        why = f"no {task.op} {model.name} model: {o.fallback} tunes it in rounds of {trials} trials"
        return Fallback(cls.name, o, fallback, trials, stop, why, task, seed, batch_size, start_from_default)

    # ------------------------------------------------------------ the parts a composition declares
    def make_start(self) -> StartProvider:
        """The start provider (none by default)."""
        return StartProvider()

    def make_view(self) -> ViewMaker:
        """The view maker (the whole space by default)."""
        return ViewMaker()

    def make_stop(self) -> StopRule:
        """The stop rule from ``iterations`` and ``patience``."""
        return StopRule(self.options.iterations, self.options.patience)

    def prepare(self) -> None:
        """Once, before the first plan: the starts, the view and the explorer on it."""
        if self._prepared:
            return
        self._prepared = True
        t0 = time.perf_counter()
        context = PartContext(self.task, self.model, self.rng)
        self.starts = context.starts = self.start_part.starts(context)
        default = self.template_default()
        #: the starts measured first (the template default is the session's to measure)
        self.measure_first = [c for c in self.starts if default is None or c.index != default.index]
        if self.view is None:
            self._make_view(context)
        self.prepared()
        self.timings["prepare"] += time.perf_counter() - t0

    def _make_view(self, context: PartContext) -> None:
        self.view = self.view_part.make(context)
        if self.explorer is None:
            o = self.options
            self.explorer = make_explorer(o.explorer, self.view.space, seed=self.seed, options=o.explorer_options)

    def prepared(self) -> None:
        """Called once the view and explorer are made (a composition loads explorer weights here)."""

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
            return n >= self.options.warmup or self.global_model is not None or not self.learns
        return not self.plan or (self.learns and n - self.fit_at >= self.options.plan_size)

    @property
    def rescores(self) -> bool:
        """Whether the plan's candidates are rescored by the cost model. An adaptive selector
        clusters them and does not rank them, so with a separate explorer model (the knob-feature
        scorer) the cost model is neither fitted nor asked: the candidates keep the explorer's
        order."""
        return self.explore_model is self.model or not self.selector.adaptive

    @property
    def iterations(self) -> int:
        """Model-guided plans made."""
        return len(self.plan_sizes)

    @property
    def search_seconds(self) -> float:
        """Seconds the tuner spent searching (preparing, exploring, rescoring, selecting)."""
        return sum(self.timings[k] for k in ("prepare", "explore", "rescore", "select"))

    def _refit(self) -> None:
        t0 = time.perf_counter()
        if self.learns and len(self.data) and self.fit_at != len(self.data):
            if self.rescores:
                self.model.fit([self.data])
            if self.explore_model is not self.model:
                self.explore_model.fit([self.data])
            self.fits += 1
        self.fit_at = len(self.data)
        self.timings["fit"] += time.perf_counter() - t0

    def _seeds(self, first_frozen: bool) -> list[int]:
        """View indices the explorer may start from: the best measured (``n_seeds`` of them; none
        in a frozen model's first plan), then the starts."""
        assert self.view is not None
        ranked = [] if first_frozen else sorted((c, i) for i, c in enumerate(self.data.costs) if c < float("inf"))
        if self.options.n_seeds is not None:
            ranked = ranked[: self.options.n_seeds]
        seeds: list[int] = []
        for c in [self.data.configs[i] for _, i in ranked] + self.starts:
            v = self.view.from_full(c)
            if v is not None and v.index not in seeds:
                seeds.append(v.index)
        return seeds

    def _candidates(self, exclude: set[int]) -> tuple[list[Config], bool, np.ndarray | None]:
        """The explorer's finalists (when the models are fitted) plus random unmeasured configs,
        whether the explorer was asked (the plan is model-guided), and the candidates' scores
        when they are known already (a distilled frozen model's)."""
        o = self.options
        assert self.view is not None and self.explorer is not None
        if o.distill and not self.learns:
            return self._distilled(exclude)
        view = self.view
        first_frozen = not self.learns and not self.plan_sizes
        search_exclude = set() if first_frozen else exclude
        finalists: list[Config] = []
        space = None if isinstance(view, FullView) else view.space
        scorer = self.explore_model.position_scorer(self.task, space) if self.explore_model.fitted and (
            self.explore_model is not self.model or self.model.fitted) else None
        if scorer is not None:
            self.explorer.set_roofline(self.model.roofline_scorer(self.task, space) if o.roofline else None)
            view_exclude = search_exclude if space is None else {
                v.index for i in search_exclude if (v := view.from_full(self.space.get(i))) is not None}
            idx = self.explorer.find_maximums(scorer, o.n_finalists, exclude=view_exclude,
                                              seeds=self._seeds(first_frozen))
            found = (view.to_full(view.space.get(int(i))) for i in idx)
            finalists = [c for c in found if c.index not in search_exclude]
        taken = exclude | {c.index for c in finalists}
        n_random = o.n_random_pool if finalists else o.n_random_pool + o.n_finalists
        return finalists + self.space.sample(self.rng, n_random, exclude=taken), scorer is not None, None

    def _distilled(self, exclude: set[int]) -> tuple[list[Config], bool, np.ndarray | None]:
        """A frozen model's candidates through a surrogate: ``distill`` random configs scored by
        the model fit an XGBoost rank model on knob values (microseconds per config, where a
        pre-trained predictor's curve features cost milliseconds); the explorer runs on it and
        its ``n_finalists`` join the sample; all are scored by the model itself."""
        o = self.options
        assert self.explorer is not None
        first = not self.plan_sizes
        sample = self.space.sample(self.rng, o.distill, exclude=None if first else exclude)
        scores = self.model.predict(self.task, sample)
        if len(sample) >= len(self.space) or not sample:  # the whole space is scored: nothing to search
            return sample, bool(sample), scores
        # rank labels from the model's scores (any increasing map of them will do)
        self.explore_model.fit([TaskData(self.task, sample, list(1.0 / (scores - scores.min() + 1e-3)))])
        idx = self.explorer.find_maximums(self.explore_model.position_scorer(self.task), o.n_finalists,
                                          exclude=None if first else exclude, seeds=self._seeds(first))
        seen = {c.index for c in sample}
        extra = [self.space.get(int(i)) for i in idx if int(i) not in seen]
        return sample + extra, True, np.concatenate([scores, self.model.predict(self.task, extra)])

    def _make_plan(self) -> None:
        self.prepare()
        self._refit()
        exclude = set(self.visited)
        self.stop.begin(self.best_cost)
        t0 = time.perf_counter()
        candidates, guided, scores = self._candidates(exclude)
        self.timings["explore"] += time.perf_counter() - t0
        if not candidates:
            self.plan = []
            if not self.learns:
                self.plan_sizes.append(0)
            return
        t0 = time.perf_counter()
        if scores is None and self.rescores and self.model.fitted:  # (a distilled frozen model's are known)
            scores = self.model.predict(self.task, candidates)
        elif scores is None and guided:  # the explorer's order (best first), random configs after it
            scores = -np.arange(len(candidates), dtype=np.float64)
        elif scores is None:
            scores = np.zeros(len(candidates))
        self.timings["rescore"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        context = SelectContext(self.space, self.rng, exclude, self.task, self.data)
        self.plan = self.selector(candidates, scores, self.options.plan_size, context)
        self.last_plan = list(self.plan)
        self.timings["select"] += time.perf_counter() - t0
        if guided or self.model.fitted:
            self.plan_sizes.append(len(self.plan))

    def _take(self, n: int, out: list[Config]) -> list[Config]:
        """``out`` filled up to ``n`` from the plan's unvisited configs."""
        while self.plan and len(out) < n:
            c = self.plan.pop(0)
            if c.index not in self.visited and all(c.index != o.index for o in out):
                out.append(c)
        return out

    def next_batch(self, n: int) -> list[Config]:
        if self.finished:
            return []
        if not self.learns:
            return self._frozen_batch(n)
        if self._need_plan():
            reason = self.stop.reason(self.best_cost, len(self.plan_sizes))
            if reason:
                self.finished = reason
                return []
            self._make_plan()
        out = self._take(n, [])
        if not out:  # before the first model, or no plan to be had: random unmeasured configs
            out = self.space.sample(self.rng, n, exclude=set(self.visited))
        return out

    def _frozen_batch(self, n: int) -> list[Config]:
        """A frozen model's batch: the unmeasured starts, then the current plan; a plan whose
        configs were all measured makes way for the next (no random configs)."""
        self.prepare()
        out = [c for c in self.measure_first if c.index not in self.visited][:n]
        while len(out) < n:
            if self._need_plan():
                if out and self.plan_sizes:
                    break  # the last plan's configs are measured before the next is made
                reason = self.stop.reason(self.best_cost, len(self.plan_sizes))
                if reason:
                    self.finished = reason
                    break
                self._make_plan()
                if not self.plan:
                    self.finished = "the explorer found no unmeasured candidate"
                    break
            self._take(n, out)
        return out

    # ------------------------------------------------------------ transfer learning
    def begin(self, database: Database) -> None:
        """A session with a database starts: fit the transfer model, once per tuner (unless
        ``transfer`` is False). A tuner tuned again keeps its models, with or without transfer."""
        if self.options.transfer is not False and not self.transfer_tried:
            self.enable_transfer(database)
        self.selector.begin(database, self.seed)  # the cold filter trains its network on the database

    def enable_transfer(self, database: Database) -> bool:
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
        preparing, fitting, exploring, rescoring and selecting; the explorer's effort (its
        ``stats``: searches, steps, configs scored); the model-guided plans' sizes; the model
        fits; the start provider's and the view's reports; and the adaptive selector's k per
        plan when it has one."""
        explorer = self.explorer
        return {"timings": dict(self.timings), "explorer": explorer.name if explorer else self.options.explorer,
                "explorer_stats": dict(explorer.stats) if explorer else {}, "selector": self.selector.innermost.name,
                "plan_sizes": list(self.plan_sizes), "fits": self.fits, "finished": self.finished,
                **self.start_part.report(),
                **({"view": dict(self.view.report)} if self.view and self.view.report else {}),
                **self.selector.report()}

    @property
    def status(self) -> str:
        """Cost model, objective, features and transfer in one line (and the iteration, when
        the tuner counts them)."""
        o = self.options
        if not self.learns:
            if not self._prepared:
                return f"{self.name}: {o.explorer} search pending"
            line = f"{self.model.describe(self.task)}, {o.explorer} search {self.search_seconds:.1f} s, " \
                   f"{self.iterations} plan(s)"
            return f"{line}; {self.notice}" if self.notice else line
        model = f"{o.cost_model}/{o.objective}/{getattr(self.model, 'feature', o.feature)}"
        line = f"{model}, " + (self.notice or "no transfer")
        if self.selector.notice:
            line += f", {self.selector.notice}"
        if o.iterations is not None:
            line += f", iteration {len(self.plan_sizes)}/{o.iterations}"
        return line
