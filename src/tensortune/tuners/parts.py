"""The injectable parts of a model-based tuner beside its cost model, explorer and selector.

* :class:`StopRule`: when the plan loop ends by design (after ``iterations`` model-guided
  plans, or after ``patience`` plans in a row brought no better measurement);
* :class:`StartProvider`: configs measured first and handed to the explorer as seeds (none by
  default; Fasor's pre-tuned table is one, in :mod:`.fasor_parts`);
* :class:`ViewMaker`: the part of the task's space the explorer walks (the whole space by
  default; Fasor's shrunk space is one), made once the starts are known;
* :class:`Fallback`: the tuner a composition becomes on a task its frozen cost model does not
  cover (a model's pooling or elementwise functions): another tuner, in rounds of a fixed
  number of trials under the composition's stop rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from ..measure import MeasureResult
from ..space import Config, ConfigSpace
from .base import DEFAULT_BATCH_SIZE, Tuner

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..costmodel.base import CostModel
    from ..task import Task


@dataclass
class StopRule:
    """Ends a loop of plans (or rounds): after ``iterations`` of them, or once ``patience`` in a
    row brought no better best cost (None: no such limit). :meth:`begin` is called as each plan
    starts, :meth:`reason` before every plan after the first; the messages say why it ended."""

    iterations: int | None = None
    patience: int | None = None
    iterations_reason: str = ""
    patience_reason: str = ""
    since_better: int = 0
    _best_at_begin: float = float("inf")

    def begin(self, best_cost: float) -> None:
        """A plan starts with ``best_cost`` the best so far."""
        self._best_at_begin = best_cost

    def reason(self, best_cost: float, plans: int) -> str:
        """Why no plan follows the ``plans`` made ("" to go on); call once per plan boundary."""
        if plans == 0:
            return ""
        if self.iterations is not None and plans >= self.iterations:
            return self.iterations_reason or f"{self.iterations} iterations"
        if self.patience is not None:
            self.since_better = 0 if best_cost < self._best_at_begin else self.since_better + 1
            if self.since_better >= self.patience:
                return self.patience_reason or f"converged ({self.patience} plans without a better config)"
        return ""


@dataclass
class PartContext:
    """What a start provider and a view maker may read: the task, the tuner's cost model, its
    random generator (the only randomness a part may draw on) and the starts found."""

    task: Task
    model: CostModel
    rng: Any
    starts: list[Config] = field(default_factory=list)


class StartProvider:
    """Configs a tuner measures first (the template default aside) and seeds its explorer with;
    none by default. :meth:`report` says what it found, for ``search_report``."""

    name = "none"

    def starts(self, context: PartContext) -> list[Config]:
        return []

    def report(self) -> dict[str, Any]:
        return {}


class View(Protocol):
    """A searched view of a task's space: ``space`` is walked, ``to_full`` / ``from_full`` map
    configs between it and the task's space (``from_full`` None: outside the view)."""

    space: ConfigSpace
    report: dict[str, Any]

    def to_full(self, config: Config) -> Config: ...

    def from_full(self, config: Config) -> Config | None: ...


@dataclass
class FullView:
    """The whole space: the identity view."""

    space: ConfigSpace
    report: dict[str, Any] = field(default_factory=dict)

    def to_full(self, config: Config) -> Config:
        return config

    def from_full(self, config: Config) -> Config | None:
        return config


class ViewMaker:
    """Makes the view a tuner's explorer walks, once the starts are known (the whole space by
    default)."""

    name = "full"
    #: whether the view depends on the starts (made when the first plan is; else at once)
    needs_starts = False

    def make(self, context: PartContext) -> View:
        return FullView(context.task.space)


class Fallback(Tuner):
    """A composition on a task its frozen cost model does not cover: ``fallback`` (another tuner)
    proposes in rounds of ``round_trials`` under ``stop``; named and optioned as the composition.
    ``why`` says in one line what happened (status, and the stop reason's end)."""

    def __init__(self, name: str, options: Any, fallback: Tuner, round_trials: int, stop: StopRule, why: str,
                 task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True) -> None:
        super().__init__(task, seed, batch_size, start_from_default)
        self.name, self.options = name, options
        self.fallback, self.round_trials, self.stop, self.why = fallback, round_trials, stop, why
        self._round_left = 0
        #: rounds begun
        self.iterations = 0

    def next_batch(self, n: int) -> list[Config]:
        if self.finished:
            return []
        if self._round_left == 0:
            reason = self.stop.reason(self.best_cost, self.iterations)
            if reason:
                self.finished = f"{reason} ({self.why})"
                return []
            self.stop.begin(self.best_cost)
            self.iterations += 1
            self._round_left = self.round_trials
        out = self.fallback.next_batch(min(n, self._round_left))
        self._round_left -= len(out)
        if not out:
            self.finished = self.finished or f"{self.fallback.name} found no unmeasured candidate ({self.why})"
        return out

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Bookkeeping, and the fallback learns as it does."""
        super().update(configs, results)
        self.fallback.update(configs, results)

    def begin(self, database: Database) -> None:
        self.fallback.begin(database)

    def search_report(self) -> dict[str, Any]:
        return {"fallback": self.fallback.name, "notice": self.why, "rounds": self.iterations,
                "finished": self.finished, "fallback_report": self.fallback.search_report()}

    @property
    def status(self) -> str:
        return f"{self.name}: {self.why}"


__all__ = ["Fallback", "FullView", "PartContext", "StartProvider", "StopRule", "View", "ViewMaker"]
