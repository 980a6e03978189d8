"""Predictor accuracy and the dataset ablation: ``python -m bench run --study predictors``.

    python -m bench run --study predictors --train pgs-ebs=data/train/conv2d_nchwc.npz [--train random-ebs=FILE ...]
                               [--kinds transformer,mlp,lstm,xgb] [--holdout 0.2] [--eval resnet18=FILE ...]
                               [--epochs 200] [--time-budget 900] [--seed 0 | --seeds 0,1,2]
                               [--out bench/results/predictors]

Each training file (``tensortune dataset export``) is split by task (``--holdout`` of its tasks,
the same tasks for every kind); each kind is trained on the rest with the shared trainer and
scored on the held-out tasks and on every ``--eval`` file of its op (e.g. an export of a suite database:
the C1-C12 or a model's tasks measured by autotvm): R^2, mean per-task Spearman, top-1 / top-5
recall of each task's measured best, and the best label among the predicted top 64 (One-Shot
Tuner's §6.3.4 comparison; with several ``--train`` sets, its Table 4 ablation). Results go to
``OUT/predictors.json`` as each model finishes, and each model into ``OUT/models/TRAIN-KIND/``
(a predictor folder, no pickles). ``--predictor NAME=DIR`` scores a predictor trained before (the
shipped one, which ``--tuner oneshot`` uses) on the same eval files, beside the kinds trained here. A rerun trains nothing that is there: it scores the kept
models on any ``--eval`` file they were not scored on yet (an export made after the training).
Then ``OUT/report.md`` and ``OUT/predictors.png``. Training runs on every core: run nothing else
meanwhile.

With small datasets (the ablation's 40 tasks) one training is mostly noise: ``--seeds 0,1,2`` runs
the whole thing once per seed (a seed picks both the held-out tasks and the initial weights; seed 0
writes ``OUT``, seed S ``OUT/seed-S``, each resumable as above), then ``OUT/seeds.md`` and
``seeds.json`` give each metric's mean and standard deviation over the seeds, and for training sets
named ``SAMPLER-CODE`` (``pgs-ebs``, ``random-random``, ...) the paper's Table 4 layout: a row per task
sampler, a column per code sampler.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .common import machine_info, save_figure, write_text

METRICS = ("r2", "spearman", "top1_recall", "top5_recall", "top64_quality")
TABLE4_METRICS = ("spearman", "top64_quality")


def _named(items: list[str], flag: str) -> dict[str, Path]:
    out = {}
    for item in items:
        name, eq, path = item.partition("=")
        if not eq or not name or not path:
            raise SystemExit(f"{flag} takes NAME=FILE, got {item!r}")
        out[name] = Path(path)
    return out


def evaluate(predictor: Any, data: Any) -> dict[str, Any]:
    """Ranking metrics of ``predictor`` on ``data`` (a TrainingData)."""
    from tensortune.learn.metrics import ranking_metrics

    return ranking_metrics(data.label, predictor.predict_rows(data.inputs()), data.task_index)


def _score(predictor: Any, train: Any, data: Any) -> dict[str, Any]:
    """:func:`evaluate` on ``data`` where it holds the op ``train`` was (else no scores)."""
    return evaluate(predictor, data) if data.op == train.op else {}


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Train and score every (training set, kind); returns the results (also saved)."""
    from tensortune.learn import load_training
    from tensortune.learn.predictor import load_predictor
    from tensortune.learn.trainer import TrainOptions, train_predictor

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "predictors.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    results.setdefault("machine", machine_info())
    results.setdefault("runs", {})
    evals = {name: load_training(p) for name, p in _named(a.eval, "--eval").items()}
    for tname, tpath in _named(a.train, "--train").items():
        data = load_training(tpath)
        rest, held = data.split(a.holdout, seed=a.seed)
        for kind in a.kinds.split(","):
            key = f"{tname}/{kind}"
            kept = out / "models" / f"{tname}-{kind}"
            if key in results["runs"]:
                row = results["runs"][key]
                missing = [e for e in evals if e not in row["scores"]]
                if missing and kept.exists():
                    predictor = load_predictor(kept)
                    for ename in missing:
                        row["scores"][ename] = _score(predictor, data, evals[ename])
                    write_text(path, json.dumps(results, indent=1))
                    print(f"{key}: done before, kept; scored on {', '.join(missing)}", flush=True)
                else:
                    print(f"{key}: done before, kept" + (f" (no model kept to score {', '.join(missing)})"
                                                         if missing else ""), flush=True)
                continue
            opts = TrainOptions(kind=kind, max_epochs=a.epochs, time_budget=a.time_budget, seed=a.seed,
                                lr=a.lr if kind != "xgb" else TrainOptions.lr)
            t0 = time.perf_counter()
            predictor, trained = train_predictor(rest, opts)
            row = {"train": str(tpath), "op": data.op, "train_tasks": int(len(rest.tasks())),
                   "train_samples": len(rest), "heldout_tasks": int(len(held.tasks())), "seconds": time.perf_counter() - t0,
                   "epochs": trained.epochs, "stop_reason": trained.stop_reason,
                   "scores": {"held-out": evaluate(predictor, held) if len(held) else {}}}
            for ename, edata in evals.items():
                row["scores"][ename] = _score(predictor, data, edata)
            predictor.save(kept)
            row["model"] = str(kept.relative_to(out))
            results["runs"][key] = row
            write_text(path, json.dumps(results, indent=1))
            s = row["scores"]["held-out"]
            print(f"{key}: {trained.epochs} epochs, {row['seconds']:.0f} s; held-out Spearman {s.get('spearman', 0):.3f}, "
                  f"top-1 {s.get('top1_recall', 0):.2f}, top-5 {s.get('top5_recall', 0):.2f}", flush=True)
    for pname, folder in _named(a.predictor, "--predictor").items():
        _score_kept(results, path, pname, folder, evals)
    write_report(results, out)
    return results


