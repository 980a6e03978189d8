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


def test_float16_weights_halve_the_file_and_reload_to_what_was_saved(data, tmp_path) -> None:
    """Stored as float16, the weights take half the bytes; the reloaded predictor computes (in
    float32) exactly what the saved one does, which ranks as the float32 one did."""
    import torch

    p, _ = train_predictor(data, TrainOptions(kind="mlp", net_options={"hidden": [64, 32]}, max_epochs=20,
                                              batch_size=64, threads=1))
    x = data.inputs()
    full = p.predict_rows(x)
    p.save(tmp_path / "f32")
    with pytest.raises(PredictorError, match="expected one of float32, float16"):
        p.save(tmp_path / "bad", weights_dtype="int8")
    p.save(tmp_path / "f16", weights_dtype="float16")
    state = torch.load(tmp_path / "f16" / "weights.pt", weights_only=True)
    assert {v.dtype for v in state.values()} == {torch.float16}
    assert (tmp_path / "f16" / "weights.pt").stat().st_size < 0.6 * (tmp_path / "f32" / "weights.pt").stat().st_size
    q = load_predictor(tmp_path / "f16")
    assert q.schema["weights_dtype"] == "float16" and load_predictor(tmp_path / "f32").schema["weights_dtype"] == "float32"
    assert {v.dtype for v in q.net.state_dict().values()} == {torch.float32}
    np.testing.assert_allclose(q.predict_rows(x), p.predict_rows(x), rtol=1e-6, atol=1e-7)
    assert not np.array_equal(q.predict_rows(x), full)  # rounded, so not bit-equal to float32 ...
    np.testing.assert_allclose(q.predict_rows(x), full, rtol=2e-2, atol=2e-2)  # ... but close
    a, b = ranking_metrics(data.label, full, data.task_index), ranking_metrics(data.label, q.predict_rows(x), data.task_index)
    assert abs(a["spearman"] - b["spearman"]) < 0.01, (a, b)
    q.save(tmp_path / "again")  # a reloaded float16 predictor keeps its dtype
    assert load_predictor(tmp_path / "again").schema["weights_dtype"] == "float16"


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
