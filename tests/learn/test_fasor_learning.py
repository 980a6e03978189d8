"""Fasor's learning parts: hardware features and three targets on the shared data, the
multi-output net, few-shot fine-tuning with alpha = K / (K + T), and task clustering."""
from __future__ import annotations

import numpy as np
import pytest

from tensortune.learn import load_training
from tensortune.learn.fasor import (FASOR_TRAIN, FEWSHOT_TRAIN, TARGET_NAMES, fasor_data, representative_tasks,
                                    roofline_scores, task_matrix, task_similarity, work_of)
from tensortune.learn.trainer import TrainOptions, evaluate, train_predictor
from tensortune.measure.hardware import HW_FEATURE_NAMES, HardwareProfile, HardwareSpec, SIGNATURE_NAMES

SMALL = {"net_options": {"d_model": 32, "ff": 64, "layers": 1, "heads": 4, "dropout": 0.0}, "batch_size": 64,
         "threads": 1, "lr": 3e-3}


def profile(speed: float, mcpu: str = "znver4") -> HardwareProfile:
    """A made-up machine ``speed`` times as fast as the unit one."""
    spec = HardwareSpec("Test CPU", "AuthenticAMD", 25, 17, mcpu, 2600.0, 2, 512, 24.0, 64, 32, 1024, 32768)
    sig = {n: speed * (i + 1.0) for i, n in enumerate(SIGNATURE_NAMES)}
    return HardwareProfile(spec, sig, 100.0 * speed, 20.0 * speed, {"kind": "llvm", "mcpu": mcpu, "num-cores": 2}, 2)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from learn_data import write_training

    return load_training(write_training(tmp_path_factory.mktemp("f") / "t.npz", n_tasks=12, rows=60))


def test_fasor_data_adds_hardware_features_and_the_three_targets(data) -> None:
    p = profile(1.0)
    fd = fasor_data(data, [p])
    assert fd.hw.shape == (len(data), len(HW_FEATURE_NAMES)) and np.allclose(fd.hw[0], p.vector())
    assert fd.summary["target_names"] == list(TARGET_NAMES) and fd.targets.shape == (len(data), 3)
    best = np.array([t["best_s"] for t in data.summary["tasks"]])[data.task_index]
    latency = best / data.label
    np.testing.assert_allclose(fd.targets[:, 0], -np.log(latency), rtol=1e-5)
    flops, nbytes = work_of(data.curve)
    cs, ms = roofline_scores(data.curve, latency, p.peak_gflops, p.bandwidth_gbs)
    np.testing.assert_allclose(fd.targets[:, 1], cs, rtol=1e-5)
    np.testing.assert_allclose(fd.targets[:, 2], ms, rtol=1e-5)
    assert np.allclose(cs, np.clip(flops / latency / 100e9, 0, 16))
    with pytest.raises(ValueError, match="hardware profiles"):
        fasor_data(data, [])


def test_fasor_defaults_are_the_papers() -> None:
    o = FASOR_TRAIN
    assert (o.net_options["layers"], o.net_options["heads"], o.net_options["d_model"], o.net_options["dropout"]) \
        == (4, 8, 128, 0.1)
    assert (o.lr, o.weight_decay, o.batch_size, o.max_epochs, o.lr_schedule, o.init) == \
        (5e-4, 0.01, 64, 20, "linear", "xavier")
    assert FEWSHOT_TRAIN.lr_schedule == "fewshot" and FEWSHOT_TRAIN.fewshot_k == 10


def test_multi_output_net_learns_latency_across_tasks_and_round_trips(data, tmp_path) -> None:
    from tensortune.learn import load_predictor

    fd = fasor_data(data, [profile(1.0)])
    train, held = fd.split(0.25, seed=0)
    p, report = train_predictor(train, TrainOptions(kind="transformer", max_epochs=30, patience=30,
                                                    oversample=False, init="xavier", lr_schedule="linear", **SMALL))
    m = evaluate(p, held)
    assert m["r2_neg_log_latency"] > 0.5 and m["spearman"] > 0.5, m
    assert m["r2"] == m["r2_neg_log_latency"]  # not against the throughput label, on another scale
    assert p.predict_outputs(held.inputs()).shape == (len(held), 3)
    p.save(tmp_path / "m")
    q = load_predictor(tmp_path / "m")
    assert q.targets == list(TARGET_NAMES) and q.hw_features == list(HW_FEATURE_NAMES)
    np.testing.assert_allclose(q.predict_outputs(held.inputs()), p.predict_outputs(held.inputs()), rtol=1e-4, atol=1e-5)


