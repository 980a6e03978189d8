"""Fasor's two parts of a model-based tuner: the pre-tuned start and the shrunk space view.

* :class:`PretunedStart`: the pre-tuned schedule table (:mod:`tensortune.database.pretuned`):
  an exact key is an O(1) hit, else the most Spearman-similar entry above ``tau``, else the
  template default. The start is measured first and seeds the explorer.
* :class:`ShrunkViewMaker` (:mod:`tensortune.space.shrink`): empirical option pruning, then the
  task is classed compute- or memory-sensitive by the model's scores of the start, and only the
  ``n_p`` knobs that move that score most (the sensitivity study kept with the model) are
  walked; the rest stay at the start's values.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..costmodel.fasor import FASOR_SHIPPED, fasor_home, read_sensitivity, task_threads
from ..space import Config
from .parts import PartContext, StartProvider, View, ViewMaker

if TYPE_CHECKING:  # pragma: no cover
    from ..database.pretuned import PretunedTable, StartPoint

#: File name of a pre-tuned table, shipped (``learn/pretrained/fasor/``) and the user's (:func:`user_table_path`).
PRETUNED_FILE = "pretuned.json"
_TABLES: dict[str, PretunedTable] = {}


def user_table_path() -> Path:
    """The user's pre-tuned table (``tensortune fasor pretuned --db ...`` adds to it)."""
    return fasor_home() / PRETUNED_FILE


def load_table(path: str | None = None) -> PretunedTable:
    """The pre-tuned table: the file ``path``, else the shipped table merged with the user's
    (entries of lower cost win); read once per process. A missing file is an empty table; an
    unreadable one raises :class:`~tensortune.database.pretuned.PretunedError`."""
    from ..database.pretuned import PretunedTable

    key = str(path)
    if key not in _TABLES:
        if path is not None:
            table = PretunedTable.load(path)
        else:
            table = PretunedTable()
            for p in (FASOR_SHIPPED / PRETUNED_FILE, user_table_path()):
                if p.is_file():
                    table.merge(PretunedTable.load(p))
        _TABLES[key] = table
    return _TABLES[key]


class PretunedStart(StartProvider):
    """The start from the pre-tuned table (``enabled`` off: the template default)."""

    name = "pretuned"

    def __init__(self, enabled: bool = True, path: str | None = None, tau: float = 0.6) -> None:
        self.enabled, self.path, self.tau = enabled, path, tau
        self.point: StartPoint | None = None

    def starts(self, context: PartContext) -> list[Config]:
        from ..database.pretuned import StartPoint

        task = context.task
        if not self.enabled:
            self.point = StartPoint(task.default_config(), "default", None, None, "pre-tuned start off")
        else:
            self.point = load_table(self.path).lookup(task, task_threads(task), tau=self.tau)
        return [self.point.config]

    def report(self) -> dict[str, str]:
        return {"start": self.point.how, "start_reason": self.point.reason} if self.point else {}


class ShrunkViewMaker(ViewMaker):
    """Fasor's shrunk space around the first start (it needs a Fasor cost model: ``outputs``).
    ``primitives``: ``sensitivity`` (the model's study), ``random`` knobs, or ``all``."""

    name = "shrunk"
    needs_starts = True

    def __init__(self, n_p: int, primitives: str = "sensitivity", prune: bool = True) -> None:
        self.n_p, self.primitives, self.prune = n_p, primitives, prune
        self.sensitive = ""  # "compute" | "memory", once made

    def make(self, context: PartContext) -> View:
        from ..space.shrink import shrink

        task, start = context.task, context.starts[0]
        cs, ms = context.model.outputs(task, [start])[0, 1:3]  # type: ignore[attr-defined]
        self.sensitive = "compute" if cs >= ms else "memory"
        ranking, n_p = self._ranking(context)
        return shrink(task.space, start, task_threads(task), getattr(task.template, "parallel_splits", ()),
                      ranking, n_p, prune=self.prune)

    def _ranking(self, context: PartContext) -> tuple[list[str] | None, int | None]:
        """Knobs by sensitivity for the task's class (or random / none, per ``primitives``)."""
        if self.primitives == "all":
            return None, None
        if self.primitives == "random":
            order = [k.name for k in context.task.space.knobs]
            context.rng.shuffle(order)
            return order, self.n_p
        study = read_sensitivity(context.model.predictor_for(context.task))  # type: ignore[attr-defined]
        ranking = study.get(self.sensitive) if study else None
        if not ranking:
            return None, None  # no study kept with the model: every knob is walked
        return list(ranking), self.n_p


__all__ = ["PRETUNED_FILE", "PretunedStart", "ShrunkViewMaker", "load_table", "user_table_path"]
