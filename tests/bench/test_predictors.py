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


def test_seeds_run_each_and_summarize(tmp_path) -> None:
    a = write_training(tmp_path / "a.npz", n_tasks=5, rows=30)
    b = write_training(tmp_path / "b.npz", n_tasks=5, rows=30, seed=3)
    out = tmp_path / "out"
    args = ["--train", f"pgs-ebs={a}", "--train", f"pgs-random={b}", "--kinds", "xgb", "--holdout", "0.4",
            "--seeds", "0,2", "--out", str(out)]
    assert main(args) == 0
    runs = [json.loads((d / "predictors.json").read_text())["runs"] for d in (out, out / "seed-2")]
    assert all(set(r) == {"pgs-ebs/xgb", "pgs-random/xgb"} for r in runs)
    summary = json.loads((out / "seeds.json").read_text())
    assert summary["seeds"] == [0, 2] and len(summary["rows"]) == 2
    row = next(r for r in summary["rows"] if r["key"] == "pgs-ebs/xgb")
    got = [r["pgs-ebs/xgb"]["scores"]["held-out"]["spearman"] for r in runs]
    assert row["seeds"] == 2 and abs(row["spearman"]["mean"] - sum(got) / 2) < 1e-9
    assert abs(row["spearman"]["sd"] - abs(got[0] - got[1]) / 2 ** 0.5) < 1e-9
    md = (out / "seeds.md").read_text()
    assert "## Table 4 layout: xgb, scored on held-out" in md and "| pgs | " in md and "ebs code" in md
    assert main([*args[:-4], "--seeds", "1,1", "--out", str(out)]) == 2  # repeated seeds: refused


def test_a_trained_predictor_is_scored_on_the_evals_of_its_op(tmp_path, capsys) -> None:
    train = write_training(tmp_path / "t.npz", n_tasks=5, rows=30)
    same = write_training(tmp_path / "e.npz", n_tasks=2, rows=30, seed=5)
    other_op = write_training(tmp_path / "d.npz", n_tasks=2, rows=30, seed=6, op="dense")
    first = tmp_path / "first"
    assert main(["--train", f"syn={train}", "--kinds", "xgb", "--holdout", "0.4", "--out", str(first)]) == 0
    kept = first / "models" / "syn-xgb"
    out = tmp_path / "out"
    args = ["--predictor", f"shipped={kept}", "--eval", f"model={same}", "--eval", f"dense={other_op}",
            "--out", str(out)]
    assert main(args) == 0
    row = json.loads((out / "predictors.json").read_text())["runs"]["shipped"]
    assert row["kept"] and row["op"] == "conv2d" and (row["train_tasks"], row["train_samples"]) == (3, 90)
    assert set(row["scores"]) == {"held-out", "model"} and row["scores"]["model"]["tasks"] == 2
    assert "| shipped | 3 | 90 |" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(args) == 0 and "scored on nothing new" in capsys.readouterr().out
    assert main(["--predictor", f"bad={tmp_path}", "--out", str(out)]) == 2  # no predictor there
