"""AutoTVM benchmarks: search overhead, tuning curves, transfer learning, cost-model variants.

    python bench/autotvm.py overhead            # 64-candidate batches on C6: search time vs build+run time
    python bench/autotvm.py curves [--trials 96] [--only C1,C6]   # autotvm / random / genetic on C1-C12
    python bench/autotvm.py transfer            # C7-C9 from scratch vs with a global model from C1-C6
    python bench/autotvm.py models              # rank vs regression, XGBoost vs TreeGRU on C7-C9
    python bench/autotvm.py report              # redo tables and plots from the saved JSON

``curves`` must run before ``transfer`` and ``models``: they reuse its databases (one per
tuner, so no tuner sees another's trials) for the from-scratch runs and the C1-C6 history.
Results go to bench/results/autotvm_*.{json,md,png}; databases to bench/results/autotvm/
(not committed). An interrupted run resumes from its databases.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, load_workloads, machine_info, save_figure, save_json, write_text  # noqa: E402

DB_DIR = RESULTS / "autotvm"
#: Searches start without the template's default config: it is within a few percent of the
#: best on most layers, so measuring it first would hide how fast each search finds good configs.
START_FROM_DEFAULT = False
#: Rounds of the interleaved re-measurement of every tuner's best config.
REMEASURE_ROUNDS = 3
CURVE_TUNERS = ("autotvm", "random", "genetic")
TRANSFER_SOURCES = ("C1", "C2", "C3", "C4", "C5", "C6")
TRANSFER_TARGETS = ("C7", "C8", "C9")
MODEL_VARIANTS = {  # name -> AutoTVMTuner options
    "xgb-rank": {"cost_model": "xgb", "objective": "rank"},
    "xgb-reg": {"cost_model": "xgb", "objective": "reg"},
    "treegru-rank": {"cost_model": "treegru", "objective": "rank"},
}


def conv_layers(only: str = "") -> list[tuple[str, Any]]:
    """ResNet-18 C1-C12 as tasks (optionally a subset by name)."""
    from tensortune.task import Task

    keep = set(only.split(",")) if only else None
    return [(name, Task.from_op(op, shape)) for _, name, op, shape in load_workloads(["resnet18_conv2d"])
            if keep is None or name in keep]


def run_tuner(name: str, task: Any, trials: int, db_path: Path, measurer: Any, seed: int = 0,
              **options: Any) -> dict[str, Any]:
    """Tune ``task`` (resuming from ``db_path``); the curve as best GFLOPS per trial and per second."""
    from tensortune.database import Database
    from tensortune.tuners import get_tuner
    from tensortune.utils.progress import ProgressBar

    with Database(db_path) as db:
        done = db.count(task.workload_key)
        tuner = get_tuner(name, task, seed=seed, start_from_default=START_FROM_DEFAULT, **options)
        bar = ProgressBar(trials, desc=f"{task.name[:28]} {name}")
        t0 = time.perf_counter()
        res = tuner.tune(trials, measurer, callbacks=[bar], database=db)
        bar.close()
        wall = time.perf_counter() - t0
        trials_db = [t for t in db.trials(task.workload_key) if t.confirmation is None]  # search trials
    best, curve, stamps = float("inf"), [], []
    for t in trials_db:  # the curve from the database: complete even after a resume
        if t.ok:
            best = min(best, t.cost)
        curve.append(task.flops / best / 1e9 if best < float("inf") else 0.0)
        stamps.append(t.timestamp)
    elapsed = [s - stamps[0] for s in stamps] if stamps else []
    return {"tuner": name, "options": {k: v for k, v in options.items() if not isinstance(v, dict)},
            "curve": curve, "elapsed": elapsed, "best_gflops": curve[-1] if curve else 0.0,
            "trials": len(curve), "errors": dict(res.errors), "wall_s": wall, "resumed_from": done,
            "status": getattr(tuner, "status", ""), "timings": getattr(tuner, "timings", {})}


def warm_up(measurer: Any, task: Any) -> None:
    """Measure one candidate and discard it: the first run of a fresh runner process is
    slower (seen here: C1's default at 157 GFLOPS first, 199 later), which would bias
    whichever tuner happens to run first."""
    from tensortune.measure import MeasureInput

    measurer.measure([MeasureInput(task, task.default_config())])


def trials_to_reach(curve: list[float], target: float) -> int | None:
    """First trial (1-based) whose best reaches ``target`` GFLOPS (None: never)."""
    for i, g in enumerate(curve):
        if g >= target * (1 - 1e-9):
            return i + 1
    return None


# ---------------------------------------------------------------- overhead
def cmd_overhead(a: argparse.Namespace) -> None:
    """Per 64-candidate batch on C6: time in the tuner (fit, anneal, features, select) against
    time in building and running the candidates."""
    from tensortune.measure import Measurer
    from tensortune.tuners import AutoTVMTuner

    (_, task), = conv_layers("C6")
    tuner = AutoTVMTuner(task, seed=a.seed, batch_size=64, warmup=64)
    rows = []

    class Timed:
        def __init__(self, m: Any) -> None:
            self.m, self.options, self.spent = m, m.options, 0.0

        def measure(self, inputs: Any, on_result: Any = None) -> Any:
            t0 = time.perf_counter()
            out = self.m.measure(inputs, on_result)
            self.spent += time.perf_counter() - t0
            return out

    with Measurer() as m:
        timed = Timed(m)
        last = {"wall": 0.0, "measure": 0.0}

        def per_batch(tun: Any, inputs: Any, results: Any) -> None:
            wall = time.perf_counter() - t_start
            measure = timed.spent
            d_wall, d_meas = wall - last["wall"], measure - last["measure"]
            last.update(wall=wall, measure=measure)
            row = {"batch": len(rows) + 1, "candidates": len(inputs), "measure_s": d_meas,
                   "search_s": d_wall - d_meas, "timings": dict(tun.timings), "fits": tun.fits}
            rows.append(row)
            print(f"batch {row['batch']}: {len(inputs)} candidates, build+run {d_meas:.1f} s, "
                  f"search/model/features {row['search_s']:.1f} s (fits so far {tun.fits})", flush=True)

        t_start = time.perf_counter()
        tuner.tune(64 * a.batches, timed, callbacks=[per_batch])
    model_batches = rows[1:]  # the first batch is random (no model yet)
    summary = {"search_s_median": statistics.median(r["search_s"] for r in model_batches),
               "measure_s_median": statistics.median(r["measure_s"] for r in model_batches)}
    summary["ratio"] = summary["search_s_median"] / summary["measure_s_median"]
    save_json("autotvm_overhead", {"machine": machine_info(), "args": vars(a), "rows": rows, "summary": summary})
    print(f"model-guided batches: search {summary['search_s_median']:.1f} s vs build+run "
          f"{summary['measure_s_median']:.1f} s per 64 candidates (ratio {summary['ratio']:.2f}; target <= 1)")


# ---------------------------------------------------------------- curves
def cmd_curves(a: argparse.Namespace) -> None:
    from tensortune.measure import Measurer

    DB_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "autotvm_curves.json"
    saved = json.loads(path.read_text()) if path.exists() and not a.fresh else {"runs": {}}
    t0 = time.perf_counter()
    layers = conv_layers(a.only)
    with Measurer() as m:
        warm_up(m, layers[0][1])
        for name, task in layers:
            for tuner in CURVE_TUNERS:
                opts = {"transfer": False} if tuner == "autotvm" else {}
                run = run_tuner(tuner, task, a.trials, DB_DIR / f"curves_{tuner}.db", m, a.seed, **opts)
                saved["runs"].setdefault(name, {})[tuner] = run
                print(f"{name} {tuner:8} best {run['best_gflops']:7.1f} GFLOPS after {run['trials']} trials "
                      f"({run['wall_s']:.0f} s)", flush=True)
                saved.update(machine=machine_info(), trials=a.trials, seed=a.seed)
                save_json("autotvm_curves", saved)
        remeasure_bests(m, layers, saved)
    save_json("autotvm_curves", saved)
    print(f"curves done in {(time.perf_counter() - t0) / 60:.1f} min")
    report_curves()


def remeasure_bests(m: Any, layers: list[tuple[str, Any]], saved: dict[str, Any]) -> None:
    """Time every tuner's best config of each layer again, interleaved over a few rounds in
    one process, so slow drift of the shared machine cancels out of the final comparison."""
    from tensortune.database import Database
    from tensortune.measure import MeasureInput

    for name, task in layers:
        runs = saved["runs"].get(name, {})
        best = {}
        for tuner in runs:
            with Database(DB_DIR / f"curves_{tuner}.db", readonly=True) as db:
                rec = db.best(task.workload_key)
            if rec is not None:
                best[tuner] = task.space.get(rec.config_index)
        got: dict[str, list[float]] = {t: [] for t in best}
        for _ in range(REMEASURE_ROUNDS):
            for tuner, cfg in best.items():
                r = m.measure([MeasureInput(task, cfg)])[0]
                if r.ok:
                    got[tuner].append(task.flops / r.cost / 1e9)
        for tuner, vals in got.items():
            runs[tuner]["remeasured_gflops"] = statistics.median(vals) if vals else 0.0
        print(name, "re-measured:", {t: round(runs[t].get("remeasured_gflops", 0), 1) for t in got}, flush=True)


def report_curves() -> None:
    saved = json.loads((RESULTS / "autotvm_curves.json").read_text())
    runs = saved["runs"]
    lines = [f"# Tuning curves on ResNet-18 C1-C12 ({saved['trials']} trials per tuner and layer, seed {saved['seed']}, "
             f"searches not seeded with the template default)",
             "", "Best GFLOPS found; `reach` = trials autotvm needed to match random search's final best "
             "(target: at most a third of the budget).", "",
             "Re-measured: each tuner's best config timed again, interleaved, medians of 3 rounds.", "",
             "| layer | autotvm | random | genetic | autotvm reach | within 1/3 | re-measured autotvm / random / genetic |",
             "|---|---:|---:|---:|---:|---|---|"]
    wins = 0
    for name, r in runs.items():
        if not all(t in r for t in CURVE_TUNERS):
            continue
        rand_best = r["random"]["best_gflops"]
        reach = trials_to_reach(r["autotvm"]["curve"], rand_best)
        ok = reach is not None and reach <= saved["trials"] / 3
        wins += ok
        lines.append(f"| {name} | {r['autotvm']['best_gflops']:.1f} | {rand_best:.1f} | {r['genetic']['best_gflops']:.1f} "
                     f"| {reach if reach is not None else 'never'} | {'yes' if ok else 'no'} | "
                     + " / ".join(f"{r[t].get('remeasured_gflops', float('nan')):.1f}" for t in CURVE_TUNERS) + " |")
    lines += ["", f"autotvm matched random's final best within a third of the budget on **{wins} of "
              f"{sum(all(t in r for t in CURVE_TUNERS) for r in runs.values())}** layers."]
    md = "\n".join(lines) + "\n"
    write_text(RESULTS / "autotvm_curves.md", md)
    print(md)
    plot_curves(runs, "autotvm_curves", "Best GFLOPS vs trials / wall time (ResNet-18)")


def plot_curves(runs: dict[str, dict[str, Any]], name: str, title: str) -> None:
    """Two rows of small multiples per layer: best GFLOPS against trials and against seconds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    layers = list(runs)
    cols = min(6, len(layers))
    blocks = -(-len(layers) // cols)
    fig, axes = plt.subplots(2 * blocks, cols, figsize=(3.0 * cols, 2.4 * 2 * blocks), squeeze=False)
    for i, layer in enumerate(layers):
        br, c = divmod(i, cols)
        for tuner, run in runs[layer].items():
            axes[2 * br][c].plot(range(1, len(run["curve"]) + 1), run["curve"], label=tuner)
            axes[2 * br + 1][c].plot(run["elapsed"], run["curve"], label=tuner)
        axes[2 * br][c].set_title(layer, fontsize=9)
        axes[2 * br][c].set_xlabel("trials", fontsize=8)
        axes[2 * br + 1][c].set_xlabel("seconds", fontsize=8)
        axes[2 * br][c].set_ylabel("GFLOPS", fontsize=8)
        axes[2 * br + 1][c].set_ylabel("GFLOPS", fontsize=8)
    for j in range(len(layers), blocks * cols):
        br, c = divmod(j, cols)
        axes[2 * br][c].axis("off")
        axes[2 * br + 1][c].axis("off")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, RESULTS / f"{name}.png", dpi=100)


# ---------------------------------------------------------------- transfer
def _copy_history(src: Path, dst: Path, names: set[str]) -> int:
    """Copy the tasks and trials of the named layers from one database to a fresh one."""
    from tensortune.database import Database

    keys = {t.workload_key for n, t in conv_layers() if n in names}
    n = 0
    with Database(src, readonly=True) as s, Database(dst) as d:
        for rec in s.tasks():
            if rec.workload_key in keys:
                d.add_task(rec)
                for trial in s.trials(rec.workload_key):
                    trial.id = None
                    d.add_trial(trial)
                    n += 1
    return n


def cmd_transfer(a: argparse.Namespace) -> None:
    from tensortune.measure import Measurer

    curves = json.loads((RESULTS / "autotvm_curves.json").read_text())["runs"]
    source_db = DB_DIR / "curves_autotvm.db"
    out: dict[str, Any] = {"runs": {}, "trials": a.trials, "sources": list(TRANSFER_SOURCES)}
    with Measurer() as m:
        warm_up(m, conv_layers("C7")[0][1])
        for name, task in conv_layers(",".join(TRANSFER_TARGETS)):
            db = DB_DIR / f"transfer_{name}.db"
            if not db.exists():
                copied = _copy_history(source_db, db, set(TRANSFER_SOURCES))
                print(f"{name}: {copied} records of {', '.join(TRANSFER_SOURCES)} copied for transfer", flush=True)
            run = run_tuner("autotvm", task, a.trials, db, m, a.seed, transfer=True)
            scratch = curves[name]["autotvm"]
            final = scratch["best_gflops"]
            out["runs"][name] = {"scratch": scratch, "transfer": run,
                                 "reach_scratch": trials_to_reach(scratch["curve"], final),
                                 "reach_transfer": trials_to_reach(run["curve"], final)}
            print(f"{name}: scratch final {final:.1f} GFLOPS at trial {out['runs'][name]['reach_scratch']}; "
                  f"transfer reaches it at trial {out['runs'][name]['reach_transfer']} ({run['status']})", flush=True)
            out["machine"] = machine_info()
            save_json("autotvm_transfer", out)
    report_transfer()


def report_transfer() -> None:
    saved = json.loads((RESULTS / "autotvm_transfer.json").read_text())
    lines = [f"# Transfer learning: C7-C9 with a global model from {', '.join(saved['sources'])} records "
             f"({saved['trials']} trials)", "",
             "| layer | scratch final GFLOPS | scratch reached it at | transfer final GFLOPS | transfer reached it at | "
             "half the trials or fewer |", "|---|---:|---:|---:|---:|---|"]
    for name, r in saved["runs"].items():
        rs, rt = r["reach_scratch"], r["reach_transfer"]
        ok = rt is not None and rt <= rs / 2
        lines.append(f"| {name} | {r['scratch']['best_gflops']:.1f} | {rs} | {r['transfer']['best_gflops']:.1f} | "
                     f"{rt if rt is not None else 'never'} | {'yes' if ok else 'no'} |")
        lines.append(f"|  | | | *{r['transfer']['status']}* | | |")
    md = "\n".join(lines) + "\n"
    write_text(RESULTS / "autotvm_transfer.md", md)
    print(md)
    plot_curves({n: {"scratch": r["scratch"], "transfer": r["transfer"]} for n, r in saved["runs"].items()},
                "autotvm_transfer", "autotvm from scratch vs with transfer from C1-C6")


# ---------------------------------------------------------------- model variants
def cmd_models(a: argparse.Namespace) -> None:
    from tensortune.measure import Measurer

    curves = json.loads((RESULTS / "autotvm_curves.json").read_text())["runs"]
    path = RESULTS / "autotvm_models.json"
    out = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    out.update(trials=a.trials)
    with Measurer() as m:
        warm_up(m, conv_layers("C7")[0][1])
        for name, task in conv_layers(a.only or ",".join(TRANSFER_TARGETS)):
            runs = out["runs"].setdefault(name, {})
            runs["xgb-rank"] = curves[name]["autotvm"]  # the curves run is the default model
            for variant, opts in MODEL_VARIANTS.items():
                if variant == "xgb-rank":
                    continue
                run = run_tuner("autotvm", task, a.trials, DB_DIR / f"models_{variant}.db", m, a.seed,
                                transfer=False, **opts)
                runs[variant] = run
                print(f"{name} {variant:13} best {run['best_gflops']:7.1f} GFLOPS ({run['wall_s']:.0f} s, "
                      f"model time {sum(run['timings'].values()):.0f} s)", flush=True)
                out["machine"] = machine_info()
                save_json("autotvm_models", out)
    report_models()


def report_models() -> None:
    saved = json.loads((RESULTS / "autotvm_models.json").read_text())
    variants = list(MODEL_VARIANTS)
    lines = [f"# Cost-model variants ({saved['trials']} trials): best GFLOPS at 1/3, 2/3 and all of the budget", "",
             "| layer | " + " | ".join(variants) + " |", "|---|" + "---:|" * len(variants)]
    for name, runs in saved["runs"].items():
        cells = []
        for v in variants:
            c = runs.get(v, {}).get("curve", [])
            if not c:
                cells.append("-")
                continue
            marks = [c[min(len(c), max(1, len(c) * k // 3)) - 1] for k in (1, 2, 3)]
            cells.append(" / ".join(f"{x:.0f}" for x in marks))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    md = "\n".join(lines) + "\n"
    write_text(RESULTS / "autotvm_models.md", md)
    print(md)
    plot_curves(saved["runs"], "autotvm_models", "autotvm cost models: rank vs regression, XGBoost vs TreeGRU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("overhead", "curves", "transfer", "models", "report"))
    ap.add_argument("--trials", type=int, default=96)
    ap.add_argument("--only", default="", help="comma-separated layer names (curves, models)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batches", type=int, default=3, help="overhead: 64-candidate batches")
    ap.add_argument("--fresh", action="store_true", help="curves: forget saved results (databases still resume)")
    a = ap.parse_args()
    if a.command == "report":
        for name, fn in (("curves", report_curves), ("transfer", report_transfer), ("models", report_models)):
            if (RESULTS / f"autotvm_{name}.json").exists():
                fn()
        return
    {"overhead": cmd_overhead, "curves": cmd_curves, "transfer": cmd_transfer, "models": cmd_models}[a.command](a)


if __name__ == "__main__":
    main()
