"""One-Shot Tuner's one-time cost, and after how many compilations it pays back: ``python -m bench run --study payback``.

    python -m bench run --study payback --dataset data/conv2d-model.db [--dataset DB ...] [--predictor DIR ...]
                            --models RESULTS/models.json [--baseline autotvm] [--tuner oneshot]
                            [--out bench/results/payback]

The one-time cost is the measuring time of the datasets (``tensortune dataset status``: per task,
first to last stored sample) plus the training time of the predictors (their schemas' reports;
default: the packaged predictors). A compilation's saving is the baseline's tuning wall time
minus ``oneshot``'s, per model of a suite run (``python -m bench run --suite models
--model-tuners oneshot,autotvm``). The cost pays back after ``ceil(one-time / saving)``
compilations (the paper's §7: within 23). Writes ``payback.json`` and ``report.md``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from .common import write_text


def dataset_hours(db_path: str) -> dict[str, Any]:
    """``tensortune dataset status`` of one dataset database."""
    from tensortune.database import Database
    from tensortune.app import dataset as G

    spec = G.read_spec(db_path)
    if spec is None:
        raise ValueError(f"{db_path}: not a dataset database (no {G.spec_path(db_path)})")
    tasks = G.frozen_tasks(spec, db_path)
    with Database(db_path, readonly=True) as db:
        st = G.status(spec, db, tasks)
    return {"db": db_path, "op": spec.op, **st}


def training_seconds(folder: Path) -> dict[str, Any]:
    """Training time and data of one predictor folder."""
    from tensortune.learn import load_predictor

    p = load_predictor(folder)
    rep = p.schema.get("training", {}).get("report", {})
    return {"predictor": str(folder), "op": p.op, "kind": p.kind, "seconds": float(rep.get("seconds", 0.0)),
            "tasks": p.schema.get("dataset", {}).get("tasks"), "samples": p.schema.get("dataset", {}).get("samples")}


def payback(one_time_s: float, models: dict[str, Any], baseline: str, tuner: str) -> list[dict[str, Any]]:
    """Per model: both wall times, the saving per compilation and the compilations to pay back."""
    rows = []
    for name, entry in models.items():
        systems = entry.get("systems", {})
        base, ours = systems.get(baseline, {}), systems.get(tuner, {})
        if not base.get("ok") or not ours.get("ok"):
            continue
        b, o = float(base["tune_wall_s"]), float(ours["tune_wall_s"])
        saving = b - o
        rows.append({"model": name, f"{baseline}_s": b, f"{tuner}_s": o, "saving_s": saving,
                     "payback_compilations": math.ceil(one_time_s / saving) if saving > 0 else None})
    return rows


def _models_machine(models_json: Path) -> str:
    """The CPU model and LLVM cpu of the suite runs beside ``models.json`` (their ``meta.json``)."""
    from .suite.store import RunDir

    ids = {(r["machine"].get("cpu_model"), r["machine"].get("llvm_cpu"))
           for r in RunDir(models_json.parent).runs() if "machine" in r}
    return "; ".join(f"{cpu} ({llvm})" for cpu, llvm in sorted(ids)) or "not recorded"


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study payback", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", action="append", required=True, help="dataset database (repeatable)")
    p.add_argument("--predictor", action="append", default=[], help="predictor folder (default: the packaged ones)")
    p.add_argument("--models", required=True, help="models.json of a suite run with both tuners")
    p.add_argument("--baseline", default="autotvm")
    p.add_argument("--tuner", default="oneshot")
    p.add_argument("--out", default="bench/results/payback")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    from tensortune.costmodel.pretrained import available_ops, predictor_folder

    folders = [Path(f) for f in a.predictor] or [predictor_folder(op) for op in available_ops()]
    try:
        datasets = [dataset_hours(d) for d in a.dataset]
        trained = [training_seconds(f) for f in folders if f is not None]
    except (OSError, ValueError) as e:
        print(f"bench.payback: error: {e}", file=sys.stderr)
        return 2
    one_time = sum(d["measuring_hours"] for d in datasets) * 3600 + sum(t["seconds"] for t in trained)
    rows = payback(one_time, json.loads(Path(a.models).read_text()), a.baseline, a.tuner)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"datasets": datasets, "predictors": trained, "one_time_s": one_time, "models": rows}
    write_text(out / "payback.json", json.dumps(result, indent=1))
    lines = ["# One-time cost and payback", "",
             f"One-time cost: {one_time / 3600:.2f} h ("
             + ", ".join(f"{d['op']} dataset {d['measuring_hours']:.2f} h ({d['complete']}/{d['tasks']} tasks)"
                         for d in datasets)
             + "; training " + ", ".join(f"{t['op']} {t['seconds'] / 60:.1f} min" for t in trained) + ").", "",
             "Datasets measured on: " + ("; ".join(sorted({m for d in datasets for m in d.get("machines", {})}))
                                         or "-") + ". Compilations timed on: " + _models_machine(Path(a.models)) + ".",
             "",
             f"| model | {a.baseline} (s) | {a.tuner} (s) | saved per compilation (s) | pays back after |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        pb = r["payback_compilations"]
        lines.append(f"| {r['model']} | {r[f'{a.baseline}_s']:.0f} | {r[f'{a.tuner}_s']:.0f} | {r['saving_s']:.0f} | "
                     f"{pb if pb is not None else 'never'} |")
    write_text(out / "report.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
