"""Task schedulers: split a model's tuning budget across its tasks.

``sequential`` tunes the tasks one after the other, heaviest first (weight x FLOPs);
``round-robin`` gives every task one batch in turn until each has its trials or the time
is spent; ``survey`` (Trimmer's, :mod:`.survey`) gives every task a batch of 64 per round,
times the whole model after each round and stops when more rounds do not pay. Both work through :meth:`Tuner.tune` with the database, so every trial is
committed as it completes and a rerun resumes where the last run stopped (a task's
stored trials count against its budget and are never measured again).

Each task has one tuner for the whole run, made by ``make_tuner(task, 0)`` when the task is
first tuned: a round-robin task keeps its cost model, its search state and its transfer model
from round to round. Every ``tune`` call that measured something ends with a confirmation of
the task's top configs (see :mod:`tensortune.tuners.session`); those re-measurements are not
counted against the task's trials (``Database.count`` leaves them out), and a task's best is
the confirmed one.

With a time budget, ``sequential`` gives each task a share of the remaining time in
proportion to its weight x FLOPs, but at least :data:`MIN_SHARE` of an even split of the whole
budget, and time a task does not use passes to the tasks after it. Every task measures at least
one batch, whatever its share: its tuner's set-up counts against the share (autotvm's transfer
fit took 9-10 s per task late in efficientnet_b0's run, longer than the shares left to 7 light
tasks, which then measured nothing). A tuner checks its clock between batches, and confirms and
verifies its best at the end, so it runs past its budget by about one batch: the mean overrun
of the tasks so far is taken off each next share, and every later task's minimum share (and
overrun) is kept back, so that the light tasks tuned last are not starved by the heavy ones.
(Shares of the remaining time alone left 5 of resnet18's 22 tasks untuned in 60 minutes: the
overruns of the heavy tasks ate the light ones' few seconds.)

A CPU budget (CPU-seconds: the tuner's own and its candidates' building and running) or an
energy budget (joules, where the machine has a counter) caps the whole run on top of the trials
or the time: each ``tune`` call gets what is left of it, and no task starts once it is spent.
:meth:`TaskScheduler.cost` sums the run's wall time, CPU-seconds and energy.
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..budget import UNBOUNDED_TRIALS, Budget, BudgetError
from ..task.model_task import ModelTask

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..measure import MeasureInput, MeasureResult, MeasurerBase
    from ..tuners import Tuner

#: The smallest time share of a task, as a fraction of an even split of the budget.
MIN_SHARE = 0.25
#: The least time budget handed to a tuner (``sequential`` has it measure one batch whatever the clock says).
MIN_TASK_BUDGET_S = 1.0


@dataclass
class TaskOutcome:
    """One task's state after a run."""

    mtask: ModelTask
    trials_total: int = 0  # search trials stored in the database for the task (confirmations not counted)
    measured: int = 0  # this run
    best_s: float = float("inf")
    errors: dict[str, int] = field(default_factory=dict)
    stop_reason: str = ""
    search: dict[str, Any] = field(default_factory=dict)  # the tuner's search_report() ({}: none)

    def to_json(self) -> dict[str, Any]:
        """A row of ``tensortune tune --json``."""
        t = self.mtask.task
        best = self.best_s if self.best_s < float("inf") else None
        return {"task": t.name, "kernel_class": t.kernel_class, "workload_key": t.workload_key,
                "weight": self.mtask.weight, "trials": self.trials_total, "measured_this_run": self.measured,
                "best_latency_ms": best * 1e3 if best else None,
                "weighted_ms": best * 1e3 * self.mtask.weight if best else None,
                "errors": self.errors, "stop_reason": self.stop_reason,
                **({"search": self.search} if self.search else {})}


def estimated_total(outcomes: Sequence[TaskOutcome]) -> tuple[float, int]:
    """(sum of weight x best latency in seconds over measured tasks, number of such tasks)."""
    done = [o for o in outcomes if o.best_s < float("inf")]
    return sum(o.mtask.weight * o.best_s for o in done), len(done)


