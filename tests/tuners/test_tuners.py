"""Tests of the baseline tuners and the shared tuning loop.

Loop logic (proposal sequences, genetic generations, stopping rules) is checked with fake
results and a fake measurer; real tuning runs use one Measurer for the whole module.
"""
from __future__ import annotations

import itertools
import random
from types import SimpleNamespace
from typing import Callable, Sequence

import pytest
from tvm import te

from tensortune.budget import Budget
from tensortune.database import Database
from tensortune.measure import ErrorKind, MeasureInput, MeasureOptions, MeasureResult, Measurer, MeasurerBase
from tensortune.space import ConfigSpace
from tensortune.task import Task
from tensortune.tuners import TUNERS, GeneticTuner, GridTuner, RandomTuner, get_tuner
from tensortune.tuners.baselines import GA_ELITE_NUM, GA_MUTATION_PROB, GA_POP_SIZE
from tensortune.tuners.session import CONFIRM_RETRIES



TUNER_NAMES = ["random", "grid", "genetic", "autotvm"]
MATMUL = ("matmul", (32, 48, 64))


# ---------------------------------------------------------------- fixtures and helpers
@pytest.fixture(scope="module")
def measurer():
    # limits only a hanging candidate reaches: real builds on a busy 2-core machine can be slow
    m = Measurer(MeasureOptions(number=1, repeat=2, min_repeat_ms=1, build_timeout=300.0, run_timeout=300.0))
    m.start()
    yield m
    m.close()


@pytest.fixture(scope="module")
def matmul_task() -> Task:
    return Task.from_op(*MATMUL)


@pytest.fixture(scope="module")
def tiny_task() -> Task:
    """A PrimFunc task whose generic space has 8 configs (only the unroll knobs vary)."""
    a = te.placeholder((1,), name="A")
    b = te.compute((1,), lambda i: te.max(a[i] * 2.0, 0.0), name="B")
    t = Task.from_primfunc(te.create_prim_func([a, b]))
    assert len(t.space) == 8
    return t


def plain_space(constrained: bool = False) -> ConfigSpace:
    """10 x 6 x 5 x 6 = 1800 points, no TVM involved."""
    s = ConfigSpace()
    s.define_split("a", 48, 2)
    s.define_choice("b", list(range(6)))
    s.define_choice("c", list(range(5)))
    s.define_reorder("d", 3)
    if constrained:
        s.add_constraint("b_not_5", lambda c: c["b"] != 5)
        s.add_constraint("c_even", lambda c: c["c"] % 2 == 0)
    return s


def fake_task(space: ConfigSpace) -> SimpleNamespace:
    return SimpleNamespace(space=space, flops=1e6, name="fake", workload_key="fake-key", target_json={"kind": "llvm"})


def fake_result(index: int) -> MeasureResult:
    """A deterministic result per config: every 5th fails, the others get a pseudo-random cost."""
    if index % 5 == 0:
        return MeasureResult([], ErrorKind.RUNTIME, "fake failure")
    return MeasureResult([1e-3 * (1 + (index * 7919) % 101)])


def propose(tuner, rounds: int = 5, n: int = 16) -> list[int]:
    """Indices proposed over ``rounds`` batches, each fed back with fake results."""
    seq: list[int] = []
    for _ in range(rounds):
        batch = tuner.next_batch(n)
        tuner.update(batch, [fake_result(c.index) for c in batch])
        seq += [c.index for c in batch]
    return seq


def make_tuner(name: str, task, seed: int = 0, **kw):
    if name == "genetic":
        kw.setdefault("pop_size", 20)
    if name == "autotvm":  # fake tasks cannot be scheduled: learn on the config vector
        kw.setdefault("feature", "knob")
    return get_tuner(name, task, seed=seed, **kw)


