"""The parallel scheduler: a model's tasks tuned at once, one per measurer (a cluster's slots).

Each measurer (e.g. a :class:`~tensortune.cluster.nodes.NodeMeasurer`, a slot on one node of
a Ray cluster) has a thread in the driver that takes the next task not yet taken, in the
model's order (heaviest first), and tunes it with that task's one tuner until its trials or its
share of the time are spent, then takes the next. Every thread writes through its own
connection to the one database (the session claims configs, so no config is measured twice),
so the driver alone writes it and a rerun resumes as with the other schedulers.

The run's CPU-seconds are this process's own over the whole run (every slot's search at
once) plus each candidate's building and running; a CPU or energy budget is not taken (the
sessions run at once, and the driver's energy counter does not see the nodes).

With a time budget a task's share is its part (weight x FLOPs) of the time left times the
measurers still at work, at least :data:`~tensortune.scheduler.MIN_SHARE` of an even split.
A measurer that is lost (:class:`~tensortune.measure.base.MeasurerLost`: its node died) loses
its batch in flight; its task goes back to the front of the queue with a fresh tuner (which
resumes from the stored trials) for the others, and the run goes on while one measurer is left.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..budget import Budget, BudgetError
from ..measure.base import MeasurerLost
from ..task.model_task import ModelTask
from . import MIN_SHARE, MIN_TASK_BUDGET_S, TaskScheduler

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..measure import MeasurerBase


class ParallelScheduler(TaskScheduler):
    """Tasks tuned at once, one per measurer (module docstring). ``connect()`` opens a further
    connection to the run's database, one per measurer's thread."""

    name = "parallel"

    def __init__(self, tasks: Sequence[ModelTask], make_tuner: Callable[[Any, int], Any],
                 measurers: Sequence[MeasurerBase], database: Database, budget: Budget,
                 connect: Callable[[], Database], callbacks: Sequence[Callable[..., None]] = (),
                 batch_size: int = 16) -> None:
        if not measurers:
            raise ValueError("the parallel scheduler needs at least one measurer")
        if budget.cpu_s is not None or budget.energy_j is not None:
            raise BudgetError("the parallel scheduler takes trials and a time budget, not a CPU or energy budget")
        self._local = threading.local()
        super().__init__(tasks, make_tuner, measurers[0], database, budget, callbacks, batch_size)
        self.measurers = list(measurers)
        self.connect = connect
        #: what each lost measurer said, in the order they were lost
        self.lost: list[str] = []
        self._queue: deque[ModelTask] = deque()
        self._cost: dict[str, float] = {}
        self._working = 0  # slots not lost
        self._busy = 0  # slots tuning a task now (one of them may hand its task back)
        self._floor = 0.0
        self._changed = threading.Condition(self._guard)
        self._cpu0 = 0.0
        self._candidates_cpu = 0.0

    @property
    def database(self) -> Database:
        """The calling thread's connection: a slot's own in its thread (callbacks such as the
        progress bar read through it), the run's in the caller's."""
        return getattr(self._local, "db", None) or self._database

    @database.setter
    def database(self, db: Database) -> None:
        self._database = db

    def _run(self) -> None:
        self._queue = deque(self.tasks)
        self._cost = {t.task.workload_key: max(t.weight * t.task.flops, 1.0) for t in self.tasks}
        self._working = len(self.measurers)
        self._cpu0 = time.process_time()
        self.energy_j, self.energy_note = None, "not counted: the candidates ran on the measurers' machines"
        if self.time_budget:
            self._floor = MIN_SHARE * self.time_budget * len(self.measurers) / max(len(self.tasks), 1)
        errors: list[BaseException] = []
        threads = [threading.Thread(target=self._slot, args=(m, errors), name=f"slot-{k}", daemon=True)
                   for k, m in enumerate(self.measurers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:  # a bug, not a lost node: the first one surfaces in the caller's thread
            raise errors[0]

    def _next(self) -> tuple[ModelTask, float | None] | None:
        """The next task and its time budget, or None when the run is over (under the guard).
        With the queue empty it waits while another slot is busy: a slot that is lost hands its
        task back."""
        while True:
            left = self.remaining()
            if (left is not None and left <= 0) or self.spent():
                return None
            if self._queue:
                break
            if not self._busy:
                return None
            self._changed.wait(timeout=None if left is None else max(left, 0.01))
        mt = self._queue.popleft()
        self._busy += 1
        if left is None:
            return mt, None
        rest = self._cost[mt.task.workload_key] + sum(self._cost[t.task.workload_key] for t in self._queue)
        share = left * self._working * self._cost[mt.task.workload_key] / rest
        return mt, max(min(left, max(share, self._floor)), MIN_TASK_BUDGET_S)

    def _slot(self, measurer: MeasurerBase, errors: list[BaseException]) -> None:
        """One measurer's thread: tune the next task until none is left or the measurer is lost."""
        try:
            db = self._local.db = self.connect()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            errors.append(e)
            return
        try:
            while True:
                with self._guard:
                    nxt = self._next()
                if nxt is None:
                    return
                mt, budget = nxt
                try:
                    self._tune(mt, self.trials, budget, min_trials=1, measurer=measurer, database=db)
                except MeasurerLost as e:
                    with self._guard:
                        self.lost.append(str(e))
                        self._working -= 1
                        self._busy -= 1
                        self._queue.appendleft(mt)  # for the others, with a tuner that resumes from the database
                        self.tuners.pop(mt.task.workload_key, None)
                        self.outcomes[mt.task.workload_key].trials_total = db.count(mt.task.workload_key)
                        self._changed.notify_all()
                    return
                with self._guard:
                    self._busy -= 1
                    self._changed.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            errors.append(e)
            with self._guard:  # the others stop too: a bug, not a lost measurer
                self._queue.clear()
                self._busy = 0
                self._changed.notify_all()
        finally:
            self._local.db = None
            db.close()

    def _add_cost(self, cost: Any) -> None:
        """The candidates' CPU from each call; the process's own once, for the whole run (each
        call's meter reads every thread's, so adding them would count the searches N times)."""
        self._candidates_cpu += cost.build_cpu_s + cost.run_cpu_s
        self.cpu_s = time.process_time() - self._cpu0 + self._candidates_cpu

    def _build_run_s(self) -> tuple[float | None, float | None]:
        build = [m.build_s for m in self.measurers]
        run = [m.run_s for m in self.measurers]
        if any(b is None for b in build) or any(r is None for r in run):
            return None, None
        return sum(b for b in build if b is not None), sum(r for r in run if r is not None)

    def cost(self) -> dict[str, Any]:
        """The base's cost, with ``build_s`` / ``run_s`` summed over the measurers (so they can
        exceed the wall time), the measurers used and those lost."""
        if self._cpu0:
            self.cpu_s = time.process_time() - self._cpu0 + self._candidates_cpu
        out = super().cost()
        out["measurers"] = len(self.measurers)
        if self.lost:
            out["lost"] = list(self.lost)
        return out

    def report(self) -> dict[str, Any] | None:
        return {"measurers": len(self.measurers), "lost": list(self.lost),
                "untuned": [t.task.name for t in self._queue]} if self.lost else None
