"""The Tuner interface: a step API (``ask`` / ``tell``) over ``next_batch`` / ``update``.

A tuner proposes configs and learns from their results; everything around that (budget,
database, confirmation, verification, callbacks) is a :class:`~.session.TuningSession`, which
``Tuner.tune`` runs. A new tuner subclasses :class:`Tuner` (or composes
:class:`~.model_based.ModelBasedTuner`), declares its ``Options`` dataclass, and is added to
the registry in ``tuners/__init__.py``; the contract test (``tests/tuners/test_tuner_contract.py``)
then checks it.
"""
from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..budget import Budget
from ..measure import MeasureResult
from ..space import Config
from ..utils.options import make_options
from .session import CONFIRM_ROUNDS, CONFIRM_TOP, Callback

if TYPE_CHECKING:  # pragma: no cover
    from ..measure import Measurer

#: Default batch size: candidates proposed, built and run per round.
DEFAULT_BATCH_SIZE = 16


@dataclass(frozen=True)
class NoOptions:
    """Options of a tuner without settings of its own."""


@dataclass
class TuneResult:
    """What one ``tune`` call produced."""

    task: Any
    best_config: Config | None
    best_cost: float
    trials_measured: int
    errors: Counter
    history: list[dict[str, float]] = field(default_factory=list)
    stop_reason: str = ""
    verified: bool = False
    best_spread: float = 0.0  # (max - min) / median of the best config's repeats
    tuner_status: str = ""  # model-based tuners: model and transfer in one line
    #: where the best came from: {"from": "this run"} or {"from": "database", "trial_id", "tuner", "timestamp"}
    best_source: dict[str, Any] = field(default_factory=dict)
    #: how every compared cost was measured: target, threads, timing and CPU (a MeasureContext)
    context: Any = None
    #: re-measurements made by this call's confirmation (not in ``trials_measured``)
    confirm_measured: int = 0
    #: the confirmation group the best was chosen from: {"group", "rounds", "configs"} (empty: a
    #: single measurement)
    confirmation: dict[str, Any] = field(default_factory=dict)
    #: what the call cost: wall time, CPU-seconds (tuner, building, running), energy or why not
    #: (a :class:`~tensortune.measure.cost.RunCost`; None for a result made elsewhere)
    cost: Any = None
    #: contention while it measured (:mod:`tensortune.measure.noise`): ``noisy_trials`` (search
    #: trials timed while the machine was busy), ``quiet_spell`` (whether the confirmation waited
    #: for and found one; None: no wait) and ``confirm_noisy`` (a config of its last group timed
    #: while busy in every round)
    noise: dict[str, Any] = field(default_factory=dict)

    @property
    def best_gflops(self) -> float:
        """GFLOP/s of the best config (0 when none succeeded)."""
        return self.task.flops / self.best_cost / 1e9 if self.best_config is not None and self.best_cost < float("inf") else 0.0

    def to_json(self) -> dict[str, Any]:
        """The CLI's machine-readable summary."""
        return {
            "task": self.task.name,
            "workload_key": self.task.workload_key,
            "best_config": self.best_config.to_json()["knobs"] if self.best_config is not None else None,
            "best_latency_ms": self.best_cost * 1e3 if self.best_cost < float("inf") else None,
            "best_gflops": self.best_gflops,
            "trials_measured": self.trials_measured,
            "errors": dict(self.errors),
            "best_spread": self.best_spread,
            "verified": self.verified,
            "best_source": self.best_source or None,
            "measured": self.context.to_json() if self.context is not None else None,
            "stop_reason": self.stop_reason,
            "confirm_measured": self.confirm_measured,
            "confirmation": self.confirmation or None,
            "cost": self.cost.to_json() if self.cost is not None else None,
            "noise": self.noise or None,
        }

    def describe_source(self) -> str:
        """Where the best came from and how it was measured, in one line."""
        if not self.best_source:
            return "no best"
        src = self.best_source
        where = "measured this run" if src["from"] == "this run" else (
            f"stored trial {src['trial_id']} ({src['tuner'] or 'unknown tuner'}, "
            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(src['timestamp']))})")
        if self.confirmation:
            where += (f", median of {self.confirmation['rounds']} confirmation rounds of its top "
                      f"{len(self.confirmation['configs'])} configs")
        return f"{where}; {self.context.describe()}" if self.context is not None else where

    def describe_noise(self) -> str:
        """One line on contention when there was any ("" for a quiet run)."""
        n = self.noise
        if not n or not (n.get("noisy_trials") or n.get("confirm_noisy") or n.get("quiet_spell") is False):
            return ""
        parts = [f"NOISY: {n.get('noisy_trials', 0)} of {self.trials_measured} trials were timed while the "
                 "machine was busy"]
        if n.get("quiet_spell") is False or n.get("confirm_noisy"):
            parts.append("no quiet spell came for the confirmation, so the best is uncertain: run it again "
                         "on a quiet machine")
        elif n.get("quiet_spell"):
            parts.append("the finalists were re-measured in a quiet spell")
        return "; ".join(parts)