class FakeMeasurer(MeasurerBase):
    """Stands in for Measurer: costs come from ``cost_of(call_number, config)``; a fake clock
    advances by ``tick`` seconds per measured candidate."""

    def __init__(self, cost_of: Callable[[int, object], float | None], tick: float = 0.0) -> None:
        self.options = MeasureOptions(check_correctness=True)
        self.cost_of, self.tick = cost_of, tick
        self.calls = 0
        self.now = 0.0
        self.measured: list[int] = []

    def clock(self) -> float:
        return self.now

    def measure(self, inputs: Sequence[MeasureInput], on_result=None) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            self.calls += 1
            self.now += self.tick
            self.measured.append(inp.config.index)
            cost = self.cost_of(self.calls, inp.config)
            r = MeasureResult([cost]) if cost is not None else MeasureResult([], ErrorKind.RUNTIME, "fake")
            out.append(r)
            if on_result is not None:
                on_result(inp, r)
        return out


class Recorder:
    """Tuning callback collecting the measured config indices and results."""

    def __init__(self) -> None:
        self.indices: list[int] = []
        self.results: list[MeasureResult] = []
        self.batches = 0

    def __call__(self, tuner, inputs, results) -> None:
        self.batches += 1
        self.indices += [i.config.index for i in inputs]
        self.results += list(results)


# ---------------------------------------------------------------- registry
def test_get_tuner() -> None:
    task = fake_task(plain_space())
    assert set(TUNERS) == {"random", "grid", "genetic", "autotvm", "model-based", "oneshot", "chameleon", "trimmer", "fasor"}
    assert isinstance(get_tuner("random", task), RandomTuner)
    assert isinstance(get_tuner("grid", task), GridTuner)
    assert isinstance(get_tuner(GeneticTuner, task, seed=3), GeneticTuner)
    assert get_tuner("genetic", task, seed=7).seed == 7
    with pytest.raises(ValueError):
        get_tuner("nope", task)


# ---------------------------------------------------------------- proposal sequences (no measuring)
@pytest.mark.parametrize("name", TUNER_NAMES)
def test_same_seed_same_sequence(name: str) -> None:
    a = propose(make_tuner(name, fake_task(plain_space()), seed=1))
    b = propose(make_tuner(name, fake_task(plain_space()), seed=1))
    assert a == b
    assert len(a) == 80 and len(set(a)) == 80  # never the same config twice


@pytest.mark.parametrize("name", ["random", "genetic", "autotvm"])
def test_different_seeds_differ(name: str) -> None:
    a = propose(make_tuner(name, fake_task(plain_space()), seed=1))
    b = propose(make_tuner(name, fake_task(plain_space()), seed=2))
    assert a != b


@pytest.mark.parametrize("name", TUNER_NAMES)
def test_proposals_valid_and_unvisited_with_constraints(name: str) -> None:
    space = plain_space(constrained=True)
    tuner = make_tuner(name, fake_task(space), seed=4)
    seq = propose(tuner, rounds=6, n=10)
    assert len(seq) == 60 and len(set(seq)) == 60
    assert all(space.is_valid(space.get(i)) for i in seq)


def test_grid_visits_in_index_order() -> None:
    space = plain_space(constrained=True)
    seq = propose(GridTuner(fake_task(space)), rounds=4, n=7)
    assert seq == [c.index for c in itertools.islice(space, 28)]
    assert seq == sorted(seq)


def test_tuners_skip_configs_from_history() -> None:
    space = plain_space()
    history = [space.get(i) for i in range(0, 40, 2)]
    grid = GridTuner(fake_task(space))
    grid.load_history(history, [fake_result(c.index) for c in history])
    assert [c.index for c in grid.next_batch(10)] == [1, 3, 5, 7, 9, 11, 13, 15, 17, 19]
    small = ConfigSpace([space.knob("b"), space.knob("c")])  # 30 points, 25 of them in history
    rnd = RandomTuner(fake_task(small))
    past = [small.get(i) for i in range(25)]
    rnd.load_history(past, [fake_result(c.index) for c in past])
    assert sorted(c.index for c in rnd.next_batch(10)) == [25, 26, 27, 28, 29]


