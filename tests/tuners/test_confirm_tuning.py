"""A tune call with a database ends by confirming its top configs: re-measured, interleaved over
rounds, stored as marked trials, and the best is the lowest median, not one lucky trial."""
from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest

from tensortune.database import Database
from tensortune.measure import ErrorKind, MeasureInput, MeasureOptions, MeasureResult, Measurer, MeasurerBase
from tensortune.space import ConfigSpace
from tensortune.task import Task
from tensortune.tuners import GridTuner, RandomTuner
from tensortune.tuners.session import CONFIRM_ROUNDS, CONFIRM_TOP
from tensortune.database.trials import ensure_task, measure_context, record_trial

#: True costs of the stub task's configs: 7 is the fastest, 3 the one measured once, luckily, at 0.5 ms.
COSTS = {7: 1e-3, 3: 2e-3}
LUCKY = 0.5e-3


def cost_of(index: int) -> float:
    return COSTS.get(index, 3e-3 + 1e-4 * index)


def stub_task(n: int = 10) -> SimpleNamespace:
    space = ConfigSpace()
    space.define_choice("a", list(range(n)))
    return SimpleNamespace(space=space, flops=1e6, name="stub", workload_key=f"stub-{n}", op="fake",
                           kernel_class="fake", target_json={"kind": "llvm"}, json_text='{"op": "fake"}')


class StubMeasurer(MeasurerBase):
    """Costs from ``cost`` (verified unless told otherwise) without building anything;
    ``fail(index, call)`` makes a runtime error (``call`` counts ``measure`` calls from 1).
    ``calls`` logs the config indices of every call."""

    def __init__(self, cost=cost_of, fail=lambda index, call: False, verified: bool = True) -> None:
        self.options = MeasureOptions(number=1, repeat=1, min_repeat_ms=0)
        self.cost, self.fail = cost, fail
        self.extra = {"verified": True} if verified else {}
        self.calls: list[list[int]] = []

    def measure(self, inputs, on_result=None):
        self.calls.append([i.config.index for i in inputs])
        out = []
        for inp in inputs:
            i = inp.config.index
            r = (MeasureResult([], ErrorKind.RUNTIME, "stub", threads=self.options.threads)
                 if self.fail(i, len(self.calls)) else
                 MeasureResult([self.cost(i)], threads=self.options.threads, extra=dict(self.extra)))
            if on_result is not None:
                on_result(inp, r)
            out.append(r)
        return out


def stage_lucky(db: Database, task, m: StubMeasurer, index: int = 3, cost: float = LUCKY) -> int:
    """Store one lucky trial of config ``index`` by another tuner; return its id."""
    ensure_task(db, task)
    writer = SimpleNamespace(name="other", seed=0)
    return record_trial(db, writer, MeasureInput(task, task.space.get(index)),
                        MeasureResult([cost], threads=m.options.threads, extra={"verified": True}),
                        measure_context(task, m.options))


def test_defaults() -> None:
    assert (CONFIRM_TOP, CONFIRM_ROUNDS) == (3, 3)
    t = RandomTuner(stub_task())
    assert (t.confirm_top, t.confirm_rounds) == (3, 3)


