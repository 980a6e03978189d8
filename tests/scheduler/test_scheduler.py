"""How the sequential scheduler splits a time budget, on a fake clock with fake tuners."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import tensortune.scheduler as sched
from tensortune.measure import MeasureOptions
from tensortune.models.extract import ModelTask
from tensortune.scheduler import MIN_TASK_BUDGET_S, SequentialScheduler


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class FakeTuner:
    """Uses its whole budget and then runs ``overrun`` seconds past it, like a last batch + verification."""

    def __init__(self, task, clock: Clock, overrun: float, log: list) -> None:
        self.task, self.clock, self.overrun, self.log = task, clock, overrun, log

    def tune(self, n_trial, measurer, time_budget=None, database=None, callbacks=()):
        self.log.append((self.task.name, time_budget))
        self.clock.now += time_budget + self.overrun
        return SimpleNamespace(trials_measured=1, errors={}, best_config=None, best_cost=float("inf"),
                               stop_reason="time_budget")


class FakeDB:
    def count(self, key):
        return 0

    def best(self, key, context=None):
        assert context is not None and context.timing  # bests are compared in the measurer's context
        return None


def tasks(n: int, light: int = 0) -> list[ModelTask]:
    """``n`` heavy tasks then ``light`` ones with a thousandth of their FLOPs."""
    return [ModelTask(SimpleNamespace(name=f"t{k}", workload_key=f"k{k}", flops=1e9 if k < n else 1e6,
                                      kernel_class="x", target_json={"kind": "llvm"}), 1) for k in range(n + light)]


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(sched, "time", c)
    return c


def run(clock: Clock, n: int, budget: float, overrun: float, light: int = 0) -> list[tuple[str, float]]:
    log: list = []
    s = SequentialScheduler(tasks(n, light), lambda task, r: FakeTuner(task, clock, overrun, log),
                            SimpleNamespace(options=MeasureOptions.cold()), FakeDB(),
                            time_budget=budget)
    s.run()
    return log


def test_equal_tasks_share_the_budget_evenly(clock):
    log = run(clock, 4, 400.0, 0.0)
    assert [b for _, b in log] == pytest.approx([100.0] * 4)


def test_overruns_are_charged_so_the_light_tasks_still_run(clock):
    # every tuner runs 30 s past its budget (its last batch and the verification): the four
    # heavy tasks must leave time for one short run of each light one
    log = run(clock, 4, 400.0, 30.0, light=4)
    assert [name for name, _ in log] == [f"t{k}" for k in range(8)]
    assert all(b >= MIN_TASK_BUDGET_S for _, b in log)
    assert log[0][1] == pytest.approx(100.0, rel=0.01)  # nothing known about overruns yet: a plain share
    assert clock.now <= 400.0 + 30.0  # the budget holds to within one overrun


def test_no_task_starts_after_the_budget(clock):
    log = run(clock, 5, 10.0, 100.0)  # the first task alone uses everything
    assert len(log) == 1