def test_history_sets_best() -> None:
    space = plain_space()
    tuner = RandomTuner(fake_task(space))
    cfgs = [space.get(i) for i in (1, 2, 5, 7)]
    results = [MeasureResult([3e-3]), MeasureResult([1e-3]), MeasureResult([], ErrorKind.COMPILE),
               MeasureResult([2e-3])]
    tuner.load_history(cfgs, results)
    assert tuner.best_config.index == 2 and tuner.best_cost == pytest.approx(1e-3)
    assert tuner.visited == {1, 2, 5, 7}


# ---------------------------------------------------------------- genetic population logic
def test_genetic_defaults() -> None:
    assert (GA_POP_SIZE, GA_ELITE_NUM, GA_MUTATION_PROB) == (100, 3, 0.1)
    ga = GeneticTuner(fake_task(plain_space()))
    assert (ga.pop_size, ga.elite_num, ga.mutation_prob) == (100, 3, 0.1)
    small = ConfigSpace([plain_space().knob("b")])  # 6 points
    ga_small = GeneticTuner(fake_task(small))
    assert ga_small.pop_size == 6 and ga_small.elite_num == 3


def test_genetic_first_generation_is_pop_size_random_configs() -> None:
    space = plain_space()
    ga = GeneticTuner(fake_task(space), seed=5, pop_size=30)
    first = [c.index for c in ga.next_batch(30)]
    assert len(first) == 30 and len(set(first)) == 30
    assert first == [c.index for c in space.sample(random.Random(5), 30)]


def test_genetic_skips_configs_measured_elsewhere_without_losing_its_generation() -> None:
    """Configs of the pending generation that got measured meanwhile (e.g. loaded from the
    database) are skipped, and the batch is still filled from the same generation."""
    space = plain_space()
    ga = GeneticTuner(fake_task(space), seed=2, pop_size=30)
    generation = [c.index for c in space.sample(random.Random(2), 30)]
    first = [c.index for c in ga.next_batch(10)]
    assert first == generation[:10]
    ga.visited.update(generation[10:15])
    second = [c.index for c in ga.next_batch(10)]
    assert second == generation[15:25]


def test_genetic_children_come_from_scored_parents() -> None:
    """After pop_size results, the next generation is made of unvisited, valid children whose
    every knob position comes from one of the parents that scored (mutation off)."""
    space = plain_space()
    pop, elite = 10, 2
    ga = GeneticTuner(fake_task(space), seed=0, pop_size=pop, elite_num=elite, mutation_prob=0.0)
    first = ga.next_batch(pop)
    assert len(first) == pop
    good = first[:4]  # 4 succeed, 6 fail: failures have score 0 and never become parents
    ga.update(first, [MeasureResult([1e-3 * (k + 1)]) if c in good else MeasureResult([], ErrorKind.RUNTIME)
                      for k, c in enumerate(first)])
    children = ga.next_batch(pop - elite)
    assert len(children) == pop - elite
    assert len({c.index for c in children}) == len(children)
    parent_pos = [space.positions(p) for p in good]
    for c in children:
        assert c.index not in ga.visited and space.is_valid(c)
        for j, p in enumerate(space.positions(c)):
            assert p in {pp[j] for pp in parent_pos}, (c, j)


def test_genetic_generation_size_respects_elites() -> None:
    space = plain_space(constrained=True)
    ga = GeneticTuner(fake_task(space), seed=1, pop_size=12, elite_num=3)
    first = ga.next_batch(12)
    ga.update(first, [fake_result(c.index) for c in first])
    gen = ga._next_generation(ga.visited)  # white box: one generation keeps the elites' slots
    assert len(gen) == 12 - 3
    assert all(space.is_valid(c) and c.index not in ga.visited for c in gen)
    assert len({c.index for c in gen}) == len(gen)