def _score_kept(results: dict[str, Any], path: Path, name: str, folder: Path, evals: dict[str, Any]) -> None:
    """Score an already trained predictor folder (e.g. the shipped one) on the eval files of its op;
    it has no held-out tasks of its own. Kept across reruns like the trained rows: a rerun loads it
    only when an eval file of its op is new."""
    from tensortune.learn.predictor import load_predictor

    row = results["runs"].get(name)
    if row is not None and not any(e not in row["scores"] and d.op == row["op"] for e, d in evals.items()):
        print(f"{name}: a trained predictor ({row['op']}); scored on nothing new", flush=True)
        return
    predictor = load_predictor(folder)
    if row is None:
        ds = predictor.schema.get("dataset", {})
        row = {"train": str(folder), "op": predictor.op, "train_tasks": int(ds.get("tasks", 0)),
               "train_samples": int(ds.get("samples", 0)), "heldout_tasks": 0, "kept": True,
               "scores": {"held-out": {}}}
        results["runs"][name] = row
    scored = [e for e, d in evals.items() if e not in row["scores"] and d.op == predictor.op]
    for ename in scored:
        row["scores"][ename] = evaluate(predictor, evals[ename])
    write_text(path, json.dumps(results, indent=1))
    print(f"{name}: a trained predictor ({predictor.op}); scored on {', '.join(scored) or 'nothing new'}", flush=True)


def write_report(results: dict[str, Any], out: Path) -> None:
    """``report.md`` and ``predictors.png`` from the results."""
    runs = results.get("runs", {})
    m = results.get("machine", {})
    mid = m.get("machine_id", {})
    lines = ["# Predictor accuracy", "",
             f"Machine: {mid.get('cpu_model', '?')} ({mid.get('llvm_cpu', '?')}, {mid.get('cores', '?')} cores); "
             f"{m.get('date', '')}. Scores on tasks no model was trained on: "
             "R^2, mean per-task Spearman, share of tasks whose measured best is the predicted top-1 / in the "
             "top-5, and the best measured label among the predicted top 64 (1.0 = the task's best).", "",
             "| train set / kind | train tasks | samples | eval set | tasks | R^2 | Spearman | top-1 | top-5 | top-64 best |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for key, row in runs.items():
        for ename, s in row["scores"].items():
            if not s:
                continue
            lines.append(f"| {key} | {row['train_tasks']} | {row['train_samples']} | {ename} | {s['tasks']} | "
                         f"{s['r2']:.3f} | {s['spearman']:.3f} | {s['top1_recall']:.2f} | {s['top5_recall']:.2f} | "
                         f"{s['top64_quality']:.3f} |")
    write_text(out / "report.md", "\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    evals = sorted({e for row in runs.values() for e, s in row["scores"].items() if s})
    if not runs or not evals:
        return
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(runs)), 3.5))
    width = 0.8 / len(evals)
    for j, e in enumerate(evals):
        ax.bar([i + j * width for i in range(len(runs))],
               [row["scores"].get(e, {}).get("spearman", 0.0) for row in runs.values()], width, label=e)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(runs))], list(runs), rotation=30, ha="right")
    ax.set_ylabel("mean per-task Spearman")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "predictors.png", dpi=120)
    plt.close(fig)


def seed_folder(out: Path, seed: int) -> Path:
    """Where one seed's run lives: ``OUT`` for seed 0, ``OUT/seed-S`` otherwise."""
    return out if seed == 0 else out / f"seed-{seed}"


