"""The in-model check: each tuned task's best, default and runner-up timed inside the model."""
from __future__ import annotations

import json
import shutil
import statistics

import pytest

from tensortune.budget import Budget
from tensortune.database import Database, describe_timing
from tensortune.measure import MeasureOptions, Measurer
from tensortune.models import compile as compile_mod
from tensortune.models import in_model as confirm_mod
from tensortune.models.compile import compile_model, model_tasks
from tensortune.models.in_model import check_in_model
from tensortune.models.importer import load_model
from tensortune.models.reference import TorchRunner, compare_outputs
from tensortune.scheduler import SequentialScheduler
from tensortune.tuners import get_tuner

from tiny import tiny


@pytest.fixture(scope="module")
def model():
    m, x = tiny()
    return load_model(m, x)


@pytest.fixture(scope="module")
def tuned_file(model, tmp_path_factory):
    """The tiny model tuned by random search, 4 trials a task (the default first), once."""
    path = tmp_path_factory.mktemp("confirm") / "tuned.db"
    make = lambda task, r: get_tuner("random", task, seed=r, batch_size=4)  # noqa: E731
    with Database(str(path)) as db, Measurer(MeasureOptions.flushed(build_timeout=300.0, run_timeout=300.0)) as m:
        SequentialScheduler(model_tasks(model), make, m, db, Budget(trials=4)).run()
    return path


@pytest.fixture()
def tuned_db(tuned_file, tmp_path):
    """A copy of the tuned database of its own for each test (they add confirmations to it)."""
    shutil.copy(tuned_file, tmp_path / "c.db")
    db = Database(str(tmp_path / "c.db"))
    yield db
    db.close()


def ctx_of(model, wk):
    from tensortune.database.trials import measure_context

    task = next(t.task for t in model_tasks(model) if t.task.workload_key == wk)
    return measure_context(task, MeasureOptions.flushed())


def _in_model(db, model, wk):
    return [t for t in db.trials(wk) if json.loads(t.timing or "{}").get("mode") == "in-model"]


def test_confirm_records_an_in_model_group_that_compile_prefers(model, tuned_db):
    db = tuned_db
    counts = {t.task.workload_key: db.count(t.task.workload_key) for t in model_tasks(model)}
    rep = check_in_model(model, db, rounds=2, runs=2, alternatives=1, tolerance=float("inf"))
    # no whole-variant fallback: under load a parallel config of a microsecond function can read 10x slower
    # (a thread waits for a busy core); the fallback has its own tests below, on planted timings
    assert rep.tasks and all(v["ok"] for v in rep.variants), rep.variants
    assert [v["label"] for v in rep.variants][:2] == ["tuned", "untuned"]
    assert set(rep.latency_ms) == {"tuned", "untuned", "confirmed"} and all(x > 0 for x in rep.latency_ms.values())
    checked = [t for t in rep.tasks if len(t.candidates) > 1]
    assert checked, "no task had a second candidate"
    for t in rep.tasks:
        assert db.count(t.workload_key) == counts[t.workload_key]  # a confirmation group: no budget spent
        stored = _in_model(db, model, t.workload_key)
        if len(t.candidates) == 1:
            assert not stored
            continue
        labels = {c.label for c in t.candidates}
        assert labels >= {"best"} and labels <= {"best", "default", "runner-up 1"}
        assert {s.config_index for s in stored} == {c.config.index for c in t.candidates}
        assert all(s.tuner == "in-model" and s.verified for s in stored), [(s.error, s.error_msg) for s in stored]
        assert {s.confirmation["group"] for s in stored} == {rep.group}, (rep.kept, rep.paired_ratio)
        assert all(len(s.costs) >= 2 for s in stored)  # the round's inferences of every variant using it
        assert describe_timing(stored[0].timing) == f"in-model (inside {model.name})"
        # the chosen config is the one with the lowest median over its rounds (Database.best)
        score = {c.label: statistics.median_low([statistics.median(x) for x in c.seconds if x]) for c in t.candidates}
        assert t.chosen == min(score, key=score.get)
    cm = compile_model(model, db)
    by_key = {c.workload_key: c for c in cm.choices}
    for t in checked:
        choice = by_key[t.workload_key]
        assert choice.source == "tuned" and "confirmed inside the model" in choice.reason
    ref = TorchRunner(model.torch_module).run(model.example_inputs)
    assert compare_outputs(cm.run(model.example_inputs), ref).ok
    # a best found after the check makes the check stale: compiling takes the new best alone
    import dataclasses

    t = checked[0]
    old_best = db.best(t.workload_key, ctx_of(model, t.workload_key))
    other = next(c for c in t.candidates if c.config.index != old_best.config_index)
    db.add_trial(dataclasses.replace(old_best, config_index=other.config.index, config=other.config.to_json()["knobs"],
                                     costs=[old_best.cost / 2], id=None,
                                     extra={"confirm": {"group": "later", "round": 1, "of": 1}}))
    assert db.best(t.workload_key, ctx_of(model, t.workload_key)).config_index == other.config.index
    choice = {c.workload_key: c for c in compile_model(model, db).choices}[t.workload_key]
    assert "predates the best" in choice.reason and "confirmed inside" not in choice.reason
    # the tuners' history is untouched: their context holds no in-model trial
    from tensortune.database.trials import measure_context

    task = model_tasks(model)[0].task
    ctx = measure_context(task, MeasureOptions.flushed())
    assert not [t for t in db.trials(task.workload_key) if t.context == ctx and t.tuner == "in-model"]