# ---------------------------------------------------------------- the loop with a fake measurer
def test_early_stopping_after_no_improvement() -> None:
    tuner = RandomTuner(fake_task(plain_space()), batch_size=1)
    m = FakeMeasurer(lambda k, c: 1.0 if k == 1 else 2.0)
    res = tuner.tune(Budget(trials=100, early_stopping=5), m)
    assert res.stop_reason == "early_stopping"
    assert res.trials_measured == 6 == m.calls
    assert res.best_cost == 1.0 and res.verified


def test_early_stopping_counts_from_last_improvement() -> None:
    costs = {1: 1.0, 5: 0.5}
    tuner = RandomTuner(fake_task(plain_space()), batch_size=1)
    res = tuner.tune(Budget(trials=100, early_stopping=5), FakeMeasurer(lambda k, c: costs.get(k, 2.0)))
    assert res.stop_reason == "early_stopping" and res.trials_measured == 10
    assert res.best_cost == 0.5


def test_no_early_stop_while_improving() -> None:
    tuner = RandomTuner(fake_task(plain_space()), batch_size=2)
    res = tuner.tune(Budget(trials=20, early_stopping=3), FakeMeasurer(lambda k, c: 1.0 / k))
    assert res.stop_reason == "trials" and res.trials_measured == 20
    assert [h["best"] for h in res.history] == sorted((h["best"] for h in res.history), reverse=True)


def test_errors_counted_and_failures_never_best() -> None:
    rec = Recorder()
    tuner = GridTuner(fake_task(plain_space()), batch_size=4)
    res = tuner.tune(12, FakeMeasurer(lambda k, c: None if k % 3 == 0 else float(k)), callbacks=[rec])
    assert res.trials_measured == 12 and dict(res.errors) == {"runtime": 4}
    assert res.best_cost == 1.0 and res.best_config.index == rec.indices[0]
    assert rec.batches == 3 and len(rec.indices) == 12
    assert [h["trial"] for h in res.history] == list(range(1, 13))


def test_time_budget_with_fake_clock(monkeypatch) -> None:
    m = FakeMeasurer(lambda k, c: 1.0, tick=1.0)
    import tensortune.budget as budget

    monkeypatch.setattr(budget, "time", SimpleNamespace(perf_counter=m.clock))  # the budget's meter reads the clock
    tuner = RandomTuner(fake_task(plain_space()), batch_size=1)
    res = tuner.tune(Budget(trials=100, wall_s=3.5), m)
    assert res.stop_reason == "time_budget"
    assert res.trials_measured == 4 == m.calls  # checked before each batch: 0, 1, 2, 3 s go on, 4 s stops


def test_all_failures_give_no_best() -> None:
    tuner = RandomTuner(fake_task(plain_space()), batch_size=4)
    res = tuner.tune(8, FakeMeasurer(lambda k, c: None))
    assert res.best_config is None and res.best_gflops == 0.0 and not res.verified
    assert res.to_json()["best_latency_ms"] is None and res.to_json()["errors"] == {"runtime": 8}


# ---------------------------------------------------------------- real tuning
@pytest.mark.parametrize("name", TUNER_NAMES)
def test_tune_measures_exactly_n_distinct_configs(name: str, measurer, matmul_task) -> None:
    rec = Recorder()
    tuner = get_tuner(name, matmul_task, seed=0, batch_size=4)
    res = tuner.tune(6, measurer, callbacks=[rec])
    assert res.trials_measured == 6 and res.stop_reason == "trials"
    assert len(rec.indices) == 6 and len(set(rec.indices)) == 6
    assert all(matmul_task.space.is_valid(matmul_task.space.get(i)) for i in rec.indices)
    assert res.verified and res.best_gflops > 0
    assert res.best_config.index in rec.indices
    assert res.best_cost == min(r.cost for r in rec.results)
    assert res.best_gflops == pytest.approx(matmul_task.flops / res.best_cost / 1e9)
    if name == "grid":  # the template default first, then index order, nothing skipped
        d = matmul_task.default_config().index
        assert rec.indices == [d] + [c.index for c in itertools.islice(matmul_task.space, 6) if c.index != d][:5]


