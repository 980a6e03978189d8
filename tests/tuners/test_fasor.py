"""The fasor tuner over a small Fasor model made through the real pipeline (dataset generator
with a fake measurer over the synthetic conv2d landscape, export with real curve features,
hardware features of a made-up machine, the shared trainer, the sensitivity study, the DQN's
offline pre-training), on conv2d shapes; the tuner then meets seen and unseen shapes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensortune.database import Database
from tensortune.app.dataset import DatasetSpec, export, generate
from tensortune.learn import load_training
from tensortune.task import Task
from tensortune.tuners import get_tuner
from tensortune.tuners.parts import Fallback

from synthetic import FakeMeasurer, conv_landscape

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
SHAPES = ((28, 28, 32, 64, 3, 1, 1), (14, 14, 128, 64, 3, 1, 1))
FAST = {"explorer_options": {"n_walkers": 16, "max_steps": 12}}


def opts(folder, **more):
    """:data:`FAST` with the model folder (and more options)."""
    return {**FAST, "cost_model_options": {"workers": 1, "folder": str(folder)}, **more}


def fake_profile():
    from tensortune.measure.hardware import SIGNATURE_NAMES, HardwareProfile, HardwareSpec

    spec = HardwareSpec("Test CPU", "AuthenticAMD", 25, 17, "znver4", 2600.0, 2, 512, 24.0, 64, 32, 1024, 32768)
    return HardwareProfile(spec, {n: 1.0 + i for i, n in enumerate(SIGNATURE_NAMES)}, 100.0, 20.0, ZNVER4, 2)


@pytest.fixture(autouse=True)
def no_hardware_measuring(monkeypatch, tmp_path):
    """The made-up machine's profile instead of measuring this one; caches in a tmp folder."""
    import tensortune.measure.hardware as hw
    import tensortune.tuners.fasor_parts as fasor
    from tensortune.database.pretuned import PretunedTable

    monkeypatch.setenv("TENSORTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hw, "profile_for", lambda target=None, threads=None, **kw: fake_profile())
    monkeypatch.setattr(fasor, "_TABLES", {"None": PretunedTable()})  # not the shipped table


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """``(model folder, dataset database path)``."""
    import torch

    from tensortune.app.fasor import pretrain
    from tensortune.learn.fasor import fasor_data
    from tensortune.learn.trainer import TrainOptions

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("fasor")
    spec = DatasetSpec("conv2d", n_tasks=2, samples=80, code_sampler="random", blocked=False)
    tasks = [Task.from_op("conv2d", s, target=ZNVER4) for s in SHAPES]
    with Database(tmp / "d.db") as db:
        generate(spec, db, FakeMeasurer(conv_landscape), tasks)
        export(db, "conv2d", tmp / "d.npz")
    data = fasor_data(load_training(tmp / "d.npz"), [fake_profile()])
    opts = TrainOptions(kind="mlp", net_options={"hidden": [64, 32]}, lr=3e-3, max_epochs=60, batch_size=32,
                        threads=1, val_fraction=0.0, oversample=False)
    summary = pretrain(data, tmp / "models", holdout=0.0, options=opts, dqn_epochs=2, log=lambda s: None,
                       command="tensortune fasor pretrain --data d.npz -o models")
    return tmp / "models", tmp / "d.db", summary


def measured_run(task, options, budget=64, seed=0):
    m = FakeMeasurer(conv_landscape)
    tuner = get_tuner("fasor", task, seed=seed, options=options)
    res = tuner.tune(budget, m)
    return tuner, res, m


def test_pretraining_keeps_the_study_and_the_dqn_beside_the_model(made) -> None:
    folder, _, summary = made
    op = folder / "conv2d"
    study = json.loads((op / "sensitivity.json").read_text())
    knobs = {k.name for k in Task.from_op("conv2d", SHAPES[0], target=ZNVER4).space.knobs}
    for cls in ("compute", "memory"):
        assert set(study[cls]["ranking"]) == knobs and len(study[cls]["ranking"]) == len(knobs)
    assert (op / "dqn.pt").is_file() and summary["dqn"]["epochs"] == 2
    schema = json.loads((op / "predictor.json").read_text())
    assert schema["targets"][0] == "neg_log_latency" and schema["inputs"]["hw_features"]
    assert schema["command"] == "tensortune fasor pretrain --data d.npz -o models"  # how to remake it
    assert schema["label"].startswith("the targets neg_log_latency, compute_score")


def test_efficiency_mode_validates_the_top_few_once(made) -> None:
    folder, _, _ = made
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    tuner, res, m = measured_run(task, opts(folder, plan_size=6))
    assert len(m.measured) == len(set(m.measured)) <= 1 + 6  # the default, then the top 6 (no pre-tuned table)
    assert m.measured[0] == task.default_config().index
    assert "efficiency mode" in tuner.finished and tuner.iterations == 1
    assert res.best_cost <= conv_landscape(task.default_config())
    rep = tuner.search_report()
    assert rep["start"] == "default" and rep["sensitive"] in ("compute", "memory") and rep["model"] == "given"


def test_quality_mode_iterates_until_converged_or_the_budget(made) -> None:
    folder, _, _ = made
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    tuner, res, m = measured_run(task, opts(folder, mode="quality", plan_size=4, patience=2), budget=40)
    assert tuner.iterations >= 2 and len(m.measured) == len(set(m.measured))
    assert len(m.measured) == 40 or "converged" in tuner.finished
    eff, res_e, _ = measured_run(task, opts(folder, plan_size=4))
    assert res.best_cost <= res_e.best_cost


def test_n_p_fixes_the_least_sensitive_knobs_at_the_start(made) -> None:
    folder, _, _ = made
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    tuner, _, m = measured_run(task, opts(folder, n_p=3, plan_size=8))
    fixed = tuner.view.fixed
    assert len(fixed) == len(task.space.knobs) - 3
    start = task.default_config()
    for idx in m.measured:
        c = task.space.get(idx)
        assert all(c[k] == start[k] for k in fixed)
    order = json.loads((folder / "conv2d" / "sensitivity.json").read_text())[tuner.sensitive]["ranking"]
    assert sorted(tuner.view.report["tuned"]) == sorted(order[:3])


def test_pretuned_start_exact_hit_is_measured_first(made, tmp_path) -> None:
    from tensortune.database.pretuned import PretunedTable

    folder, db_path, _ = made
    with Database(db_path, readonly=True) as db:
        table = PretunedTable.from_database(db)
    table.save(tmp_path / "t.json")
    task = Task.from_op("conv2d", SHAPES[1], target=ZNVER4)
    tuner, res, m = measured_run(task, opts(folder, pretuned=str(tmp_path / "t.json")))
    assert tuner.start_part.point.how == "exact"
    assert m.measured[1] == tuner.start_part.point.config.index  # after the default
    assert res.best_cost <= conv_landscape(tuner.start_part.point.config)


def test_ablation_switches(made) -> None:
    folder, _, _ = made
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    sa, _, m = measured_run(task, opts(folder, explorer="sa", explorer_options={"n_chains": 16, "max_steps": 20}))
    assert type(sa.explorer).__name__ == "SimulatedAnnealing" and len(m.measured) > 1
    rnd, _, _ = measured_run(task, opts(folder, primitives="random", n_p=2))
    assert len(rnd.view.report["tuned"]) == 2
    flat, _, _ = measured_run(task, opts(folder, roofline=False))
    assert flat.explorer.options.phi[1] == 0.0
    q = get_tuner("fasor", task, options=opts(folder, mode="quality"))
    q.prepare()
    assert q.explorer.options.phi == pytest.approx((0.45, 0.35, 0.2))


def test_an_op_without_a_model_falls_back(made, tmp_path) -> None:
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    tuner, res, m = measured_run(task, {"cost_model_options": {"folder": str(tmp_path)}, "plan_size": 4}, budget=24)
    assert isinstance(tuner, Fallback) and "autotvm" in tuner.status and len(m.measured) == 1 + 4
    tuner, res, m = measured_run(task, {"cost_model_options": {"folder": str(tmp_path)}, "mode": "quality"}, budget=24)
    assert len(m.measured) == 24
    from tensortune.learn import PredictorError

    with pytest.raises(PredictorError, match="no Fasor model"):
        get_tuner("fasor", task, options={"cost_model_options": {"folder": str(tmp_path)}, "fallback": ""}).ask(4)


def test_quality_mode_fallback_stops_when_its_rounds_bring_nothing_better(tmp_path) -> None:
    """Without a Fasor model, quality mode's fallback tunes in rounds of ``candidates`` trials and
    stops after ``patience`` rounds without a better config, as Fasor's own iterations do (not at
    the end of the task's budget): on a flat landscape, the default and three rounds of 8 (the first
    finds the first costs, the next two nothing better)."""
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    m = FakeMeasurer(lambda c: 1e-3)
    tuner = get_tuner("fasor", task, options={"cost_model_options": {"folder": str(tmp_path)}, "mode": "quality",
                                              "n_finalists": 8, "plan_size": 4, "patience": 2})
    tuner.tune(400, m)
    assert len(m.measured) == len(set(m.measured)) == 1 + 3 * 8
    assert "converged" in tuner.finished and tuner.iterations == 3
    # a landscape that keeps improving is tuned to the budget
    m2 = FakeMeasurer(lambda c: 1.0 / (1 + len(m2.measured)))
    tuner = get_tuner("fasor", task, options={"cost_model_options": {"folder": str(tmp_path)}, "mode": "quality", "n_finalists": 8,
                                              "patience": 2})
    tuner.tune(40, m2)
    assert len(m2.measured) == 40 and not tuner.finished


def test_options_are_checked() -> None:
    from tensortune.utils.options import OptionError

    task = Task.from_op("conv2d", SHAPES[0], target=ZNVER4)
    for bad in ({"mode": "fast"}, {"plan_size": 100}, {"primitives": "some"}, {"explorer": "nope"}, {"tau": 2}):
        with pytest.raises((OptionError, ValueError)):
            get_tuner("fasor", task, options=bad)
    assert np.isclose(get_tuner("fasor", task, options={"cost_model_options": {"folder": "/nonexistent"}}).options.tau, 0.6)


def test_transfer_reads_the_pretraining_tasks_from_the_model_alone(made, tmp_path) -> None:
    from tensortune.app.fasor import transfer
    from tensortune.learn.predictor import load_predictor
    from tensortune.learn.trainer import TrainOptions

    folder, _, _ = made
    small = TrainOptions(kind="mlp", net_options={"hidden": [64, 32]}, lr=1e-3, max_epochs=3, batch_size=32,
                         threads=1, val_fraction=0.0, oversample=False, lr_schedule="fewshot")
    m = FakeMeasurer(lambda c: 2.0 * conv_landscape(c))  # "another machine": half as fast
    with Database(tmp_path / "new.db") as db:
        out = transfer(folder, None, db, m, ZNVER4, 2, k=1, samples=6, out=tmp_path / "moved", op="conv2d",
                       options=small, log=lambda s: None)
    names = load_predictor(folder / "conv2d").schema["dataset"]["task_names"]
    assert len(out["tasks"]) == 1 and out["tasks"][0] in names and out["records"] > 0 and len(set(m.measured)) == 6
    moved = load_predictor(tmp_path / "moved" / "conv2d")
    assert moved.schema["transfer"]["k"] == 1 and (tmp_path / "moved" / "conv2d" / "sensitivity.json").is_file()


def test_model_shipped_names_the_shipped_weights_beside_a_transferred_model(made, monkeypatch) -> None:
    """``model=shipped`` is "no transfer" (Fig. 8) on a machine that has a transferred model."""
    import tensortune.costmodel.fasor as cf

    folder, _, _ = made
    task = Task.from_op("conv2d_nchwc", (14, 14, 64, 64, 3, 1, 1, 16, 16), target=ZNVER4)
    moved = folder.parent / "moved-here"
    (moved / "conv2d_nchwc").mkdir(parents=True, exist_ok=True)
    (moved / "conv2d_nchwc" / "predictor.json").write_text(json.dumps({"op": "conv2d_nchwc"}))
    monkeypatch.setattr(cf, "transferred_folder", lambda key: moved)
    assert cf.FasorCostModel().folder_for(task) == (moved / "conv2d_nchwc", "transferred")
    assert cf.FasorCostModel("shipped").folder_for(task) == (cf.FASOR_SHIPPED / "conv2d_nchwc", "shipped")
    assert get_tuner("fasor", task, options={"cost_model.folder": "shipped"}).options.cost_model_options["folder"] == "shipped"
