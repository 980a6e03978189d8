"""The oneshot tuner: one search over a pre-trained predictor, one validation, resumable.

A small predictor is trained here, through the real pipeline (dataset generator with a fake
measurer over the synthetic conv2d landscape, export with real curve features, trainer), on
two conv2d shapes; the tuner then meets a third.
"""
from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest

from tensortune.database import Database
from tensortune.app.dataset import DatasetSpec, export, generate
from tensortune.learn import PredictorError, load_training
from tensortune.learn.trainer import TrainOptions, train_predictor
from tensortune.task import Task
from tensortune.tuners import get_tuner
from tensortune.tuners.parts import Fallback

from synthetic import FakeMeasurer, conv_landscape

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
FAST = {"explorer_options": {"n_chains": 32, "max_steps": 25, "early_stop": 10}, "plan_size": 12,
        "cost_model_options": {"workers": 1}, "distill": 200, "n_finalists": 48}


def opts(predictor, **more):
    """:data:`FAST` with the predictor folder (and more options)."""
    return {**FAST, "cost_model_options": {"workers": 1, "folder": str(predictor)}, **more}


@pytest.fixture(scope="module")
def predictor_dir(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("oneshot")
    spec = DatasetSpec("conv2d", n_tasks=2, samples=80, code_sampler="random", blocked=False)
    tasks = [Task.from_op("conv2d", s, target=ZNVER4) for s in ((28, 28, 32, 64, 3, 1, 1), (14, 14, 128, 64, 3, 1, 1))]
    with Database(tmp / "d.db") as db:
        generate(spec, db, FakeMeasurer(conv_landscape), tasks)
        export(db, "conv2d", tmp / "d.npz")
    p, _ = train_predictor(load_training(tmp / "d.npz"),
                           TrainOptions(kind="mlp", net_options={"hidden": [64, 32]}, lr=3e-3, max_epochs=80, batch_size=32,
                                        threads=1, val_fraction=0.0))
    return p.save(tmp / "conv2d")


@pytest.fixture(scope="module")
def task() -> Task:
    return Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)


def test_one_search_one_validation_then_done(predictor_dir, task, tmp_path) -> None:
    m = FakeMeasurer(conv_landscape)
    tuner = get_tuner("oneshot", task, seed=0, options=opts(predictor_dir))
    with Database(tmp_path / "t.db") as db:
        res = tuner.tune(1000, m, database=db)
    default = task.default_config().index
    top12 = {c.index for c in tuner.last_plan}
    assert len(tuner.last_plan) == 12 and tuner.plan_sizes == [12] and res.stop_reason == "validated the top 12"
    # the default first, then the top 12 (one trial fewer where the default is among them)
    assert m.measured[0] == default and set(m.measured) == top12 | {default}
    assert res.trials_measured == len(set(m.measured)) == len(top12 | {default})  # (confirmation re-measures)
    top = [conv_landscape(task.space.get(i)) for i in m.measured[1:]]
    rand = [conv_landscape(c) for c in task.space.sample(random.Random(1), 300)]
    assert np.mean(top) < np.percentile(rand, 25), "the predictor's top configs should beat random ones"
    assert "mlp predictor of conv2d (2 tasks)" in tuner.status and tuner.search_seconds > 0


def test_a_rerun_resumes_and_measures_nothing_again(predictor_dir, task, tmp_path) -> None:
    def tuner():
        t = get_tuner("oneshot", task, seed=0, options=opts(predictor_dir))
        t.confirm_top = 0  # trials only, no confirmation rounds
        return t

    with Database(tmp_path / "t.db") as db:
        m1 = FakeMeasurer(conv_landscape)
        tuner().tune(6, m1, database=db)  # interrupted after 6
        m2 = FakeMeasurer(conv_landscape)
        res = tuner().tune(1000, m2, database=db)
        assert len(m1.measured) == 6 and len(m2.measured) == 7 and not set(m1.measured) & set(m2.measured)
        m3 = FakeMeasurer(conv_landscape)
        again = tuner().tune(1000, m3, database=db)
    assert m3.measured == [] and again.stop_reason == "validated the top 12" and res.best_cost == again.best_cost


def test_search_on_the_predictor_itself(predictor_dir, task) -> None:
    m = FakeMeasurer(conv_landscape)
    res = get_tuner("oneshot", task, seed=0, options=opts(predictor_dir, distill=0)).tune(100, m)
    top = [conv_landscape(task.space.get(i)) for i in m.measured[1:13]]
    rand = [conv_landscape(c) for c in task.space.sample(random.Random(1), 300)]
    assert res.trials_measured == 13 and np.mean(top) < np.percentile(rand, 25)


