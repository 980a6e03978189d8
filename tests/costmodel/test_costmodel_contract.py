"""The cost-model contract, run over every registered cost model.

Each model is fitted on 96 configs of a real conv2d task (fixed znver4 target, so the space is
the same on any machine) labelled by the synthetic landscape of ``tests/tuners/synthetic.py``,
and must: score before fitting without failing, return one finite float64 score per config,
rank held-out configs like the landscape (Spearman > 0.3), give the same scores after
``save`` / ``load`` into a fresh instance, and, where it offers the optional fast scorer over
knob positions, agree with ``predict``. A frozen model (``learns = False``: the pre-trained
predictors, shipped with the package) is not fitted to the landscape: its contract is that
``fit`` changes none of its scores, that it covers the ops it has weights for, and that its fast
scorer agrees with ``predict``.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from tensortune.costmodel import COST_MODELS, CostModel, TaskData, make_cost_model
from tensortune.task import Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
from synthetic import conv_landscape  # noqa: E402

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
#: Settings that keep each model's fit small (the contract, not the model's best accuracy).
SMALL = {"treegru": {"epochs": 30}}


@pytest.fixture(scope="module")
def data() -> tuple[Task, TaskData, list]:
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    configs = task.space.sample(random.Random(0), 160)
    train, held = configs[:96], configs[96:]
    return task, TaskData(task, train, [conv_landscape(c) for c in train]), held


LEARNING = [n for n in COST_MODELS.names() if COST_MODELS.get(n).learns]
FROZEN = [n for n in COST_MODELS.names() if not COST_MODELS.get(n).learns]


@pytest.fixture(scope="module", params=LEARNING)
def fitted(request, data) -> tuple[str, CostModel]:
    import torch

    torch.set_num_threads(1)
    task, td, _ = data
    model = make_cost_model(request.param, feature="knob", seed=0, **SMALL.get(request.param, {}))
    assert isinstance(model, CostModel) and model.name == request.param
    before = model.predict(task, td.configs[:4])  # unfitted: scores, not a failure
    assert before.shape == (4,) and np.isfinite(before).all()
    model.fit([td])
    return request.param, model


def spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a, kind="stable")), np.argsort(np.argsort(b, kind="stable"))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_scores_rank_held_out_configs(fitted, data) -> None:
    name, model = fitted
    task, _, held = data
    pred = model.predict(task, held)
    assert pred.dtype == np.float64 and pred.shape == (len(held),) and np.isfinite(pred).all()
    assert model.fitted
    rho = spearman(pred, -np.array([conv_landscape(c) for c in held]))
    assert rho > 0.3, f"{name}: rank correlation {rho:.2f}"


def test_save_load_round_trip(fitted, data, tmp_path) -> None:
    name, model = fitted
    task, _, held = data
    path = tmp_path / f"{name}.model"
    model.save(path)
    fresh = make_cost_model(name, feature="knob", seed=1)
    fresh.load(path)
    np.testing.assert_allclose(fresh.predict(task, held), model.predict(task, held), rtol=1e-5, atol=1e-6)


def test_fast_scorer_agrees_with_predict(fitted, data) -> None:
    name, model = fitted
    task, _, held = data
    scorer = model.position_scorer(task)
    if scorer is None:
        pytest.skip(f"{name} has no fast scorer (optional)")
    pos = np.array([task.space.positions(c) for c in held], dtype=np.int64)
    np.testing.assert_allclose(scorer(pos), model.predict(task, held), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", COST_MODELS.names())
def test_settings_are_a_frozen_options_dataclass_checked_by_name(name) -> None:
    import dataclasses

    from tensortune.utils.options import OptionError

    cls = COST_MODELS.get(name)
    assert dataclasses.is_dataclass(cls.Options) and cls.Options.__dataclass_params__.frozen
    with pytest.raises(OptionError, match=rf"unknown option 'no_such_key' for cost model '{name}'; known:"):
        make_cost_model(name, feature="knob", options={"no_such_key": 1})
    first = dataclasses.fields(cls.Options)[0]
    model = make_cost_model(name, feature="knob", options={first.name: str(first.default)})  # text converted
    assert type(model) is cls


@pytest.mark.parametrize("name", FROZEN)
def test_a_frozen_model_is_not_changed_by_fit_and_covers_its_ops(name, data, monkeypatch) -> None:
    import torch

    import tensortune.measure.hardware as hw
    from test_fasor import fake_profile  # the made-up machine: no hardware measured here

    torch.set_num_threads(1)
    monkeypatch.setattr(hw, "profile_for", lambda target=None, threads=None, **kw: fake_profile())
    _, td, _ = data
    task = Task.from_op("conv2d_nchwc", (14, 14, 64, 64, 3, 1, 1, 16, 16), target=ZNVER4)  # shipped for both
    model = make_cost_model(name, options={"workers": 1})
    assert not model.learns and model.covers(task) and not model.covers(Task.from_op("matmul", (8, 8, 8)))
    configs = task.space.sample(random.Random(0), 24)
    before = model.predict(task, configs)
    assert before.dtype == np.float64 and before.shape == (24,) and np.isfinite(before).all()
    model.fit([TaskData(task, configs, [1.0] * len(configs))])
    np.testing.assert_array_equal(model.predict(task, configs), before)
    pos = np.array([task.space.positions(c) for c in configs], dtype=np.int64)
    np.testing.assert_allclose(model.position_scorer(task)(pos), before, rtol=1e-5, atol=1e-6)
    assert name in model.describe(task) or "predictor" in model.describe(task)
