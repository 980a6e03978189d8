"""XGBoost cost models on knob features: they learn a known ranking, failures score low,
ensembles give spread, acquisitions behave, the base margin adds a global model, save/load."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from tensortune.costmodel import COST_MODELS, TaskData, make_cost_model
from tensortune.costmodel.xgb import (XGB_PARAMS, BootstrapEnsemble, XGBoostCostModel, acquisition_value,
                                      average_recall)
from tensortune.space import ConfigSpace



def make_task(key: str = "synthetic") -> SimpleNamespace:
    s = ConfigSpace()
    s.define_split("tile", 256, 2)
    s.define_choice("unroll", [0, 1])
    s.define_choice("noise", list(range(5)))
    return SimpleNamespace(space=s, workload_key=key, flops=1.0)


def latency(c) -> float:
    """Fastest with an inner tile of 16 and unrolling; ``noise`` does not matter."""
    return (1 + abs(math.log2(c["tile"][1]) - 4)) * (0.5 if c["unroll"] else 1.0)


def data_for(task, n: int, seed: int, fail=lambda c: False) -> TaskData:
    configs = task.space.sample(random.Random(seed), n)
    return TaskData(task, configs, [math.inf if fail(c) else latency(c) for c in configs])


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_defaults_are_autotvms() -> None:
    assert {k: XGB_PARAMS[k] for k in ("max_depth", "eta", "gamma", "min_child_weight", "subsample")} == \
        {"max_depth": 3, "eta": 0.3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0}
    m = XGBoostCostModel("knob")
    assert m.objective == "rank" and m.recall_k == 64


def test_labels_are_normalised_throughput_and_failures_zero() -> None:
    d = TaskData(None, [None, None, None], [2.0, 1.0, math.inf])
    np.testing.assert_allclose(d.labels(), [0.5, 1.0, 0.0])


def test_average_recall() -> None:
    y = np.arange(10, dtype=float)
    assert average_recall(y, y, [10], 5) == pytest.approx(1.0)
    assert average_recall(-y, y, [10], 5) == pytest.approx(0.0)
    # per group: a perfect group and a reversed one average to 0.5
    assert average_recall(np.r_[y, -y], np.r_[y, y], [10, 10], 5) == pytest.approx(0.5)


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_learns_the_ranking(objective: str) -> None:
    task = make_task()
    model = XGBoostCostModel("knob", objective=objective, seed=0)
    assert not model.fitted
    model.fit([data_for(task, 80, seed=0)])
    assert model.fitted and model.rounds >= 1
    test = data_for(task, 200, seed=1)
    pred = model.predict(task, test.configs)
    assert spearman(pred, test.labels()) > 0.8


def test_failed_candidates_are_not_taught_as_fast() -> None:
    task = make_task()
    # the fastest region (inner tile 16, unrolled) fails to build
    fail = lambda c: c["tile"][1] == 16 and c["unroll"] == 1  # noqa: E731
    model = XGBoostCostModel("knob", objective="reg", seed=0)
    model.fit([data_for(task, 200, seed=2, fail=fail)])
    configs = list(task.space)
    pred = model.predict(task, configs)
    failing = np.array([fail(c) for c in configs])
    assert pred[failing].max() < np.median(pred[~failing])


def test_too_little_data_stays_unfitted() -> None:
    task = make_task()
    model = XGBoostCostModel("knob")
    model.fit([TaskData(task, task.space.sample(random.Random(0), 3), [math.inf] * 3)])
    assert not model.fitted
    assert np.all(model.predict(task, task.space.sample(random.Random(1), 4)) == 0)


def test_seeded_fit_is_reproducible() -> None:
    task = make_task()
    d = data_for(task, 60, seed=3)
    test = data_for(task, 50, seed=4).configs
    a, b = XGBoostCostModel("knob", seed=7), XGBoostCostModel("knob", seed=7)
    a.fit([d])
    b.fit([d])
    np.testing.assert_array_equal(a.predict(task, test), b.predict(task, test))


def test_save_load_round_trip(tmp_path) -> None:
    task = make_task()
    model = XGBoostCostModel("knob", seed=0)
    model.fit([data_for(task, 60, seed=5)])
    model.save(tmp_path / "m.json")
    other = XGBoostCostModel("itervar")
    other.load(tmp_path / "m.json")
    test = data_for(task, 30, seed=6).configs
    assert other.feature == "knob"
    np.testing.assert_allclose(other.predict(task, test), model.predict(task, test))


def test_base_margin_adds_the_global_model() -> None:
    """f = f_base + f_local: with no local data the base alone predicts; a local model fitted
    on top of it is not the same as one fitted alone."""
    task = make_task()
    base = XGBoostCostModel("knob", objective="reg", seed=0)
    base.fit([data_for(task, 100, seed=7)])
    local = XGBoostCostModel("knob", objective="reg", seed=0, base=base)
    assert local.fitted  # through the base
    test = data_for(task, 40, seed=8).configs
    np.testing.assert_allclose(local.predict(task, test), base.predict(task, test))
    few = data_for(task, 6, seed=9)
    local.fit([few])
    alone = XGBoostCostModel("knob", objective="reg", seed=0)
    alone.fit([few])
    assert not np.allclose(local.predict(task, test), alone.predict(task, test))
    assert spearman(local.predict(task, test), np.array([-latency(c) for c in test])) > 0.7


def test_ensemble_spread_and_acquisitions() -> None:
    task = make_task()
    ens = BootstrapEnsemble("knob", seed=0, n_models=4, acquisition="ucb")
    ens.fit([data_for(task, 40, seed=10)])
    test = data_for(task, 100, seed=11).configs
    mean, std = ens.predict_dist(task, test)
    assert std.max() > 0
    np.testing.assert_allclose(ens.predict(task, test), mean + 2.0 * std)
    ei = acquisition_value("ei", mean, std, best=1.0)
    assert np.all(ei >= -1e-12)
    # EI grows with the mean at fixed spread and with the spread at fixed mean
    assert acquisition_value("ei", np.array([0.9]), np.array([0.1]), 1.0) > acquisition_value(
        "ei", np.array([0.5]), np.array([0.1]), 1.0)
    assert acquisition_value("ei", np.array([0.5]), np.array([0.3]), 1.0) > acquisition_value(
        "ei", np.array([0.5]), np.array([0.1]), 1.0)
    with pytest.raises(ValueError, match="acquisition"):
        BootstrapEnsemble("knob", acquisition="pi")


def test_make_cost_model_by_name() -> None:
    assert set(COST_MODELS) == {"xgb", "xgb-ensemble", "treegru", "pretrained", "fasor"}
    assert isinstance(make_cost_model("xgb", feature="knob"), XGBoostCostModel)
    ens = make_cost_model("xgb", feature="knob", acquisition="ucb")
    assert isinstance(ens, BootstrapEnsemble) and ens.acquisition == "ucb"
    with pytest.raises(ValueError, match="unknown cost model"):
        make_cost_model("svm")
    with pytest.raises(ValueError, match="objective"):
        XGBoostCostModel("knob", objective="lambdamart")
    with pytest.raises(ValueError, match="feature"):
        XGBoostCostModel("bogus")
