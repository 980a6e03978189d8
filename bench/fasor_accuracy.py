"""Fasor's cost-model accuracy before and after transfer (its Tables 8 and 9): ``python -m bench run --study fasor-accuracy``.

    python -m bench run --study fasor-accuracy --data data/train/conv2d_nchwc-88.npz --db data/fasor-transfer.db
        [--target generic --threads 1] [--k 10] [--eval-tasks 10] [--samples 64] [--holdout 0.2]
        [--out bench/results/fasor-accuracy]
    python -m bench run --study fasor-accuracy --db data/fasor-shipped.db --target native --threads 2   # no --data

Without ``--data`` the shipped (or ``--model``) Fasor model is transferred as it is, to the
machine the bench runs on: its pre-training tasks and held-out tasks come from its schema, the
source R^2 is the one measured at pre-training, and only Fasor is scored (XGBoost and the LSTM
would need the pre-training file to be trained). This is the real cross-machine test when the
bench runs on another CPU kind than the model was pre-trained on.

1. The training file (this machine's dataset, ``tensortune dataset export``) gets hardware
   features and Fasor's targets; ``--holdout`` of its tasks are held out (the same for every model).
2. Fasor's Transformer, XGBoost and an LSTM (same inputs, same optimiser settings as Fasor's)
   are trained on the rest; each one's R^2 of ``-ln(latency)`` on the held-out tasks is the
   "source" column (Table 8).
3. The other machine: ``--target``/``--threads`` (``generic``/1 against the native 2-thread
   data is the weaker stand-in used when only one CPU kind is at hand; run on a second kind of
   machine with ``native`` for the real test). There, the ``k`` representative training tasks
   (clustered by Spearman similarity of task features) and ``--eval-tasks`` of the held-out
   tasks are measured into ``--db`` (resumable; every trial is committed).
4. Each model is scored on the other machine's held-out tasks as trained ("zero-shot"), then
   transferred with the k tasks' records (the nets fine-tuned with alpha = K / (K + T); XGBoost
   boosted further on them) and scored again ("after transfer", Table 9).

Results go to ``OUT/accuracy.json`` (resumes the trained models' scores), ``OUT/report.md`` and
``OUT/accuracy.png``. Measuring and training use every core: run nothing else meanwhile.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .common import machine_info, save_figure, write_text

#: The models compared: name -> trainer kind and options over Fasor's.
MODELS = {"fasor": ("transformer", {}), "xgboost": ("xgb", {"xgb_rounds": 2000}),
          "lstm": ("lstm", {"net_options": {"d_model": 128, "layers": 2, "dropout": 0.1}})}


def _r2(model: Any, data: Any) -> float:
    from tensortune.learn.metrics import r2

    return r2(data.targets[:, 0], model.predict_rows(data.inputs()))


def _transfer(model: Any, kind: str, shots: Any, seed: int) -> Any:
    """The model moved to the new machine with the k tasks' records."""
    from tensortune.learn.fasor import FEWSHOT_TRAIN
    from tensortune.learn.trainer import train_predictor

    if kind == "xgb":
        import copy

        import xgboost as xgb

        moved = copy.copy(model)
        moved.booster = xgb.train({"objective": "reg:squarederror", "max_depth": 8, "eta": 0.05, "seed": seed,
                                   "nthread": 2}, xgb.DMatrix(shots.inputs(), label=shots.targets[:, 0]),
                                  num_boost_round=100, xgb_model=model.booster)
        return moved
    tuned, _ = train_predictor(shots, replace(FEWSHOT_TRAIN, kind=kind, seed=seed), init_from=model)
    return tuned


def _measure_other(a: argparse.Namespace, tasks: list[Any], op: str, op_class: str, profile: Any) -> tuple[Any, float]:
    """The other machine's records of ``tasks`` (measured into ``--db``, resumable) with
    Fasor's targets, and the seconds measured this run."""
    from tensortune.app.fasor import measure_tasks
    from tensortune.database import Database
    from tensortune.app.dataset import export
    from tensortune.learn import load_training
    from tensortune.learn.fasor import fasor_data
    from tensortune.measure import MeasureOptions, Measurer

    with Database(a.db) as db:
        with Measurer(MeasureOptions(repeat=3, min_repeat_ms=20, threads=a.threads)) as m:
            _, secs = measure_tasks(tasks, db, m, a.samples, op_class, a.seed)
        with tempfile.TemporaryDirectory() as tmp:
            export(db, op, Path(tmp) / "t.npz")
            other = load_training(Path(tmp) / "t.npz")
    return fasor_data(other, [profile] * len(other.summary["machines"])), secs