def test_best_is_verified_when_correctness_check_is_off(measurer, matmul_task) -> None:
    measurer.options.check_correctness = False
    try:
        res = RandomTuner(matmul_task, seed=3, batch_size=3).tune(3, measurer)
    finally:
        measurer.options.check_correctness = True
    assert res.trials_measured == 3
    assert res.verified and res.best_config is not None and res.best_gflops > 0


def test_time_budget_stops(measurer, matmul_task) -> None:
    res = RandomTuner(matmul_task).tune(Budget(trials=50, wall_s=1e-9), measurer)
    assert res.stop_reason == "time_budget"
    assert res.trials_measured == 0 and res.best_config is None and not res.verified


@pytest.mark.parametrize("name", TUNER_NAMES)
def test_small_space_is_exhausted(name: str, measurer, tiny_task) -> None:
    rec = Recorder()
    tuner = get_tuner(name, tiny_task, seed=0)
    res = tuner.tune(20, measurer, callbacks=[rec])
    assert res.stop_reason == "space_exhausted"
    assert res.trials_measured == 8
    assert sorted(rec.indices) == list(range(8))  # each config exactly once
    assert res.verified and res.best_gflops > 0


@pytest.mark.parametrize("name", TUNER_NAMES)
def test_resume_from_database(name: str, measurer, matmul_task, tmp_path) -> None:
    key = matmul_task.workload_key

    def searched() -> list[int]:  # config indices of the search trials (confirmations left out)
        return [t.config_index for t in db.trials(key) if t.confirmation is None]

    with Database(tmp_path / "tune.db") as db:
        first = get_tuner(name, matmul_task, seed=0, batch_size=4).tune(4, measurer, database=db)
        # its top 3, and the default when not among them, 3 rounds each (once more, after a quiet
        # spell, where a config was timed while the machine was busy in every round)
        groups = [n * (1 + retry) for n in (9, 12) for retry in range(1 + CONFIRM_RETRIES)]
        assert first.trials_measured == 4 and first.confirm_measured in groups
        before = searched()
        assert len(before) == 4

        rec = Recorder()
        second = get_tuner(name, matmul_task, seed=0, batch_size=4).tune(7, measurer, database=db,
                                                                           callbacks=[rec])
        assert second.trials_measured == 3  # confirmations do not count against the 7
        assert not set(rec.indices) & set(before)  # nothing stored was measured again
        after = searched()
        assert len(after) == 7 and len(set(after)) == 7
        assert after[:4] == before and sorted(after[4:]) == sorted(rec.indices)
        assert all(t.tuner == name and t.seed == 0 for t in db.trials(key))

        third = get_tuner(name, matmul_task, seed=0).tune(7, measurer, database=db)
        assert third.trials_measured == 0 and third.confirm_measured == 0 and db.count(key) == 7
        best_stored = db.best(key, third.context)  # the lowest median of the latest confirmation
        assert best_stored.confirmation is not None and third.confirmation
        assert third.best_config.index == best_stored.config_index
        assert third.best_cost == pytest.approx(best_stored.cost)
        assert third.verified


def test_first_batch_measures_the_template_default_unless_told_not_to(matmul_task, measurer) -> None:
    default = matmul_task.default_config().index
    seen: list[int] = []
    record = lambda tuner, inputs, results: seen.extend(i.config.index for i in inputs)  # noqa: E731
    RandomTuner(matmul_task, seed=5, batch_size=4).tune(4, measurer, callbacks=[record])
    plain = [c.index for c in RandomTuner(matmul_task, seed=5, batch_size=4).next_batch(4)]
    assert seen == [default] + [i for i in plain if i != default][:3]
    seen.clear()
    RandomTuner(matmul_task, seed=5, batch_size=4, start_from_default=False).tune(4, measurer, callbacks=[record])
    assert seen == plain
