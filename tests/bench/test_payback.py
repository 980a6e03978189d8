"""bench.payback: one-time cost over the saving per compilation."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learn"))
import synthetic  # noqa: E402
from learn_data import write_training  # noqa: E402

from bench.payback import main, payback  # noqa: E402


def test_payback_arithmetic() -> None:
    models = {"m": {"systems": {"autotvm": {"ok": True, "tune_wall_s": 3600.0}, "oneshot": {"ok": True, "tune_wall_s": 600.0}}},
              "slow": {"systems": {"autotvm": {"ok": True, "tune_wall_s": 100.0}, "oneshot": {"ok": True, "tune_wall_s": 200.0}}},
              "broken": {"systems": {"autotvm": {"ok": False}}}}
    rows = {r["model"]: r for r in payback(30000.0, models, "autotvm", "oneshot")}
    assert set(rows) == {"m", "slow"}
    assert rows["m"]["saving_s"] == 3000.0 and rows["m"]["payback_compilations"] == 10
    assert rows["slow"]["payback_compilations"] is None


def test_command_line(tmp_path) -> None:
    from tensortune.database import Database
    from tensortune.app.dataset import DatasetSpec, check_spec, frozen_tasks, generate

    spec = DatasetSpec("dense", n_tasks=1, samples=5, code_sampler="random", blocked=False)
    db_path = tmp_path / "d.db"
    check_spec(spec, db_path)
    tasks = frozen_tasks(spec, db_path)
    with Database(db_path) as db:
        generate(spec, db, synthetic.FakeMeasurer(lambda c: 1e-4), tasks)
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"m": {"systems": {"autotvm": {"ok": True, "tune_wall_s": 100.0},
                                                    "oneshot": {"ok": True, "tune_wall_s": 10.0}}}}))
    from tensortune.learn import load_training
    from tensortune.learn.trainer import TrainOptions, train_predictor

    predictor, _ = train_predictor(load_training(write_training(tmp_path / "t.npz", n_tasks=2, rows=20, op="dense")),
                                   TrainOptions(kind="mlp", net_options={"hidden": [8]}, max_epochs=1, threads=1))
    predictor.save(tmp_path / "p")
    args = ["--dataset", str(db_path), "--models", str(models), "--out", str(tmp_path / "out")]
    assert main(args + ["--predictor", str(tmp_path / "missing")]) == 2  # a clear error, no traceback
    assert main(args + ["--predictor", str(tmp_path / "p")]) == 0
    result = json.loads((tmp_path / "out" / "payback.json").read_text())
    assert result["datasets"][0]["samples"] == 5 and result["predictors"][0]["kind"] == "mlp"
    assert result["models"][0]["saving_s"] == 90.0 and result["models"][0]["payback_compilations"] >= 1
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| m | 100 | 10 | 90 |" in report
    # where each side was measured: the datasets' machines, the suite run's (none beside this models.json)
    assert f"Datasets measured on: {next(iter(result['datasets'][0]['machines']))}." in report
    assert "Compilations timed on: not recorded." in report
    (tmp_path / "meta.json").write_text(json.dumps({"runs": [{"machine": {"cpu_model": "Test CPU", "llvm_cpu": "znver9"}}]}))
    assert main(args + ["--predictor", str(tmp_path / "p")]) == 0
    assert "Compilations timed on: Test CPU (znver9)." in (tmp_path / "out" / "report.md").read_text()
