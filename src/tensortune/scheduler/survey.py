"""Trimmer's survey tuning (scheduler ``survey``): every operator of a model in one queue, tuned
in rounds of small batches, the whole model timed after each round, stopped when more rounds do
not pay.

(Borowiec et al., CLOUD 2022, §IV-A and §V-A.)

* **Rounds.** Each round gives every active task one batch of ``batch`` (64) measurements,
  through the task's own tuner, kept across rounds. After the round the model is compiled with
  the best configs so far and its latency ``x_t`` measured (``model_latency``), in interleaved
  rounds beside the model timed before it (:class:`~tensortune.measure.timing.PairedTiming`),
  which gives the round's change: timed alone, one reading per round, the host's drift between
  rounds would decide the rate rule.
* **Latency goal** (Eq. 1): tuning stops once ``x_t <= g``, where ``g`` is the goal asked for,
  never above the untuned latency ``x_u`` (a goal above it is lowered to it). Or, as a
  **speed-up goal** ``s`` (our addition): once ``x_u / x_t >= s``, the two timed side by side in
  this process. An absolute goal compares readings of two processes, and two processes can read
  one model several percent apart, more than a 2% target.
* **Rate of improvement** (Eq. 2-3). The paper prints Eq. 2 as ``(x_t + x_{t-1}) / x_{t-1}``;
  we read it as the relative change ``ROI_t = (x_t - x_{t-1}) / x_{t-1}`` (negative: the model
  got faster), measured as the paired change (above). Eq. 3's sign rules are *our reading*
  (the paper's text was not at hand): with ``w1`` the sign of ``ROI_t`` and ``w2`` that of ``ROI_{t-1}``,
  - ``w1 < 0, w2 < 0`` (both rounds gained): stop when the latest gain is under ``|phi|`` of the
    previous one, i.e. ``ROI_t > phi * |ROI_{t-1}|`` (``phi`` = -0.25: less than a quarter);
  - ``w1 >= 0, w2 < 0`` (a gain, then none): stop (no gain left to pay for the next round);
  - ``w1 < 0, w2 >= 0`` (none, then a gain): go on;
  - ``w1 >= 0, w2 >= 0`` (two rounds without gain): stop.
  The rule needs two measured rounds; ``phi`` is settable.
* **Suspension.** A task stops taking batches at ``max_trials`` (500, §V-A) measurements, when
  its tuner has nothing left, and, one per round, the active task whose best did not improve
  in the round (the one with the fewest measurements first): plateaued operators are suspended
  one by one.

Budgets (trials per task, time, CPU-seconds, energy) end the run as in the other schedulers.
:attr:`SurveyScheduler.rounds` holds one row per round and :attr:`stop` why it ended.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..budget import Budget
from . import TaskScheduler

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..measure import MeasurerBase

#: §V-A: batch size of a round, measurements per operator; our reading of Eq. 3's threshold.
SURVEY_BATCH, SURVEY_MAX_TRIALS, SURVEY_PHI = 64, 500, -0.25


@dataclass(frozen=True)
class SurveyOptions:
    """``batch`` per task and round; ``max_trials`` per task; ``phi`` of the rate rule; ``goal_s``:
    the latency goal in seconds; ``speedup_goal``: the untuned / tuned latency to reach (None:
    the rate rule and the budgets alone)."""

    batch: int = SURVEY_BATCH
    max_trials: int = SURVEY_MAX_TRIALS
    phi: float = SURVEY_PHI
    goal_s: float | None = None
    speedup_goal: float | None = None

    def __post_init__(self) -> None:
        if self.batch < 1 or self.max_trials < 1:
            raise ValueError("batch and max_trials must be at least 1")
        if not -1.0 < self.phi < 0.0:
            raise ValueError("phi must lie in (-1, 0)")
        if self.goal_s is not None and self.goal_s <= 0:
            raise ValueError("the latency goal must be positive")
        if self.speedup_goal is not None and self.speedup_goal < 1:
            raise ValueError("the speed-up goal is untuned / tuned latency: at least 1")


def rate_says_stop(roi_t: float, roi_prev: float, phi: float) -> bool:
    """Eq. 3 as we read it (module docstring): True when another round does not pay."""
    if roi_t < 0 <= roi_prev:
        return False
    if roi_t < 0 and roi_prev < 0:
        return roi_t > phi * abs(roi_prev)
    return True


class SurveyScheduler(TaskScheduler):
    """Rounds of ``batch`` measurements over every task, the model timed after each (module docstring)."""

    name = "survey"

    def __init__(self, tasks: Any, make_tuner: Callable[[Any, int], Any], measurer: MeasurerBase, database: Database,
                 budget: Budget, *, model_latency: Callable[[bool], tuple[float, float | None, float | None]] | None = None,
                 options: SurveyOptions | None = None, **kwargs: Any) -> None:
        """``model_latency(tuned)`` times the model compiled with the database's bests (``tuned``
        True) or untuned (False): its seconds, its change against the model timed before it
        (``now / before - 1``) and its latency over the first model timed (the untuned one), None
        for the first; both measured in pairs, so the host's drift between rounds cancels
        (:class:`~tensortune.measure.timing.PairedTiming`). Without trials or time the rounds end by themselves
        (``max_trials`` per task at most)."""
        options = options or SurveyOptions()
        if budget.trials is None and budget.wall_s is None:
            budget = budget.replace(trials=options.max_trials)
        super().__init__(tasks, make_tuner, measurer, database, budget, **kwargs)
        if model_latency is None:
            raise ValueError("the survey scheduler needs a model_latency function")
        self.model_latency = model_latency
        self.options = options
        self.rounds: list[dict[str, Any]] = []
        self.stop = ""
        self.untuned_s = float("nan")
        self.goal_s: float | None = None
        self.suspended: dict[str, str] = {}

    def _suspend(self, mt: Any, why: str, active: list[Any]) -> None:
        active.remove(mt)
        self.suspended[mt.task.workload_key] = why

    def _run(self) -> None:
        o = self.options
        self.untuned_s = self.model_latency(False)[0]
        self.goal_s = None if o.goal_s is None else min(o.goal_s, self.untuned_s)  # Eq. 1
        x_prev = self.model_latency(True)[0] if any(out.trials_total for out in self.outcomes.values()) \
            else self.untuned_s
        self.rounds.append({"round": 0, "latency_s": x_prev, "trials": 0, "elapsed_s": 0.0, "roi": None})
        roi_prev: float | None = None
        cap = min(self.trials, o.max_trials)
        active = [mt for mt in self.tasks if self.outcomes[mt.task.workload_key].trials_total < cap]
        while active:
            before = {mt.task.workload_key: self.outcomes[mt.task.workload_key].best_s for mt in active}
            measured = 0
            for mt in list(active):
                left = self.remaining()
                if (left is not None and left <= 0) or self.spent():
                    self.stop = "time_budget" if left is not None and left <= 0 else self.budget_stop
                    return
                out = self.outcomes[mt.task.workload_key]
                n = self._tune(mt, min(cap, out.trials_total + o.batch), left)
                measured += n
                if n == 0:
                    self._suspend(mt, out.stop_reason or "nothing left", active)
                elif out.trials_total >= cap:
                    self._suspend(mt, f"{cap} measurements", active)
            x_t, change, vs_untuned = self.model_latency(True)
            roi = change if change is not None else (x_t - x_prev) / x_prev
            speedup = 1 / vs_untuned if vs_untuned else self.untuned_s / x_t
            self.rounds.append({"round": len(self.rounds), "latency_s": x_t, "trials": measured, "roi": roi,
                                "speedup": speedup, "elapsed_s": time.perf_counter() - self._start,
                                "active": len(active)})
            if self.goal_s is not None and x_t <= self.goal_s:
                self.stop = "latency goal"
                return
            if o.speedup_goal is not None and speedup >= o.speedup_goal:
                self.stop = "speed-up goal"
                return
            if roi_prev is not None and rate_says_stop(roi, roi_prev, o.phi):
                self.stop = "rate of improvement"
                return
            x_prev, roi_prev = x_t, roi
            flat = [mt for mt in active if self.outcomes[mt.task.workload_key].best_s >= before[mt.task.workload_key]]
            if flat:  # one plateaued operator per round, the least measured first
                mt = min(flat, key=lambda m: self.outcomes[m.task.workload_key].trials_total)
                self._suspend(mt, "plateaued", active)
        self.stop = self.stop or "every task suspended"

    def report(self) -> dict[str, Any]:
        """Rounds, the untuned latency, the goal, why it stopped, and the suspended tasks."""
        return {"untuned_ms": self.untuned_s * 1e3, "goal_ms": None if self.goal_s is None else self.goal_s * 1e3,
                "speedup_goal": self.options.speedup_goal,
                "rounds": [{**r, "latency_ms": r["latency_s"] * 1e3} for r in self.rounds], "stop": self.stop,
                "suspended": self.suspended}
