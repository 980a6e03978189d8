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
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ..budget import Budget
from ..measure import MeasureResult
from ..space import Config
from ..utils.options import make_options
from .result import TuneResult  # noqa: F401 - re-exported: tuners.base.TuneResult
from .session import CONFIRM_ROUNDS, CONFIRM_TOP, Callback

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..measure import MeasurerBase
    from ..task import Task

#: Default batch size: candidates proposed, built and run per round.
DEFAULT_BATCH_SIZE = 16


@dataclass(frozen=True)
class NoOptions:
    """Options of a tuner without settings of its own."""


class Tuner(ABC):
    """Base of every tuner: subclasses implement :meth:`next_batch` (and may refine :meth:`update`).

    Bookkeeping shared by all: the set of visited config indices (measured in this run or
    found in the database), the best config and cost, and an ``rng`` seeded from ``seed``.
    With ``start_from_default`` the template's default config is measured in the first
    batch (when not measured yet), so a tuned result is never worse than the untuned one, and
    with it its counterparts in the template's other algorithms
    (:meth:`~tensortune.task.Task.other_algorithm_configs`), so every tuner picks the algorithm
    by measurement, whatever its search would have sampled.

    A tuner may be tuned again (the schedulers give a task one batch per round to the same
    tuner): it remembers which stored trials it already has, so a later ``tune`` call loads
    only the trials stored since by others. ``confirm_top`` and ``confirm_rounds`` (defaults
    :data:`CONFIRM_TOP`, :data:`CONFIRM_ROUNDS`) size the confirmation at the end of a call.
    """

    name: str = ""
    #: The tuner's settings: a frozen dataclass whose fields and defaults are declared once there.
    Options: type = NoOptions

    def __init__(self, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
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
        self._other_algorithms: list[Config] | None = None  # the default's other algorithms (None: not yet)
        #: why the tuner has nothing more to propose, when it ends by design (e.g. ``oneshot``
        #: after its one validation); "" means the space is exhausted
        self.finished = ""

    @classmethod
    def create(cls, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE, start_from_default: bool = True,
               options: Any = None, **overrides: Any) -> Tuner:
        """The tuner for ``task`` (the registry's constructor; a composition may return another
        tuner for a task its parts do not cover, see :class:`~.parts.Fallback`)."""
        return cls(task, seed, batch_size, start_from_default, options, **overrides)

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
        """Up to ``n`` unvisited configs to measure next: the template's default and its
        counterparts in other algorithms first (with ``start_from_default``, until they are
        measured), then :meth:`next_batch`'s proposals."""
        lead = self._unmeasured_starts()
        if n <= len(lead):  # next_batch(0) may mean "no limit" to a tuner (random search sampled the whole space)
            return lead[:max(n, 0)]
        skip = self.visited | {c.index for c in lead}
        return lead + [c for c in self.next_batch(n - len(lead)) if c.index not in skip]

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """The results of configs :meth:`ask` proposed (in the same order)."""
        self.update(configs, results)

    def begin(self, database: Database) -> None:
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
    def tune(self, budget: Budget | int, measurer: MeasurerBase, callbacks: Sequence[Callback] = (),
             database: Database | None = None) -> TuneResult:
        """Ask, measure and tell until ``budget`` (a :class:`~tensortune.budget.Budget`, or a number
        of trials) is spent: one :class:`~.session.TuningSession` (its ``run`` says what the budget,
        database and confirmation do)."""
        from .session import TuningSession

        return TuningSession(self, measurer, database, callbacks).run(Budget.of(budget))

    def template_default(self) -> Config | None:
        """The template's default config (None where the template has no usable one)."""
        make = getattr(self.task, "default_config", None)
        if make is None:
            return None
        if self._default is False:
            try:
                self._default = make()
            except Exception:  # noqa: BLE001 - a template without a usable default: plain search
                self._default = None
        return self._default  # type: ignore[return-value]

    def template_other_algorithms(self) -> list[Config]:
        """The default's counterparts in the template's other algorithms (none where it has none)."""
        if self._other_algorithms is None:
            try:
                self._other_algorithms = self.task.other_algorithm_configs()
            except Exception:  # noqa: BLE001 - a template without a usable default has none
                self._other_algorithms = []
        return self._other_algorithms

    def _unmeasured_starts(self) -> list[Config]:
        """The template's default and its counterparts in other algorithms, if asked for, not measured yet."""
        if not self.start_from_default:
            return []
        default = self.template_default()
        if default is None:
            return []
        return [c for c in (default, *self.template_other_algorithms()) if c.index not in self.visited]