def summarize_seeds(out: Path, seeds: list[int]) -> dict[str, Any]:
    """Mean and standard deviation over the seeds' runs of every (train set / kind, eval set, metric);
    writes ``OUT/seeds.json`` and ``OUT/seeds.md``. A (key, eval set) missing from a seed's run is
    averaged over the seeds that have it (the count is kept)."""
    per: dict[tuple[str, str], dict[str, list[float]]] = {}
    machine: dict[str, Any] = {}
    for seed in seeds:
        path = seed_folder(out, seed) / "predictors.json"
        if not path.exists():
            continue
        res = json.loads(path.read_text())
        machine = machine or res.get("machine", {})
        for key, row in res.get("runs", {}).items():
            for ename, sc in row["scores"].items():
                if sc:
                    cell = per.setdefault((key, ename), {m: [] for m in METRICS})
                    for m in METRICS:
                        cell[m].append(float(sc[m]))
    rows = [{"key": key, "eval": ename, "seeds": len(cell["spearman"]),
             **{m: {"mean": statistics.fmean(cell[m]), "sd": statistics.stdev(cell[m]) if len(cell[m]) > 1 else 0.0}
                for m in METRICS}}
            for (key, ename), cell in per.items()]
    summary = {"machine": machine, "seeds": seeds, "rows": rows}
    write_text(out / "seeds.json", json.dumps(summary, indent=1))
    write_text(out / "seeds.md", _seeds_markdown(summary))
    return summary


def _seeds_markdown(summary: dict[str, Any]) -> str:
    mid = summary.get("machine", {}).get("machine_id", {})
    rows = summary["rows"]
    lines = ["# Predictor accuracy over seeds", "",
             f"Machine: {mid.get('cpu_model', '?')} ({mid.get('llvm_cpu', '?')}, {mid.get('cores', '?')} cores). "
             f"Seeds {', '.join(map(str, summary['seeds']))}: each picks the held-out tasks and the initial "
             "weights. Mean +- standard deviation over the seeds that have the row.", "",
             "| train set / kind | eval set | seeds | R^2 | Spearman | top-1 | top-5 | top-64 best |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = " | ".join(f"{r[m]['mean']:.3f} +- {r[m]['sd']:.3f}" for m in METRICS)
        lines.append(f"| {r['key']} | {r['eval']} | {r['seeds']} | {cells} |")
    # the paper's Table 4: task sampler x code sampler, for training sets named SAMPLER-CODE
    grid: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
    for r in rows:
        train, _, kind = r["key"].rpartition("/")
        sampler, dash, code = train.rpartition("-")
        if dash and sampler:
            grid.setdefault((kind, r["eval"]), {})[(sampler, code)] = r
    for (kind, ename), cells in sorted(grid.items()):
        samplers = sorted({s for s, _ in cells})
        codes = sorted({c for _, c in cells})
        if len(samplers) < 2 and len(codes) < 2:
            continue
        lines += ["", f"## Table 4 layout: {kind}, scored on {ename}", "",
                  "Mean Spearman / mean best label among the predicted top 64, over the seeds.", "",
                  "| task sampler | " + " | ".join(f"{c} code" for c in codes) + " |",
                  "|---|" + "---:|" * len(codes)]
        for smp in samplers:
            vals = [cells.get((smp, c)) for c in codes]
            lines.append(f"| {smp} | " + " | ".join(
                "-" if v is None else " / ".join(f"{v[m]['mean']:.3f}" for m in TABLE4_METRICS) for v in vals) + " |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study predictors", description=__doc__.split("\n\n")[0])
    p.add_argument("--train", action="append", default=[], help="NAME=FILE (repeatable: the ablation's datasets)")
    p.add_argument("--predictor", action="append", default=[], help="NAME=DIR: a predictor already trained (e.g. "
                   "the shipped src/tensortune/learn/pretrained/OP), scored on the --eval files of its op (repeatable)")
    p.add_argument("--eval", action="append", default=[], help="NAME=FILE scored too (repeatable)")
    p.add_argument("--kinds", default="transformer,mlp,lstm,xgb")
    p.add_argument("--holdout", type=float, default=0.2)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--time-budget", type=float, default=None, help="seconds of training per model at most")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", default=None, help="comma-separated seeds: one run each (seed S in OUT/seed-S, "
                   "seed 0 in OUT), then OUT/seeds.md over them")
    p.add_argument("--out", default="bench/results/predictors")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if not a.train and not a.predictor:
        p.error("give --train NAME=FILE or --predictor NAME=DIR")
    try:
        if a.seeds is None:
            run(a)
            return 0
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"--seeds takes distinct non-negative integers, got {a.seeds!r}")
        for seed in seeds:
            run(argparse.Namespace(**{**vars(a), "seed": seed, "out": str(seed_folder(Path(a.out), seed))}))
        summarize_seeds(Path(a.out), seeds)
    except ValueError as e:
        print(f"bench.predictors: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