def test_a_lucky_trial_loses_to_the_lower_median_after_confirmation(tmp_path) -> None:
    task, m = stub_task(), StubMeasurer()
    key = task.workload_key
    with Database(tmp_path / "c.db") as db:
        stage_lucky(db, task, m)
        context = measure_context(task, m.options)
        res = GridTuner(task, batch_size=4).tune(9, m, database=db)
        assert res.trials_measured == 9 and res.confirm_measured == 9
        # the search: every config but the stored one, once; then the top 3 (3, 7, 0) in 3 interleaved rounds
        assert sorted(i for call in m.calls[:3] for i in call) == [i for i in range(10) if i != 3]
        assert m.calls[3:] == [[3, 7, 0]] * 3
        # the lucky trial is still the fastest single trial, but not the best
        fastest = min(db.trials(key, ok_only=True), key=lambda t: t.cost)
        assert fastest.config_index == 3 and fastest.cost == pytest.approx(LUCKY)
        best = db.best(key, context)
        assert best.config_index == 7 and best.cost == pytest.approx(1e-3)
        assert res.best_config.index == 7 and res.best_cost == pytest.approx(1e-3)
        assert res.best_source == {"from": "this run"} and res.verified
        group = best.confirmation["group"]
        assert res.confirmation == {"group": group, "rounds": 3, "configs": [0, 3, 7]}
        assert res.to_json()["confirmation"] == res.confirmation and res.to_json()["confirm_measured"] == 9
        assert "median of 3 confirmation rounds" in res.describe_source()
        # stored and marked: round r of 3, one group, by this tuner, in this context
        confirms = [t for t in db.trials(key) if t.confirmation is not None]
        assert [(t.config_index, t.extra["confirm"]["round"]) for t in confirms] == \
            [(i, r) for r in (1, 2, 3) for i in (3, 7, 0)]
        assert all(t.extra == {"confirm": {"group": group, "round": t.extra["confirm"]["round"], "of": 3}}
                   and t.tuner == "grid" and t.context == context and t.verified for t in confirms)
        # confirmations are no search trials: not counted, not against the budget
        assert db.count(key) == 10 and db.count(key, confirmations=True) == 19
        again = GridTuner(task, batch_size=4).tune(9, m, database=db)
        assert again.trials_measured == 0 and again.confirm_measured == 0 and len(m.calls) == 6
        assert again.best_config.index == 7 and again.best_source["from"] == "database"
        assert again.best_source["trial_id"] == best.id and again.confirmation == res.confirmation


def test_a_failed_round_drops_that_config(tmp_path) -> None:
    task = stub_task()
    m = StubMeasurer(fail=lambda index, call: index == 7 and call == 5)  # config 7 fails in round 2
    with Database(tmp_path / "c.db") as db:
        stage_lucky(db, task, m)
        res = GridTuner(task, batch_size=4).tune(9, m, database=db)
        # 7 is out; the once-lucky 3 now stands on its median (2 ms), not on its 0.5 ms
        assert res.best_config.index == 3 and res.best_cost == pytest.approx(2e-3)
        assert db.best(task.workload_key, measure_context(task, m.options)).config_index == 3
        assert res.errors == {}  # confirmation errors are no search errors


def test_confirmation_runs_again_only_when_the_top_configs_change(tmp_path) -> None:
    costs = {0: 1.0e-3, 1: 1.1e-3, 2: 1.2e-3, 12: 0.5e-3}
    task, m = stub_task(20), StubMeasurer(cost=lambda i: costs.get(i, 5e-3))
    key = task.workload_key
    with Database(tmp_path / "c.db") as db:
        tuner = GridTuner(task, batch_size=5)
        first = tuner.tune(5, m, database=db)
        assert first.confirm_measured == 9 and first.best_config.index == 0
        second = tuner.tune(10, m, database=db)  # configs 5-9, all slower: nothing new to confirm
        assert second.trials_measured == 5 and second.confirm_measured == 0
        assert second.confirmation == first.confirmation and second.best_config.index == 0
        third = tuner.tune(15, m, database=db)  # config 12 is new at the top: a new group
        assert third.trials_measured == 5 and third.confirm_measured == 9
        assert m.calls[-1] == [12, 0, 1] and third.best_config.index == 12
        assert third.confirmation["group"] != first.confirmation["group"]
        assert db.count(key) == 15 and db.count(key, confirmations=True) == 33