class Tuner(ABC):
    """Base of every tuner: subclasses implement :meth:`next_batch` (and may refine :meth:`update`).

    Bookkeeping shared by all: the set of visited config indices (measured in this run or
    found in the database), the best config and cost, and an ``rng`` seeded from ``seed``.
    With ``start_from_default`` the template's default config is measured in the first
    batch (when not measured yet), so a tuned result is never worse than the untuned one.

    A tuner may be tuned again (the schedulers give a task one batch per round to the same
    tuner): it remembers which stored trials it already has, so a later ``tune`` call loads
    only the trials stored since by others. ``confirm_top`` and ``confirm_rounds`` (defaults
    :data:`CONFIRM_TOP`, :data:`CONFIRM_ROUNDS`) size the confirmation at the end of a call.
    """

    name: str = ""
    #: The tuner's settings: a frozen dataclass whose fields and defaults are declared once there.
    Options: type = NoOptions

    def __init__(self, task: Any, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, options: Any = None, **overrides: Any) -> None:
        """``options``: an instance of :attr:`Options` or a mapping of its fields (``key=value``
        text allowed); keyword ``overrides`` of its fields go on top. Unknown keys raise
        :class:`~tensortune.utils.options.OptionError`."""
        self.options = type(self).check_options(make_options(type(self).Options, options, owner=f"tuner {self.name!r}",
                                                             **overrides))
        self.task = task
        self.start_from_default = start_from_default
        self.space = task.space
        self.seed = seed
        self.rng = random.Random(seed)
        self.batch_size = batch_size
        self.visited: set[int] = set()
        self.best_config: Config | None = None
        self.best_cost = float("inf")
        self.best_result: MeasureResult | None = None
        self.confirm_top = CONFIRM_TOP
        self.confirm_rounds = CONFIRM_ROUNDS
        #: ids of the stored trials this tuner has (loaded or written), per database
        self._have_trials: dict[str, set[int]] = {}
        #: confirmation groups this tuner measured
        self._groups_made: set[str] = set()
        self._default: Config | None | bool = False  # the template default (False: not computed yet)
        #: why the tuner has nothing more to propose, when it ends by design (e.g. ``oneshot``
        #: after its one validation); "" means the space is exhausted
        self.finished = ""

    @classmethod
    def check_options(cls, values: Any) -> Any:
        """``values`` as this tuner's :attr:`Options`, every key and value checked (the CLI calls
        this before measuring anything); raises :class:`~tensortune.utils.options.OptionError`."""
        return make_options(cls.Options, values, owner=f"tuner {cls.name!r}")

    # ------------------------------------------------------------ the interface
    @abstractmethod
    def next_batch(self, n: int) -> list[Config]:
        """Up to ``n`` unvisited valid configs to measure next (empty: nothing left)."""

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Learn from measured configs (the base records them as visited and tracks the best).

        A result marked unverified (``extra["verified"] is False``: a stored trial whose output
        was never checked) is learnt from but never becomes the best.
        """
        for c, r in zip(configs, results):
            self.visited.add(c.index)
            if r.ok and r.extra.get("verified") is not False and r.cost < self.best_cost:
                self.best_cost, self.best_config, self.best_result = r.cost, c, r

    def load_history(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Past records of this task (from the database); by default treated like an update."""
        self.update(configs, results)

    # ------------------------------------------------------------ the step API
    def ask(self, n: int) -> list[Config]:
        """Up to ``n`` unvisited configs to measure next: the template's default first (with
        ``start_from_default``, until it is measured), then :meth:`next_batch`'s proposals."""
        first = self._unmeasured_default()
        lead = [first] if first is not None else []
        if n <= len(lead):  # next_batch(0) may mean "no limit" to a tuner (random search sampled the whole space)
            return lead[:max(n, 0)]
        return lead + [c for c in self.next_batch(n - len(lead))
                       if c.index not in self.visited and (first is None or c.index != first.index)]

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """The results of configs :meth:`ask` proposed (in the same order)."""
        self.update(configs, results)

    def begin(self, database: Any) -> None:
        """Called when a session with ``database`` starts, before the history is loaded (a
        model-based tuner fits its transfer model here); nothing by default."""

    @property
    def status(self) -> str:
        """One line on the tuner's state for progress output ("" when it has none)."""
        return ""

    def search_report(self) -> dict[str, Any]:
        """Where the tuner's own time went and what its parts did, for benchmarks (``{}`` for a
        tuner that keeps no account)."""
        return {}

    # ------------------------------------------------------------ the loop
    def tune(self, budget: Budget | int, measurer: Measurer, callbacks: Sequence[Callback] = (),
             database: Any = None) -> TuneResult:
        """Ask, measure and tell until ``budget`` (a :class:`~tensortune.budget.Budget`, or a number
        of trials) is spent: one :class:`~.session.TuningSession` (its ``run`` says what the budget,
        database and confirmation do)."""
        from .session import TuningSession

        return TuningSession(self, measurer, database, callbacks).run(Budget.of(budget))

    def _unmeasured_default(self) -> Config | None:
        """The template's default config, if asked for and not measured yet."""
        make = getattr(self.task, "default_config", None)
        if not self.start_from_default or make is None:
            return None
        if self._default is False:
            try:
                self._default = make()
            except Exception:  # noqa: BLE001 - a template without a usable default: plain search
                self._default = None
        default = self._default
        return None if default is None or default.index in self.visited else default
