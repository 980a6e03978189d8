"""Progress of a model's tuning on the terminal (a scheduler callback)."""
from __future__ import annotations

from typing import Any, Sequence

from . import estimated_total


class ModelProgress:
    """Scheduler callback for a whole model: the task being tuned, its trials, its best
    latency so far, and the model's estimated total (sum of weight x best latency)."""

    def __init__(self, model: str, tasks: Sequence[Any], trials_per_task: int | None, time_budget: float | None,
                 disable: bool = False) -> None:
        from tqdm import tqdm

        self.model = model
        self.n_tasks = len([t for t in tasks if t.tunable])
        self.trials = trials_per_task
        total = trials_per_task * self.n_tasks if trials_per_task else None
        self.bar = tqdm(total=total, desc=model, unit="trial", disable=disable, dynamic_ncols=True)
        self._order: dict[str, int] = {t.task.workload_key: k + 1 for k, t in enumerate(tasks)}

    def __call__(self, scheduler: Any, tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        task = tuner.task
        done = scheduler.database.count(task.workload_key)
        total, n = estimated_total(list(scheduler.outcomes.values()))
        best = f"{tuner.best_cost * 1e3:.3f} ms" if tuner.best_cost < float("inf") else "-"
        cap = f"/{self.trials}" if self.trials else ""
        self.bar.set_description_str(f"{self.model} task {self._order.get(task.workload_key, 0)}/{len(self._order)} "
                                     f"{task.kernel_class}")
        self.bar.set_postfix_str(f"trials {done}{cap}, best {best}, est. total {total * 1e3:.2f} ms "
                                 f"({n}/{len(scheduler.outcomes)} tasks)")
        self.bar.update(len(results))

    def settle(self, outcomes: Sequence[Any]) -> None:
        """Show the model's estimate from the tasks' confirmed bests (what the final table says)."""
        total, n = estimated_total(list(outcomes))
        self.bar.set_postfix_str(f"est. total {total * 1e3:.2f} ms ({n}/{len(outcomes)} tasks), confirmed")
        self.bar.refresh()

    def close(self) -> None:
        """Finish the bar."""
        self.bar.close()