def test_a_variant_that_fails_becomes_recorded_errors(model, tuned_db, monkeypatch):
    real = compile_mod.compile_model
    calls = []

    def flaky(m, database=None, *args, overrides=None, **kw):
        calls.append(overrides)
        if len(calls) == 2:  # the untuned variant
            raise RuntimeError("simulated build failure")
        return real(m, database, *args, overrides=overrides, **kw)

    monkeypatch.setattr(compile_mod, "compile_model", flaky)
    rep = check_in_model(model, tuned_db, rounds=1, runs=1, alternatives=0)
    assert rep.variants[1]["ok"] is False and "simulated build failure" in rep.variants[1]["check"]
    with_default = [t for t in rep.tasks if any(c.label == "default" for c in t.candidates)]
    for t in with_default:
        default = next(c for c in t.candidates if c.label == "default")
        assert default.failed and t.chosen != "default"
        errors = [s for s in _in_model(tuned_db, model, t.workload_key) if s.config_index == default.config.index]
        assert errors and all(s.error == "runtime" and not s.verified for s in errors)
    assert "untuned" not in rep.latency_ms and "tuned" in rep.latency_ms


@pytest.fixture()
def runner_up_wins_in_model(monkeypatch):
    """Inside the model, every function of the runner-up variant (the third compiled) takes a hundredth
    of the time it would: every task with a runner-up switches to it, so the confirmed model is a new
    one. (Half the time was not enough: one inference of a microsecond function on a loaded CI worker
    varies by more than 2x.)"""
    from tensortune.models import profile

    built: list = []
    real_compile, real_times = compile_mod.compile_model, profile.function_times

    def compile_spy(*a, **kw):
        built.append(real_compile(*a, **kw))
        return built[-1]

    def times(compiled, run, runs):
        factor = 0.01 if len(built) > 2 and compiled is built[2] else 1.0
        return [{k: [x * factor for x in v] for k, v in inf.items()} for inf in real_times(compiled, run, runs)]

    monkeypatch.setattr(compile_mod, "compile_model", compile_spy)
    monkeypatch.setattr(profile, "function_times", times)