def test_no_checkation_without_a_database_measurements_or_top(tmp_path) -> None:
    task = stub_task()
    m = StubMeasurer()
    res = GridTuner(task, batch_size=4).tune(6, m)
    assert res.confirm_measured == 0 and sum(map(len, m.calls)) == 6 and res.confirmation == {}
    with Database(tmp_path / "c.db") as db:
        off = GridTuner(task, batch_size=4)
        off.confirm_top = 0
        res = off.tune(6, m, database=db)
        assert res.confirm_measured == 0 and db.count(task.workload_key, confirmations=True) == 6
        assert res.best_config.index == 3 and res.confirmation == {}  # the fastest single trial, as before
        res = GridTuner(stub_task(12), batch_size=4).tune(4, StubMeasurer(verified=False), database=db)
        assert res.trials_measured == 4 and res.confirm_measured == 0  # nothing verified: nothing to confirm


@pytest.fixture(scope="module")
def measurer():
    m = Measurer(MeasureOptions(number=1, repeat=1, min_repeat_ms=0, build_timeout=300.0, run_timeout=300.0))
    m.start()
    yield m
    m.close()


def test_real_measurements_confirm_and_a_staged_lucky_trial_is_not_the_best(measurer, tmp_path) -> None:
    task = Task.from_op("matmul", (16, 16, 16))
    key = task.workload_key
    with Database(tmp_path / "real.db") as db:
        default = task.default_config().index
        lucky = stage_lucky(db, task, measurer, index=default, cost=1e-12)  # impossibly fast, once
        res = RandomTuner(task, seed=0, batch_size=3).tune(3, measurer, database=db)
        # 3 configs x 3 rounds, measured once more when a busy machine made one noisy in every round
        assert res.trials_measured == 3 and res.confirm_measured in (9, 18) and res.verified
        context = measure_context(task, measurer.options)
        best = db.best(key, context)
        assert best.id != lucky and best.confirmation is not None and best.cost > 1e-9
        assert res.best_config.index == best.config_index and res.best_cost == pytest.approx(best.cost)
        rounds = [t for t in db.trials(key) if t.confirmation is not None
                  and t.config_index == best.config_index
                  and t.confirmation["group"] == best.confirmation["group"]]
        quiet = sorted(t.cost for t in rounds if not t.noisy) or sorted(t.cost for t in rounds)
        # the median of its rounds; a round timed while the host was busy is set aside for a quiet one
        assert len(rounds) == 3 and best.cost == pytest.approx(statistics.median_low(quiet))
        confirms = [t for t in db.trials(key) if t.confirmation is not None]
        assert default in {t.config_index for t in confirms}  # the lucky config was re-measured for real
        assert all(t.verified and t.ok for t in confirms)


def test_the_default_joins_the_confirmation_and_wins_when_it_is_fastest(tmp_path) -> None:
    """The default (9) is truly fastest but its one measurement was unlucky; 0-2 were measured
    once, luckily. Judged alike in the interleaved rounds, the default is the best."""
    task = stub_task()
    task.default_config = lambda: task.space.get(9)
    true = {9: 1e-3}
    seen: set[int] = set()

    def cost(i: int) -> float:
        first = i not in seen
        seen.add(i)
        if first:
            return 5e-3 if i == 9 else 0.8e-3
        return true.get(i, 2e-3)

    with Database(tmp_path / "d.db") as db:
        m = StubMeasurer(cost=cost)
        res = GridTuner(task, start_from_default=True).tune(4, m, database=db)
        assert m.calls[0][0] == 9 and res.trials_measured == 4
        assert res.confirm_measured == 4 * CONFIRM_ROUNDS  # the top 3 and the default
        assert res.best_config.index == 9 and res.best_cost == pytest.approx(1e-3)
    seen.clear()
    with Database(tmp_path / "e.db") as db:  # not started from the default: it is not confirmed
        res = GridTuner(task, start_from_default=False).tune(4, StubMeasurer(cost=cost), database=db)
        assert res.confirm_measured == 3 * CONFIRM_ROUNDS and res.best_cost == pytest.approx(2e-3)