def test_genetic_search(predictor_dir, task) -> None:
    ga = opts(predictor_dir, explorer="ga", explorer_options={"population": 32, "steps": 10, "elites": 8},
              plan_size=8, distill=100, n_finalists=16)
    m = FakeMeasurer(conv_landscape)
    tuner = get_tuner("oneshot", task, seed=0, options=ga)
    res = tuner.tune(100, m)
    assert res.trials_measured == 9 and "ga search" in tuner.status


def test_an_op_without_predictor_gets_the_fallback_or_a_clear_error(predictor_dir) -> None:
    dense = Task.from_op("dense", (16, 64, 64), target=ZNVER4)
    m = FakeMeasurer(lambda c: 1e-4)
    tuner = get_tuner("oneshot", dense, options=opts(predictor_dir))
    res = tuner.tune(100, m)
    assert isinstance(tuner, Fallback) and tuner.name == "oneshot" and "autotvm" in tuner.status
    assert res.trials_measured == 13 and "no dense pretrained model" in res.stop_reason  # the default + 12
    strict = get_tuner("oneshot", dense, options=opts(predictor_dir, fallback=""))
    with pytest.raises(PredictorError, match=r"no pre-trained predictor for dense tasks .* \(it has: conv2d\)"):
        strict.tune(100, FakeMeasurer(lambda c: 1e-4))


def test_a_predictor_of_another_cpu_is_named_in_one_line(predictor_dir, task, tmp_path, caplog) -> None:
    other = tmp_path / "other"
    shutil.copytree(predictor_dir, other)
    schema = json.loads((other / "predictor.json").read_text())
    schema["dataset"]["machines"][0]["target"] = json.dumps({"kind": "llvm", "mcpu": "znver5"})
    (other / "predictor.json").write_text(json.dumps(schema))
    res = get_tuner("oneshot", task, options=opts(other)).tune(100, FakeMeasurer(conv_landscape))
    said = [r.getMessage() for r in caplog.records if r.name == "tensortune.tuners.oneshot"]  # logged, not printed
    assert res.trials_measured == 13 and len(said) == 1 and "was trained on" in said[0] and "znver5" in said[0]
    assert "\n" not in said[0]


def test_parallel_feature_extraction_matches_local(task) -> None:
    from tensortune.features import get_extractor
    from tensortune.features.parallel import ParallelExtractor

    configs = task.space.sample(random.Random(2), 40)
    par = ParallelExtractor("curve", workers=2)
    rows = par.extract(task, configs)
    assert par.fallbacks == 0
    np.testing.assert_array_equal(rows, get_extractor("curve").extract(task, configs))
    assert np.array_equal(par.extract(task, configs[:5]), rows[:5])  # cached


def test_a_config_the_template_cannot_schedule_scores_empty_and_the_search_goes_on(monkeypatch) -> None:
    """A template that raises for some configs (TVM refusing a schedule) gives those configs empty
    (zero) rows in this process and in an extraction worker, instead of ending the search."""
    from tensortune.features.parallel import ParallelExtractor, _rows_in_worker

    odd = Task.from_op("conv2d", (7, 7, 32, 32, 3, 1, 1), target=ZNVER4)  # a shape no other test caches
    cls = type(odd.template)
    apply = cls.apply

    def refusing(self, t, config):
        if config.index % 2:
            raise RuntimeError("Check failed: required.CanProveSinglePoint(...)")
        return apply(self, t, config)

    monkeypatch.setattr(cls, "apply", refusing)
    configs = odd.space.sample(random.Random(3), 8)
    assert {c.index % 2 for c in configs} == {0, 1}
    for rows in (ParallelExtractor("curve", workers=1).extract(odd, configs),
                 _rows_in_worker(odd.json_text, "curve", [c.index for c in configs])):
        assert [not r.any() for r in rows] == [bool(c.index % 2) for c in configs]


def test_command_line(predictor_dir, tmp_path, capfd) -> None:
    from tensortune.cli import main

    assert main(["predictor", "show", str(predictor_dir)]) == 0
    assert "mlp predictor of conv2d" in capfd.readouterr().out
    assert main(["predictor", "show", str(tmp_path)]) == 2
    assert "no predictor here" in capfd.readouterr().err
