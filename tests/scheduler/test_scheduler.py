"""How the sequential scheduler splits a time budget, on a fake clock with fake tuners."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import tensortune.scheduler as sched
from tensortune.budget import Budget
from tensortune.measure import MeasureOptions, MeasurerBase
from tensortune.task import ModelTask
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

    def tune(self, budget, measurer, database=None, callbacks=()):
        assert budget.min_trials == 1  # every task measures one batch, whatever its share
        self.log.append((self.task.name, budget.wall_s))
        self.clock.now += budget.wall_s + self.overrun
        return SimpleNamespace(trials_measured=1, errors={}, best_config=None, best_cost=float("inf"),
                               stop_reason="time_budget", cost=None)

    def search_report(self):
        return {}


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
                            SimpleNamespace(options=MeasureOptions.flushed()), FakeDB(),
                            Budget(wall_s=budget))
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


def test_light_tasks_tuned_last_keep_a_minimum_share_of_the_whole_budget(clock):
    # resnet18's shape: 15 heavy convolutions, then 7 light tasks (1x1 convolutions, dense,
    # pooling) with a thousandth of their FLOPs; every tuner runs 8 s past its budget
    log = run(clock, 15, 3600.0, 8.0, light=7)
    floor = sched.MIN_SHARE * 3600.0 / 22
    assert [name for name, _ in log] == [f"t{k}" for k in range(22)]
    assert all(b + 8.0 >= floor - 1e-6 for _, b in log[15:])  # each light task gets its share with its overrun
    assert clock.now <= 3600.0 + 8.0


def test_no_task_starts_after_the_budget(clock):
    log = run(clock, 5, 10.0, 100.0)  # the first task alone uses everything
    assert len(log) == 1


# ---------------------------------------------------------------- one tuner per task, tuned again
from tensortune.database import Database  # noqa: E402
from tensortune.measure import ErrorKind, MeasureResult  # noqa: E402
from tensortune.scheduler import RoundRobinScheduler  # noqa: E402
from tensortune.space import ConfigSpace  # noqa: E402
from tensortune.tuners import AutoTVMTuner, RandomTuner  # noqa: E402
from tensortune.database.trials import ensure_task, measure_context, record_trial  # noqa: E402


def small_task(k: int) -> SimpleNamespace:
    """A task with a 60-point space that needs no TVM (costs come from :class:`StubMeasurer`)."""
    space = ConfigSpace()
    space.define_choice("a", list(range(12)))
    space.define_choice("b", list(range(5)))
    return SimpleNamespace(space=space, flops=1e6, name=f"small{k}", workload_key=f"small-{k}", op="fake",
                           kernel_class="fake", target_json={"kind": "llvm"}, json_text='{"op": "fake"}')


class StubMeasurer(MeasurerBase):
    """Measures without building: a verified cost per config index (or a runtime error where
    ``fail`` says so); logs every measured (config index, round of the call) pair."""

    def __init__(self, cost=lambda i: 1e-3 * (1 + (i * 37) % 17), fail=lambda i, call: False) -> None:
        self.options = MeasureOptions(number=1, repeat=1, min_repeat_ms=0)
        self.cost, self.fail = cost, fail
        self.calls = 0
        self.log: list[int] = []

    def measure(self, inputs, on_result=None):
        self.calls += 1
        out = []
        for inp in inputs:
            i = inp.config.index
            self.log.append(i)
            r = (MeasureResult([], ErrorKind.RUNTIME, "stub failure", threads=self.options.threads)
                 if self.fail(i, self.calls)
                 else MeasureResult([self.cost(i)], threads=self.options.threads, extra={"verified": True}))
            if on_result is not None:
                on_result(inp, r)
            out.append(r)
        return out

    def verify(self, inp):  # pragma: no cover - check_correctness is on
        raise AssertionError("not called")


def test_round_robin_makes_one_tuner_per_task_and_keeps_its_model(tmp_path, monkeypatch) -> None:
    made: list[tuple[str, int]] = []
    transfers: list[str] = []
    real_enable = AutoTVMTuner.enable_transfer

    def enable(self, database):
        transfers.append(self.task.workload_key)
        return real_enable(self, database)

    monkeypatch.setattr(AutoTVMTuner, "enable_transfer", enable)

    def make(task, round_):
        made.append((task.workload_key, round_))
        return AutoTVMTuner(task, seed=0, batch_size=4, feature="knob", plan_size=4, warmup=4, n_finalists=16,
                            n_random_pool=8, explorer_options={"n_chains": 4, "max_steps": 5})

    seen: dict[str, list[tuple[int, int]]] = {}  # per task: (id of its tuner, id of its cost model) per batch

    def watch(scheduler, tuner, inputs, results):
        seen.setdefault(tuner.task.workload_key, []).append((id(tuner), id(tuner.model)))

    tasks = [ModelTask(small_task(k), 1) for k in range(2)]
    with Database(tmp_path / "rr.db") as db:
        s = RoundRobinScheduler(tasks, make, StubMeasurer(), db, Budget(trials=12), callbacks=[watch], batch_size=4)
        out = s.run()
        keys = [t.task.workload_key for t in tasks]
        assert made == [(k, 0) for k in keys]  # one tuner per task, made once, for round 0
        assert sorted(transfers) == keys  # transfer tried once per tuner, not once per round
        for k in keys:
            assert len(seen[k]) == 3 and len(set(seen[k])) == 1  # 3 rounds, one tuner, one model
            tuner = s.tuners[k]
            # one model refitted as the data grew (after rounds 1 and 2); a tuner made anew each
            # round would have fitted once, on the history it loaded
            assert tuner.fits == 2 and len(tuner.data) == 12
            search = [t for t in db.trials(k) if t.confirmation is None]
            assert len(search) == 12 == db.count(k) and len({t.config_index for t in search}) == 12
        assert [o.trials_total for o in out] == [12, 12] and [o.measured for o in out] == [12, 12]
        for k, o in zip(keys, out):  # each task's best is its confirmed one
            best = db.best(k, measure_context(o.mtask.task, s.measurer.options))
            assert best.confirmation is not None and o.best_s == best.cost


def test_tuning_the_same_tuner_again_loads_only_new_trials(tmp_path) -> None:
    task = small_task(0)
    m = StubMeasurer()
    tuner = RandomTuner(task, seed=1, batch_size=4)
    loaded: list[list[int]] = []
    real_load = tuner.load_history
    tuner.load_history = lambda configs, results: (loaded.append([c.index for c in configs]),  # type: ignore
                                                   real_load(configs, results))
    with Database(tmp_path / "again.db") as db:
        first = tuner.tune(4, m, database=db)
        assert first.trials_measured == 4 and loaded == []
        assert first.confirm_measured == 9  # the top 3 of 4, 3 rounds each
        searched = [i for i in m.log[:4]]
        # someone else stores a trial of a config this tuner has not seen
        other_config = next(c for c in task.space if c.index not in tuner.visited)
        context = measure_context(task, m.options)
        ensure_task(db, task)
        writer = SimpleNamespace(name="other", seed=0)
        record_trial(db, writer, SimpleNamespace(task=task, config=other_config),
                     MeasureResult([9e-3], threads=context.threads, extra={"verified": True}), context)

        second = tuner.tune(8, m, database=db)
        assert loaded == [[other_config.index]]  # only the new trial: neither its own trials nor confirmations
        assert second.trials_measured == 4  # 8 minus its own 4 stored (confirmations do not count)
        search = [t for t in db.trials(task.workload_key) if t.confirmation is None]
        assert len(search) == 9 == db.count(task.workload_key)
        assert len({t.config_index for t in search}) == 9  # nothing measured twice by the search
        assert len(tuner.visited) == 9 and not set(m.log[13:17]) & set(searched)

        calls = m.calls
        third = tuner.tune(8, m, database=db)
        assert third.trials_measured == 0 and third.confirm_measured == 0 and m.calls == calls
        assert loaded == [[other_config.index]]  # nothing new to load
        assert third.best_config.index == db.best(task.workload_key, context).config_index


def test_cpu_budget_caps_the_whole_run(tmp_path) -> None:
    """Each task's tune call gets what is left of the CPU budget; no task starts once it is spent."""
    from tensortune.measure.cost import RunCost

    seen: list[float] = []

    class CpuTuner:
        def __init__(self, task) -> None:
            self.task = task

        def tune(self, budget, measurer, database=None, callbacks=()):
            seen.append(budget.cpu_s)
            return SimpleNamespace(trials_measured=4, errors={}, best_config=None, best_cost=float("inf"),
                                   stop_reason="cpu_budget", cost=RunCost(wall_s=1.0, tuner_cpu_s=4.0))

        def search_report(self):
            return {}

    untimed = SimpleNamespace(options=MeasureOptions.flushed(), build_s=None, run_s=None)  # as MeasurerBase's defaults
    s = SequentialScheduler(tasks(5), lambda task, r: CpuTuner(task), untimed, FakeDB(), Budget(trials=100, cpu_s=10.0))
    s.run()
    assert seen == pytest.approx([10.0, 6.0, 2.0])  # the third call spends past 10: no fourth
    cost = s.cost()
    assert cost["cpu_s"] == pytest.approx(12.0) and cost["stopped_by"] == "cpu_budget" and cost["energy_j"] is None
    assert "build_s" not in cost  # a measurer that keeps no split: none is reported
    s.measurer = SimpleNamespace(options=MeasureOptions.flushed(), build_s=0.0, run_s=0.0)
    cost = s.cost()  # one that does: the rest of the wall time is the search's
    assert cost["build_s"] == cost["run_s"] == 0.0 and cost["search_s"] == pytest.approx(cost["wall_s"], abs=1e-3)


