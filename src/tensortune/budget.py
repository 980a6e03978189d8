"""What one tuning run may spend, and the meter that says when it is spent.

A :class:`Budget` is one frozen value: trials, wall time, CPU-seconds, energy and early stopping,
each optional, whichever is met first ending the run. A run makes one :class:`BudgetMeter` from it
and asks :meth:`BudgetMeter.stop` before each batch; the answer is the stop reason ("" to go on),
as Kernel Tuner's cost function raises its stop criterion. The reasons are the strings results and
``--json`` output carry: ``trials``, ``time_budget``, ``cpu_budget``, ``energy_budget``,
``early_stopping`` (a tuner may also stop with ``space_exhausted`` or its own reason).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import TensortuneError

if TYPE_CHECKING:  # pragma: no cover
    from .measure.cost import CostMeter

#: The trial count standing for "no trial limit" where a number is needed (a task's claims in a
#: shared database, a scheduler's per-task target).
UNBOUNDED_TRIALS = 2**40


class BudgetError(TensortuneError, ValueError):
    """A budget value that is not a positive finite number."""


@dataclass(frozen=True)
class Budget:
    """Limits of one run; None means no limit of that kind.

    ``trials``: search trials (of a task; per task when a model is tuned), stored ones of the same
    tuner counted. ``wall_s``: seconds from the start, the tuner's set-up included. ``cpu_s``:
    CPU-seconds of this process and of its candidates' building and running. ``energy_j``: joules
    (needs a readable energy counter). ``early_stopping``: trials in a row without improvement.
    ``min_trials``: measured whatever the clock says (batches are measured whole).
    """

    trials: int | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    energy_j: float | None = None
    early_stopping: int | None = None
    min_trials: int = 0

    def __post_init__(self) -> None:
        for name in ("trials", "early_stopping"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise BudgetError(f"budget {name}={v!r}: a whole number of at least 1, or None")
        for name in ("wall_s", "cpu_s", "energy_j"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v <= 0):
                raise BudgetError(f"budget {name}={v!r}: a positive finite number, or None")
        if isinstance(self.min_trials, bool) or not isinstance(self.min_trials, int) or self.min_trials < 0:
            raise BudgetError(f"budget min_trials={self.min_trials!r}: a whole number of at least 0")

    @classmethod
    def of(cls, value: Budget | int | None) -> Budget:
        """``value`` as a Budget: an int is a number of trials, None no limit."""
        if isinstance(value, Budget):
            return value
        if value is None:
            return cls()
        return cls(trials=value)

    def replace(self, **changes: Any) -> Budget:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The limits that are set."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None and not (k == "min_trials" and v == 0)}


class BudgetMeter:
    """Counts one run against its :class:`Budget`, from its construction on.

    ``cost`` supplies the CPU-seconds and joules spent (:class:`~tensortune.measure.cost.CostMeter`);
    ``done_before``: trials of the budget already spent (stored by an earlier run). With an energy
    limit it raises :class:`~tensortune.measure.energy.EnergyUnavailable` where energy cannot be read.
    """

    def __init__(self, budget: Budget, cost: CostMeter, done_before: int = 0) -> None:
        if budget.energy_j is not None:
            from .measure.energy import require

            require()
        self.budget = budget
        self.cost = cost
        self.done_before = done_before
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self.start

    def trials_left(self, measured: int) -> int | None:
        """Trials the budget still allows after ``measured`` this run (None: no trial limit)."""
        if self.budget.trials is None:
            return None
        return max(0, self.budget.trials - self.done_before - measured)

    def stop(self, measured: int, last_improve: int = 0) -> str:
        """The reason to stop now ("" to go on), given ``measured`` trials this run and the last
        one that improved the best."""
        b = self.budget
        if b.trials is not None and self.trials_left(measured) == 0:
            return "trials"
        if b.wall_s is not None and measured >= b.min_trials and self.elapsed() >= b.wall_s:
            return "time_budget"
        if b.cpu_s is not None and self.cost.cpu_s() >= b.cpu_s:
            return "cpu_budget"
        if b.energy_j is not None and (self.cost.energy_j() or 0.0) >= b.energy_j:
            return "energy_budget"
        if b.early_stopping is not None and measured - last_improve >= b.early_stopping:
            return "early_stopping"
        return ""
