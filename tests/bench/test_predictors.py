"""bench.predictors: every kind trained on one split, scored on held-out tasks and eval files, resumable."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learn"))
from learn_data import write_training  # noqa: E402

from bench.predictors import main  # noqa: E402


def test_trains_scores_and_resumes(tmp_path, capsys) -> None:
    train = write_training(tmp_path / "t.npz", n_tasks=6, rows=40)
    other = write_training(tmp_path / "e.npz", n_tasks=2, rows=40, seed=5)
    args = ["--train", f"syn={train}", "--eval", f"other={other}", "--kinds", "mlp,xgb", "--epochs", "3",
            "--holdout", "0.34", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    res = json.loads((tmp_path / "out" / "predictors.json").read_text())
    assert set(res["runs"]) == {"syn/mlp", "syn/xgb"}
    row = res["runs"]["syn/xgb"]
    assert row["heldout_tasks"] == 2 and row["train_tasks"] == 4 and set(row["scores"]) == {"held-out", "other"}
    assert "| syn/xgb | 4 |" in (tmp_path / "out" / "report.md").read_text()
    capsys.readouterr()
    assert main(args) == 0  # a rerun keeps what is there
    assert capsys.readouterr().out.count("done before, kept") == 2
    # an eval file made after the training: the kept models are scored on it, nothing is trained
    late = write_training(tmp_path / "late.npz", n_tasks=2, rows=40, seed=7)
    assert main([*args, "--eval", f"late={late}"]) == 0
    assert capsys.readouterr().out.count("scored on late") == 2
    again = json.loads((tmp_path / "out" / "predictors.json").read_text())["runs"]["syn/xgb"]
    assert again["seconds"] == row["seconds"] and again["scores"]["other"] == row["scores"]["other"]
    assert again["scores"]["late"]["tasks"] == 2 and "| syn/xgb | 4 | " in (tmp_path / "out" / "report.md").read_text()
    assert (tmp_path / "out" / again["model"] / "predictor.json").exists()
