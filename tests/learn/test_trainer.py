"""The trainer: every kind learns a known ranking, saves without pickle, and reproduces by seed."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensortune.learn import PredictorError, load_predictor, load_training
from tensortune.learn.metrics import ranking_metrics
from tensortune.learn.trainer import TrainOptions, train_predictor

#: Small nets and few epochs: the contract, not the best accuracy.
SMALL = {"transformer": {"net_options": {"d_model": 32, "ff": 64, "layers": 1}, "lr": 3e-3, "max_epochs": 25},
         "lstm": {"net_options": {"d_model": 32, "layers": 1}, "lr": 3e-3, "max_epochs": 25},
         "mlp": {"net_options": {"hidden": [64, 32]}, "lr": 3e-3, "max_epochs": 60},
         "xgb": {"xgb_rounds": 200}}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from learn_data import write_training

    return load_training(write_training(tmp_path_factory.mktemp("d") / "t.npz", n_tasks=10, rows=80))


@pytest.mark.parametrize("kind", ["transformer", "mlp", "lstm", "xgb"])
def test_each_kind_learns_saves_and_loads(kind, data, tmp_path) -> None:
    import torch

    torch.set_num_threads(1)
    train, held = data.split(0.2, seed=0)
    opts = TrainOptions(kind=kind, batch_size=64, threads=1, patience=100, **SMALL[kind])
    p, report = train_predictor(train, opts)
    assert report.epochs >= 1 and report.seconds > 0 and report.stop_reason
    m = ranking_metrics(held.label, p.predict_rows(held.inputs()), held.task_index)
    assert m["spearman"] > 0.5, m
    p.save(tmp_path / kind)
    schema = json.loads((tmp_path / kind / "predictor.json").read_text())
    assert schema["kind"] == kind and schema["op"] == "conv2d" and schema["inputs"]["knob_dim"] == 6
    assert schema["dataset"]["machines"][0]["cpu_model"] == "Test CPU"
    q = load_predictor(tmp_path / kind)
    np.testing.assert_allclose(q.predict_rows(held.inputs()), p.predict_rows(held.inputs()), rtol=1e-5, atol=1e-6)
    if kind != "xgb":  # a plain state dict: loads with weights_only
        state = torch.load(tmp_path / kind / "weights.pt", weights_only=True)
        assert all(isinstance(v, torch.Tensor) for v in state.values())


def test_same_seed_same_predictor(data) -> None:
    opts = TrainOptions(kind="mlp", net_options={"hidden": [32]}, max_epochs=3, batch_size=64, threads=1)
    a, _ = train_predictor(data, opts)
    b, _ = train_predictor(data, opts)
    x = data.inputs()[:50]
    assert np.array_equal(a.predict_rows(x), b.predict_rows(x))


def test_broken_predictor_folders_are_refused(data, tmp_path) -> None:
    with pytest.raises(PredictorError, match="no predictor here"):
        load_predictor(tmp_path)
    p, _ = train_predictor(data, TrainOptions(kind="mlp", net_options={"hidden": [8]}, max_epochs=1, threads=1))
    p.save(tmp_path / "p")
    (tmp_path / "p" / "weights.pt").write_bytes(b"garbage")
    with pytest.raises(PredictorError, match="cannot be read"):
        load_predictor(tmp_path / "p")
    (tmp_path / "p" / "predictor.json").write_text('{"format": "other"}')
    with pytest.raises(PredictorError, match="not a tensortune-predictor/1 predictor"):
        load_predictor(tmp_path / "p")


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown predictor kind"):
        TrainOptions(kind="svm")
    with pytest.raises(ValueError, match="val_fraction"):
        TrainOptions(val_fraction=1.0)