class TaskScheduler:
    """Base: tunes each task with one measurer and one database, through one tuner per task.

    ``make_tuner(task, round_)`` makes a task's tuner; it is called once per task, with
    ``round_`` 0, and the tuner is kept (:meth:`tuner_for`) for every later batch of the task.
    """

    name = ""

    def __init__(self, tasks: Sequence[ModelTask], make_tuner: Callable[[Any, int], Any],
                 measurer: MeasurerBase, database: Database,
                 budget: Budget, callbacks: Sequence[Callable[..., None]] = (), batch_size: int = 16) -> None:
        """``budget``: ``trials`` per task, ``wall_s``, ``cpu_s`` and ``energy_j`` for the whole run,
        ``early_stopping`` per task; trials, wall time or both are needed."""
        if budget.trials is None and budget.wall_s is None:
            raise BudgetError("give trials per task, a time budget, or both")
        if budget.energy_j is not None:
            from ..measure.energy import require

            require()
        self.budget = budget
        self.cpu_budget, self.energy_budget = budget.cpu_s, budget.energy_j
        self.cpu_s = 0.0
        self.energy_j: float | None = 0.0 if budget.energy_j is not None else None
        self.energy_note = ""
        self.budget_stop = ""
        self.tasks = [t for t in tasks if t.tunable]
        self.make_tuner = make_tuner
        self.measurer = measurer
        self.database = database
        self.trials = budget.trials or UNBOUNDED_TRIALS
        self.time_budget = budget.wall_s
        self.callbacks = list(callbacks)
        self.batch_size = batch_size
        self.outcomes = {t.task.workload_key: TaskOutcome(t) for t in tasks}
        self.current: ModelTask | None = None
        self._start = 0.0
        #: each task's tuner, by workload key, made on first use
        self.tuners: dict[str, Any] = {}
        #: held for the run's bookkeeping (the parallel scheduler tunes tasks in several threads)
        self._guard = threading.RLock()

    def remaining(self) -> float | None:
        """Seconds left of the time budget (None: no time budget)."""
        if self.time_budget is None:
            return None
        return self.time_budget - (time.perf_counter() - self._start)

    def spent(self) -> str:
        """The budget that is spent ("cpu_budget" / "energy_budget"), or ""."""
        if self.cpu_budget is not None and self.cpu_s >= self.cpu_budget:
            self.budget_stop = "cpu_budget"
        elif self.energy_budget is not None and (self.energy_j or 0.0) >= self.energy_budget:
            self.budget_stop = "energy_budget"
        return self.budget_stop

    def cost(self) -> dict[str, Any]:
        """The run's wall time, CPU-seconds and energy (None, with the reason, without a counter),
        and, with a measurer that keeps them (:class:`~tensortune.measure.Measurer`), the wall
        time's split: ``build_s``, ``run_s`` and ``search_s``, the rest (search, cost-model
        updates, bookkeeping, and a survey's whole-model timing)."""
        wall = time.perf_counter() - self._start if self._start else 0.0
        out = {"wall_s": round(wall, 3), "cpu_s": round(self.cpu_s, 3),
               "energy_j": None if self.energy_j is None else round(self.energy_j, 3)}
        build, run = self._build_run_s()
        if build is not None and run is not None:
            out.update(build_s=round(build, 3), run_s=round(run, 3), search_s=round(max(0.0, wall - build - run), 3))
        if self.energy_j is None and self.energy_note:
            out["energy"] = self.energy_note
        if self.budget_stop:
            out["stopped_by"] = self.budget_stop
        return out

    def _build_run_s(self) -> tuple[float | None, float | None]:
        """Seconds spent building and running candidates (None where the measurer keeps none)."""
        return self.measurer.build_s, self.measurer.run_s

    def report(self) -> dict[str, Any] | None:
        """What the scheduler has to say about its run beyond the outcomes (None: nothing)."""
        return None

    def tuner_for(self, mt: ModelTask) -> Any:
        """The tuner of ``mt``: made by ``make_tuner(task, 0)`` on first use, the same one after."""
        key = mt.task.workload_key
        with self._guard:
            if key not in self.tuners:
                self.tuners[key] = self.make_tuner(mt.task, 0)
            return self.tuners[key]

    def _tune(self, mt: ModelTask, n_trial: int, time_budget: float | None, min_trials: int = 0,
              measurer: MeasurerBase | None = None, database: Database | None = None) -> int:
        """One ``Tuner.tune`` call of ``mt``'s tuner up to ``n_trial`` stored trials, at least
        ``min_trials`` of them whatever ``time_budget`` says, with ``measurer`` and ``database``
        (default: the scheduler's); returns trials measured (confirmation re-measurements not
        included)."""
        measurer, database = measurer or self.measurer, database or self.database
        self.current = mt
        # what is left of the run's CPU and energy (a sliver when spent: the tuner then stops at once)
        cpu_left = None if self.cpu_budget is None else max(self.cpu_budget - self.cpu_s, 1e-9)
        energy_left = None if self.energy_budget is None else max(self.energy_budget - (self.energy_j or 0.0), 1e-9)
        limit = Budget(trials=n_trial, wall_s=time_budget, cpu_s=cpu_left, energy_j=energy_left,
                       early_stopping=self.budget.early_stopping, min_trials=min_trials)
        res = self.tuner_for(mt).tune(limit, measurer, database=database, callbacks=[self._callback])
        with self._guard:
            self._account(mt, res, database)
        return res.trials_measured

    def _account(self, mt: ModelTask, res: Any, database: Database) -> None:
        """Add a ``tune`` call's result to the run's cost and the task's outcome."""
        out = self.outcomes[mt.task.workload_key]
        if res.cost is not None:
            self._add_cost(res.cost)
        out.measured += res.trials_measured
        out.trials_total = database.count(mt.task.workload_key)
        for k, v in res.errors.items():
            out.errors[k] = out.errors.get(k, 0) + v
        if res.best_config is not None:  # the tuner's (confirmed) best, which may be slower than a lucky trial
            out.best_s = res.best_cost
        out.stop_reason = res.stop_reason
        out.search = self.tuner_for(mt).search_report()

    def _add_cost(self, cost: Any) -> None:
        """Add one ``tune`` call's :class:`~tensortune.measure.cost.RunCost` to the run's."""
        self.cpu_s += cost.cpu_s
        if cost.energy_j is not None:
            self.energy_j = (self.energy_j or 0.0) + cost.energy_j
        else:
            self.energy_note = cost.energy_note

    def _callback(self, tuner: Tuner, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """After each batch: the task's best so far (progress only; :meth:`_tune` sets the final one)."""
        with self._guard:
            out = self.outcomes[tuner.task.workload_key]
            out.best_s = min(out.best_s, tuner.best_cost)
            for cb in self.callbacks:
                cb(self, tuner, inputs, results)

    def load_bests(self) -> None:
        """Best stored latency of every task (before tuning, for the estimate and resumes)."""
        from ..database.trials import measure_context

        for out in self.outcomes.values():
            task = out.mtask.task
            best = self.database.best(task.workload_key, measure_context(task, self.measurer.options))
            out.trials_total = self.database.count(task.workload_key)
            if best is not None:
                out.best_s = min(out.best_s, best.cost)

    def run(self) -> list[TaskOutcome]:
        """Tune until every task has its trials or the time budget is spent."""
        self._start = time.perf_counter()
        self.load_bests()
        self._run()
        return list(self.outcomes.values())

    def _run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class SequentialScheduler(TaskScheduler):
    """Each task in turn, heaviest first, until its trials (or its share of the time) are spent."""

    name = "sequential"

    def _run(self) -> None:
        cost = [max(t.weight * t.task.flops, 1.0) for t in self.tasks]
        overruns: list[float] = []  # seconds each tuned task ran past the budget it was given
        floor = MIN_SHARE * self.time_budget / len(self.tasks) if self.time_budget else 0.0
        for k, mt in enumerate(self.tasks):
            left = self.remaining()
            if (left is not None and left <= 0) or self.spent():
                break
            budget = None
            if left is not None:
                rest = cost[k:]
                share = min(left, max(left * cost[k] / sum(rest), floor))
                over = statistics.mean(overruns) if overruns else 0.0
                # what is left after this task's own overrun and each later task's minimum share
                spare = left - over - (len(rest) - 1) * (max(floor, MIN_TASK_BUDGET_S) + over)
                budget = max(min(share - over, spare), MIN_TASK_BUDGET_S)
            t0 = time.perf_counter()
            self._tune(mt, self.trials, budget, min_trials=1)  # one batch at least
            if budget is not None:
                overruns.append(max(0.0, time.perf_counter() - t0 - budget))


class RoundRobinScheduler(TaskScheduler):
    """One batch per task in turn until every task has its trials or the time is spent."""

    name = "round-robin"

    def _run(self) -> None:
        active = list(self.tasks)
        while active:
            for mt in list(active):
                left = self.remaining()
                if (left is not None and left <= 0) or self.spent():
                    return
                out = self.outcomes[mt.task.workload_key]
                have = self.database.count(mt.task.workload_key)
                target = min(self.trials, have + self.batch_size)
                n = self._tune(mt, target, left)
                if n == 0 or out.trials_total >= self.trials or out.stop_reason == "space_exhausted":
                    active.remove(mt)


from .parallel import ParallelScheduler  # noqa: E402 - these subclass TaskScheduler
from .survey import SurveyScheduler  # noqa: E402

SCHEDULERS: dict[str, type[TaskScheduler]] = {s.name: s for s in (SequentialScheduler, RoundRobinScheduler,
                                                                    SurveyScheduler)}


def get_scheduler(name: str) -> type[TaskScheduler]:
    """The scheduler class called ``name``."""
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(SCHEDULERS)}") from None


__all__ = ["MIN_SHARE", "MIN_TASK_BUDGET_S", "SCHEDULERS", "ParallelScheduler", "RoundRobinScheduler", "SequentialScheduler",
           "SurveyScheduler", "TaskOutcome", "TaskScheduler", "estimated_total", "get_scheduler"]