def test_a_tuner_whose_set_up_outlasts_its_share_still_measures_one_batch(tmp_path, monkeypatch) -> None:
    # efficientnet_b0's autotvm run: late in the run the transfer model's fit took 9-10 s, more
    # than the shares left to 7 light tasks, and they measured nothing; now each measures a batch
    c = Clock()
    monkeypatch.setattr(sched, "time", c)
    import tensortune.tuners.session as session

    import tensortune.budget as budget

    monkeypatch.setattr(session, "time", c)
    monkeypatch.setattr(budget, "time", c)  # the budget's meter keeps the session's clock

    class SlowStart(RandomTuner):
        def begin(self, database):
            c.now += 10.0  # the set-up alone is longer than the budget

    class Ticking(StubMeasurer):
        def measure(self, inputs, on_result=None):
            c.now += 0.1 * len(inputs)
            return super().measure(inputs, on_result)

    m = Ticking()
    db = Database(tmp_path / "slow.db")
    alone = SlowStart(small_task(0), seed=0, batch_size=4).tune(Budget(trials=12, wall_s=2.0), m, database=db)
    assert alone.trials_measured == 0 and alone.stop_reason == "time_budget"  # a plain call keeps its clock
    tasks_ = [ModelTask(small_task(k), 1) for k in range(3)]
    s = SequentialScheduler(tasks_, lambda task, r: SlowStart(task, seed=0, batch_size=4), m, db,
                            Budget(trials=12, wall_s=25.0))
    out = s.run()
    assert [o.measured for o in out] == [4, 4, 4]  # one batch each, then the clock stops them
    assert all(o.stop_reason == "time_budget" for o in out)
    db.close()