@pytest.mark.parametrize("slower", ["tuned", "untuned"])
def test_a_confirmed_model_slower_than_a_whole_variant_keeps_that_variant(model, tuned_db, monkeypatch, slower,
                                                                        runner_up_wins_in_model):
    fastest = "untuned" if slower == "tuned" else "tuned"
    times = {"confirmed": [2.0] * 3, fastest: [1.0] * 3, slower: [3.0] * 3}

    def fake(fns, rounds=0, min_time_s=0.0):
        return {k: times[k] for k in fns}

    monkeypatch.setattr("tensortune.measure.timing.interleaved_rounds", fake)
    rep = check_in_model(model, tuned_db, rounds=1, runs=1, alternatives=1)
    # 2.0: the confirmed model (runners-up) was timed on its own; the kept variant's configs now stand
    assert rep.kept == fastest and rep.paired_ratio == pytest.approx(2.0)
    want = "best" if fastest == "tuned" else "default"
    for t in rep.tasks:
        if len(t.candidates) > 1:
            assert t.chosen == (want if any(c.label == want for c in t.candidates) else "best")


def test_the_whole_model_verdict_is_on_paired_rounds_not_on_medians(model, tuned_db, monkeypatch,
                                                                      runner_up_wins_in_model):
    # The confirmed model's rounds 3-5 fell in a slow spell that hit the tuned model only in 4-5:
    # by medians it is 3x slower, but round by round it is as fast, so it stands.
    times = {"tuned": [1.0, 1.0, 1.0, 3.0, 3.0], "untuned": [4.0] * 5, "confirmed": [1.0, 1.0, 3.0, 3.0, 3.0]}
    monkeypatch.setattr("tensortune.measure.timing.interleaved_rounds", lambda fns, **kw: {k: times[k] for k in fns})
    rep = check_in_model(model, tuned_db, rounds=1, runs=1, alternatives=1)  # a runner-up: a new confirmed model
    assert rep.latency_ms["confirmed"] == pytest.approx(3000.0) and rep.latency_ms["tuned"] == pytest.approx(1000.0)
    assert rep.paired_ratio == pytest.approx(1.0) and rep.kept == "confirmed"
    assert rep.to_json()["paired_ratio"] == pytest.approx(1.0)


def test_a_model_whose_tasks_all_keep_their_best_is_the_tuned_model_timed_once(model, tuned_db, monkeypatch):
    # No in-model timings: every task keeps its best, so the confirmed model is the tuned variant.
    monkeypatch.setattr("tensortune.models.profile.function_times", lambda compiled, run, runs: [{} for _ in range(runs)])
    timed: list[list[str]] = []

    def fake(fns, **kw):
        timed.append(list(fns))
        return {k: {"tuned": [1.05] * 3, "untuned": [1.0] * 3}[k] for k in fns}

    monkeypatch.setattr("tensortune.measure.timing.interleaved_rounds", fake)
    rep = check_in_model(model, tuned_db, rounds=1, runs=1, alternatives=0)
    assert not rep.changed and timed == [["tuned", "untuned"]]
    assert rep.latency_ms["confirmed"] == rep.latency_ms["tuned"]
    assert rep.paired_ratio == pytest.approx(1.05) and rep.kept == "untuned"


def test_nothing_tuned_means_nothing_to_confirm(model, tmp_path):
    db = Database(str(tmp_path / "empty.db"))
    rep = check_in_model(model, db, rounds=1, runs=1)
    assert rep.tasks == [] and rep.variants == [] and db.count() == 0
    db.close()


def test_slot_gives_variant_one_the_default_and_later_ones_runners_up():
    best, default, r1 = (confirm_mod.Candidate(lbl, object()) for lbl in ("best", "default", "runner-up 1"))
    assert confirm_mod._slot([best, default, r1], 0) is best
    assert confirm_mod._slot([best, default, r1], 1) is default
    assert confirm_mod._slot([best, default, r1], 2) is r1
    assert confirm_mod._slot([best, r1], 1) is best  # best is the default: the untuned model has it too
    assert confirm_mod._slot([best, default], 2) is best