def _other_machine(data, speed: float):
    """The same tasks measured on a machine ``speed`` times faster (another profile)."""
    summary = {**data.summary, "tasks": [{**t, "best_s": t["best_s"] / speed} for t in data.summary["tasks"]]}
    from tensortune.learn.data import TrainingData

    moved = TrainingData(data.curve, data.knob, data.task, data.label, data.task_index, summary)
    return fasor_data(moved, [profile(speed, "znver5")])


def test_few_shot_fine_tuning_moves_the_model_to_the_new_machine(data) -> None:
    from tensortune.learn import concat

    # pre-trained on two machines (so the net has seen the hardware token vary; with one, its
    # response to a new token is arbitrary and a test of it flips with floating-point order)
    src = concat([fasor_data(data, [profile(1.0)]), _other_machine(data, 2.0)])
    p, _ = train_predictor(src, TrainOptions(kind="transformer", max_epochs=30, patience=30, oversample=False, **SMALL))
    new = _other_machine(data, 4.0)
    ids = new.tasks()
    shots, rest = new.subset(ids[:4]), new.subset(ids[4:])
    before = evaluate(p, rest)["r2_neg_log_latency"]
    opts = TrainOptions(kind="transformer", max_epochs=15, patience=15, oversample=False, val_fraction=0.0,
                        lr_schedule="fewshot", **SMALL)
    tuned, report = train_predictor(shots, opts, init_from=p)
    after = evaluate(tuned, rest)["r2_neg_log_latency"]
    assert after > max(before + 0.05, 0.9), (before, after)  # here 0.82 -> 0.97
    assert tuned.schema["net"] == p.schema["net"] and report.epochs == 15
    with pytest.raises(ValueError, match="outputs|inputs"):
        train_predictor(data, opts, init_from=p)  # no hardware features, one output


def test_schedules_scale_the_learning_rate() -> None:
    from dataclasses import replace

    from tensortune.learn.trainer import lr_factor

    k = FEWSHOT_TRAIN.fewshot_k
    assert [lr_factor(FEWSHOT_TRAIN, t, 100) for t in range(3)] == pytest.approx([1.0, k / (k + 1), k / (k + 2)])
    assert [lr_factor(FASOR_TRAIN, t, 100) for t in (0, 50, 100, 150)] == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert lr_factor(replace(FASOR_TRAIN, lr_schedule="constant"), 7, 10) == 1.0
    with pytest.raises(ValueError, match="lr_schedule"):
        TrainOptions(lr_schedule="cosine")


def test_task_similarity_and_representatives() -> None:
    rng = np.random.default_rng(0)
    groups = [np.array([1, 2, 3, 4, 5, 6.0]), np.array([6, 5, 4, 3, 2, 1.0]), np.array([1, 6, 2, 5, 3, 4.0])]
    feats = np.stack([g * (1 + 0.01 * rng.random(6)) for g in groups for _ in range(5)])
    sim = task_similarity(feats)
    assert sim.shape == (15, 15) and np.allclose(np.diag(sim), 1) and sim[0, 1] > 0.9 and sim[0, 5] < -0.9
    reps = representative_tasks(feats, 3)
    assert sorted(r // 5 for r in reps) == [0, 1, 2]  # one per group
    assert representative_tasks(feats, 3) == reps  # deterministic
    assert len(representative_tasks(feats, 40)) == 15


def test_task_matrix_one_row_per_task(data) -> None:
    ids, rows = task_matrix(data)
    assert list(ids) == list(range(12)) and rows.shape == (12, 3) and rows[3, 0] == 3


def test_trainable_prefixes_freeze_the_rest(data) -> None:
    import torch

    fd = fasor_data(data, [profile(1.0)])
    p, _ = train_predictor(fd, TrainOptions(kind="transformer", max_epochs=2, oversample=False, **SMALL))
    before = {n: v.clone() for n, v in p.net.state_dict().items()}
    tuned, _ = train_predictor(_other_machine(data, 2.0), TrainOptions(
        kind="transformer", max_epochs=3, oversample=False, val_fraction=0.0, trainable=("head",), **SMALL), init_from=p)
    after = tuned.net.state_dict()
    assert not torch.equal(after["head.weight"], before["head.weight"])
    assert all(torch.equal(after[n], before[n]) for n in before if not n.startswith("head"))