def _split(other: Any, shot_tasks: list[Any]) -> tuple[Any, Any]:
    """(the shots' records, the rest) of the other machine's records."""
    names = [t["name"] for t in other.summary["tasks"]]
    rep_names = {t.name for t in shot_tasks}
    return (other.subset([i for i, n in enumerate(names) if n in rep_names]),
            other.subset([i for i, n in enumerate(names) if n not in rep_names]))


def run_shipped(a: argparse.Namespace) -> dict[str, Any]:
    """The shipped model transferred to this machine as it is (no ``--data``; see the module)."""
    from tensortune.costmodel.fasor import FASOR_SHIPPED
    from tensortune.app.fasor import PretrainingTasks
    from tensortune.costmodel.pretrained import predictor_folder
    from tensortune.learn.predictor import load_predictor
    from tensortune.measure.hardware import profile_for
    from tensortune.target import generic_target_json, host_target_json

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    folder = predictor_folder(a.op, a.model or FASOR_SHIPPED)
    if folder is None:
        raise SystemExit(f"no Fasor {a.op} model in {a.model or FASOR_SHIPPED}")
    base = load_predictor(folder)
    pt = PretrainingTasks.of_model(base)
    target = generic_target_json(a.threads) if a.target == "generic" else dict(host_target_json(a.threads))
    reps, evals = pt.tasks(pt.representatives(a.k), target), pt.tasks(pt.heldout[: a.eval_tasks], target)
    profile = profile_for(target, a.threads)
    other, secs = _measure_other(a, reps + evals, pt.op, pt.op_class, profile)
    shots, test = _split(other, reps)
    ds = base.schema["dataset"]
    results: dict[str, Any] = {"machine": machine_info(), "mode": "shipped model, no pre-training file"}
    results["source"] = {"file": str(folder), "tasks": int(ds["tasks"]), "samples": int(ds["samples"]),
                         "machine": ds["machines"][0], "held_out_tasks": len(pt.heldout)}
    results["other"] = {"target": target, "threads": a.threads, "profile": profile.key(), "k": a.k,
                        "shot_samples": len(shots), "eval_tasks": int(len(test.tasks())), "eval_samples": len(test),
                        "measure_seconds_this_run": secs, "weaker_test": a.target == "generic",
                        "same_llvm_cpu": target.get("mcpu") == json.loads(ds["machines"][0]["target"]).get("mcpu")}
    t1 = time.perf_counter()
    moved = _transfer(base, "transformer", shots, a.seed)
    row = {"source_r2": float(base.schema["heldout"]["r2_neg_log_latency"]), "zero_shot_r2": _r2(base, test),
           "transferred_r2": _r2(moved, test), "transfer_seconds": time.perf_counter() - t1}
    results["scores"] = {"fasor": row}
    (out / "accuracy.json").write_text(json.dumps(results, indent=1))
    print(f"fasor: R^2 source {row['source_r2']:.3f}, this machine as trained {row['zero_shot_r2']:.3f}, "
          f"after transfer {row['transferred_r2']:.3f}", flush=True)
    report(results, out)
    return results


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Train, measure, transfer and score (see the module); returns the results (also saved)."""
    from tensortune.app.fasor import tasks_of
    from tensortune.learn import load_training
    from tensortune.learn.fasor import FASOR_TRAIN, fasor_data, machine_profiles, representative_tasks, task_matrix
    from tensortune.learn.trainer import train_predictor
    from tensortune.measure.hardware import profile_for
    from tensortune.target import generic_target_json, host_target_json

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res_path = out / "accuracy.json"
    results: dict[str, Any] = json.loads(res_path.read_text()) if res_path.exists() else {}
    results.setdefault("machine", machine_info())
    src = load_training(a.data)
    src = fasor_data(src, machine_profiles(src))
    train, held = src.split(a.holdout, seed=a.seed)
    results["source"] = {"file": str(a.data), "tasks": int(len(src.tasks())), "samples": len(src),
                         "machine": src.summary["machines"][0], "held_out_tasks": int(len(held.tasks()))}
    # the other machine's tasks: k representatives of the training tasks + some held-out ones
    ids, feats = task_matrix(train)
    reps = [int(ids[i]) for i in representative_tasks(feats, a.k)]
    evals = [int(t) for t in held.tasks()[: a.eval_tasks]]
    target = generic_target_json(a.threads) if a.target == "generic" else dict(host_target_json(a.threads))
    profile = profile_for(target, a.threads)
    op_class = (src.summary.get("spec") or {}).get("op", "conv2d")
    rep_tasks = tasks_of(src, target, reps)
    other, secs = _measure_other(a, rep_tasks + tasks_of(src, target, evals), src.op, op_class, profile)
    shots, test = _split(other, rep_tasks)
    results["other"] = {"target": target, "threads": a.threads, "profile": profile.key(), "k": len(reps),
                        "shot_samples": len(shots), "eval_tasks": int(len(test.tasks())), "eval_samples": len(test),
                        "measure_seconds_this_run": secs,
                        "weaker_test": a.target == "generic"}
    scores = results.setdefault("scores", {})
    for name, (kind, over) in MODELS.items():
        if name in scores:
            continue
        t0 = time.perf_counter()
        model, _ = train_predictor(train, replace(FASOR_TRAIN, kind=kind, seed=a.seed, **over))
        train_s = time.perf_counter() - t0
        row = {"source_r2": _r2(model, held), "zero_shot_r2": _r2(model, test), "train_seconds": train_s}
        t1 = time.perf_counter()
        row["transferred_r2"] = _r2(_transfer(model, kind, shots, a.seed), test)
        row["transfer_seconds"] = time.perf_counter() - t1
        scores[name] = row
        res_path.write_text(json.dumps(results, indent=1))
        print(f"{name}: R^2 source {row['source_r2']:.3f}, other machine as trained {row['zero_shot_r2']:.3f}, "
              f"after transfer {row['transferred_r2']:.3f}", flush=True)
    res_path.write_text(json.dumps(results, indent=1))
    report(results, out)
    return results


def report(results: dict[str, Any], out: Path) -> None:
    """``report.md`` and ``accuracy.png`` from the results."""
    mid = results["machine"]["machine_id"]
    o = results["other"]
    lines = [f"# Fasor cost-model R^2 of -ln(latency), held-out tasks ({mid['cpu_model']}, {mid['llvm_cpu']})", "",
             f"Source: {results['source']['tasks']} tasks / {results['source']['samples']} samples measured on "
             f"{results['source']['machine']['target']} x{results['source']['machine']['threads']}; "
             f"{results['source']['held_out_tasks']} tasks held out.",
             f"Other machine: {o['target'].get('mcpu')} x{o['threads']}{' (the weaker stand-in: same CPU, generic target, 1 thread)' if o['weaker_test'] else ''}; "
             f"k = {o['k']} representative tasks ({o['shot_samples']} samples), scored on {o['eval_tasks']} held-out tasks.",
             *([f"Mode: {results['mode']}: the source R^2 is the model's own held-out score at pre-training; "
                "XGBoost and the LSTM are not trained (they need the pre-training file)."] if "mode" in results else []),
             "", "| model | source (Table 8) | other machine, as trained | after transfer (Table 9) |",
             "|---|---|---|---|"]
    for name, r in results["scores"].items():
        lines.append(f"| {name} | {r['source_r2']:.3f} | {r['zero_shot_r2']:.3f} | {r['transferred_r2']:.3f} |")
    lines += ["", "The paper (i9-9900K): Table 8 0.972 / 0.923 / 0.920 (Fasor / XGBoost / LSTM), "
              "Table 9 after transfer 0.951 / 0.931 / 0.899."]
    write_text(out / "report.md", "\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(results["scores"])
    cols = ("source_r2", "zero_shot_r2", "transferred_r2")
    for j, col in enumerate(cols):
        ax.bar(np.arange(len(names)) + 0.27 * (j - 1), [results["scores"][n][col] for n in names], 0.27, label=col)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("R^2 of -ln(latency)")
    ax.legend(fontsize=8)
    save_figure(fig, out / "accuracy.png")


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study fasor-accuracy", description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None, help="pre-training file (default: transfer the shipped model as it is)")
    p.add_argument("--model", default=None, help="without --data: Fasor model folder (default: the shipped one)")
    p.add_argument("--op", default="conv2d_nchwc", help="without --data: the model's op")
    p.add_argument("--db", required=True, help="database of the other machine's measurements (resumes)")
    p.add_argument("--target", default="generic", choices=("generic", "native"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--eval-tasks", type=int, default=10)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--holdout", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/fasor-accuracy")
    return p


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)
    (run if a.data else run_shipped)(a)


if __name__ == "__main__":
    main()
