"""Training data: read back without pickle, split by task, oversampled by label rarity."""
from __future__ import annotations

import numpy as np
import pytest

from tensortune.learn import concat, load_training, oversampling_weights
from tensortune.learn.data import Standardizer


def test_load_split_and_concat(training_file) -> None:
    d = load_training(training_file)
    assert len(d) == 480 and d.op == "conv2d" and d.task_features == ["a", "b", "c"]
    assert d.inputs().shape == (480, d.curve.shape[1] + 6 + 3)
    rest, held = d.split(0.25, seed=3)
    assert set(rest.tasks()).isdisjoint(held.tasks()) and len(held.tasks()) == 2 and len(rest) + len(held) == len(d)
    again, _ = d.split(0.25, seed=3)
    assert np.array_equal(again.tasks(), rest.tasks())
    both = concat([d, d])
    assert len(both) == 960 and len(both.tasks()) == 16


def test_bad_files_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="no such training file"):
        load_training(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a training file"):
        load_training(tmp_path / "junk.npz")
    np.savez(tmp_path / "part.npz", label=np.zeros(3))
    with pytest.raises(ValueError, match="missing curve"):
        load_training(tmp_path / "part.npz")


def test_oversampling_draws_each_label_bin_equally() -> None:
    labels = np.array([0.05] * 90 + [0.95] * 10)
    w = oversampling_weights(labels, bins=10)
    assert np.isclose(w.sum(), 1.0)
    assert np.isclose(w[:90].sum(), 0.5) and np.isclose(w[90:].sum(), 0.5)


def test_standardizer_round_trips_through_json() -> None:
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(100, 4)).astype(np.float32)
    x[:, 3] = 7.0  # a constant column passes through centred
    s = Standardizer.fit(x)
    z = s(x)
    assert np.allclose(z[:, :3].mean(axis=0), 0, atol=1e-5) and np.allclose(z[:, 3], 0)
    assert np.array_equal(Standardizer.from_json(s.to_json())(x), z)
