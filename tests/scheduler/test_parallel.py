"""The parallel scheduler on fake tuners and measurers: tasks at once, one per measurer, each
thread on its own database connection, and a lost measurer's task finished by the others."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from tensortune.budget import Budget
from tensortune.measure import MeasureOptions
from tensortune.measure.base import MeasurerLost
from tensortune.scheduler import ParallelScheduler
from tensortune.task import ModelTask


class FakeDB:
    def __init__(self, opened: list) -> None:
        self.thread = threading.get_ident()
        self.closed = False
        opened.append(self)

    def count(self, key):
        assert threading.get_ident() == self.thread, "a connection used outside its thread"
        return 0

    def best(self, key, context=None):
        return None

    def close(self) -> None:
        self.closed = True


class FakeTuner:
    """Takes 50 ms per call; raises MeasurerLost on a measurer named ``lost`` (its batch in flight)."""

    def __init__(self, task, log: list) -> None:
        self.task, self.log = task, log

    def tune(self, budget, measurer, database=None, callbacks=()):
        t0 = time.perf_counter()
        time.sleep(0.3 if measurer.name.startswith("lost-late") else 0.05)
        if measurer.name.startswith("lost"):
            raise MeasurerLost(f"{measurer.name} died with a batch in flight")
        database.count(self.task.workload_key)
        for cb in callbacks:
            cb(self, [], [])
        self.log.append((self.task.name, measurer.name, t0, time.perf_counter()))
        return SimpleNamespace(trials_measured=4, errors={}, best_config=object(), best_cost=1e-3,
                               stop_reason="trials", cost=None)

    best_cost = 1e-3

    def search_report(self):
        return {}


def measurer(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, options=MeasureOptions.flushed(), build_s=1.0, run_s=2.0)


def tasks(n: int) -> list[ModelTask]:
    return [ModelTask(SimpleNamespace(name=f"t{k}", workload_key=f"k{k}", flops=1e9 * (n - k), kernel_class="x",
                                      target_json={"kind": "llvm"}), 1) for k in range(n)]


def run(names: list[str], n_tasks: int = 6):
    log: list = []
    made: list = []
    opened: list = []
    seen: list = []

    def make(task, r):
        made.append(task.name)
        return FakeTuner(task, log)

    def callback(scheduler, tuner, inputs, results):  # the progress bar reads the database here
        seen.append(scheduler.database.count(tuner.task.workload_key) == 0)

    main = FakeDB(opened)
    s = ParallelScheduler(tasks(n_tasks), make, [measurer(n) for n in names], main, Budget(trials=4),
                          lambda: FakeDB(opened), callbacks=[callback])
    outcomes = s.run()
    return s, outcomes, log, made, opened, seen


def test_tasks_run_at_once_one_per_measurer_each_on_its_own_connection() -> None:
    s, outcomes, log, made, opened, seen = run(["a", "b", "c"])
    assert sorted(name for name, *_ in log) == [f"t{k}" for k in range(6)]  # every task tuned once
    assert sorted(made) == [f"t{k}" for k in range(6)]  # one tuner per task
    assert [name for name, *_ in sorted(log, key=lambda r: r[2])][:3] == ["t0", "t1", "t2"]  # heaviest first
    spans = {m: [(a, b) for _, who, a, b in log if who == m] for m in "abc"}
    assert all(spans.values()) and any(a0 < b1 and a1 < b0 for a0, b0 in spans["a"] for a1, b1 in spans["b"])
    assert len(opened) == 1 + 3 and all(db.closed for db in opened[1:]) and not opened[0].closed
    assert seen and all(seen)
    assert all(o.best_s == 1e-3 and o.measured == 4 for o in outcomes)
    cost = s.cost()
    assert cost["measurers"] == 3 and cost["build_s"] == 3.0 and cost["run_s"] == 6.0 and "lost" not in cost


def test_a_lost_measurers_task_goes_to_the_others_with_a_fresh_tuner() -> None:
    s, outcomes, log, made, _, _ = run(["a", "lost-1"])
    assert len(s.lost) == 1 and "died with a batch in flight" in s.lost[0]
    assert sorted(name for name, *_ in log) == [f"t{k}" for k in range(6)]  # all finished, on "a"
    assert {who for _, who, *_ in log} == {"a"}
    assert len(made) == 7  # the lost task's tuner made again (it resumes from the database)
    assert s.cost()["lost"] == s.lost and s.report()["untuned"] == []


def test_a_task_handed_back_after_the_queue_ran_dry_is_still_tuned() -> None:
    """The other slot has finished its task and found nothing left; the lost slot's task comes
    back later, and that slot takes it rather than having ended."""
    s, outcomes, log, made, _, _ = run(["a", "lost-late"], n_tasks=2)
    assert len(s.lost) == 1 and sorted(name for name, *_ in log) == ["t0", "t1"]
    assert s.report()["untuned"] == [] and all(o.measured == 4 for o in outcomes)


def test_a_cpu_or_energy_budget_is_refused() -> None:
    from tensortune.budget import BudgetError

    with pytest.raises(BudgetError, match="not a CPU or energy budget"):
        ParallelScheduler(tasks(1), lambda t, r: None, [measurer("a")], FakeDB([]), Budget(trials=1, cpu_s=10),
                          lambda: FakeDB([]))


def test_the_searches_cpu_is_counted_once_not_per_slot() -> None:
    s, *_ = run(["a", "b", "c"])
    cost = s.cost()
    assert 0 <= cost["cpu_s"] < cost["wall_s"] * 2 + 0.5 and cost["energy_j"] is None  # 2 cores at most


def test_when_every_measurer_is_lost_the_run_ends_and_says_what_is_left() -> None:
    s, outcomes, log, _, _, _ = run(["lost-1", "lost-2"], n_tasks=3)
    assert len(s.lost) == 2 and not log
    assert sorted(s.report()["untuned"]) == ["t0", "t1", "t2"]


def test_no_measurer_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one measurer"):
        ParallelScheduler(tasks(1), lambda t, r: None, [], FakeDB([]), Budget(trials=1), lambda: FakeDB([]))
