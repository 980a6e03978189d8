"""The ceiling of the search spaces: the best each template reaches, next to the library.

Tunes every workload of ``bench/workloads.json`` (or the chosen groups) with one of
tensortune's tuners until it converges (trial budget, or ``--early-stopping`` trials without
improvement), then measures the best config and the same computation in numpy (matmul,
dense, batch_matmul) or PyTorch (conv2d, depthwise) in the same run, interleaved
(``--rounds`` rounds, medians), on the same thread count. Target: the median ratio
library time / tensortune time over ResNet-18 C1-C12 and the square matmuls is >= 0.8.

    python bench/ceiling.py [--groups resnet18_conv2d,square_matmul] [--trials 200] [--tuner genetic]
    python bench/ceiling.py --groups odd_conv2d --blocked --tuner autotvm --trials 64 --name oddshapes

Writes bench/results/ceiling.{json,md,png}; the tuning database (default
bench/results/ceiling.db, not committed) makes an interrupted run resume.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GROUP_OPS, RESULTS, load_workloads, machine_info, save_figure, save_json, write_text  # noqa: E402

TARGET_GROUPS = ("resnet18_conv2d", "square_matmul")


def main() -> None:
    from tensortune.database import Database
    from tensortune.measure import MeasureInput, Measurer
    from tensortune.task import Task
    from tensortune.tuners import get_tuner
    from tensortune.utils.libs import library_latency
    from tensortune.utils.progress import ProgressBar

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default=",".join(GROUP_OPS))
    ap.add_argument("--only", default="", help="comma-separated workload names (e.g. C1,C6,MM512)")
    ap.add_argument("--tuner", default="genetic")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--early-stopping", type=int, default=100)
    ap.add_argument("--time-budget", type=float, default=600.0, help="seconds per workload")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", default=str(RESULTS / "ceiling.db"))
    ap.add_argument("--name", default="ceiling")
    ap.add_argument("--blocked", action="store_true",
                    help="tune convolutions in the blocked layout a model's plan gives them (conv2d_nchwc, "
                         "depthwise_conv2d_nchwc); the library still runs its own NCHW")
    ap.add_argument("--report-only", action="store_true", help="redo the table and plot from NAME.json")
    a = ap.parse_args()
    if a.report_only:
        saved = json.loads((RESULTS / f"{a.name}.json").read_text())
        a.tuner, a.trials = saved["args"]["tuner"], saved["args"]["trials"]
        report(saved["rows"], a, saved.get("total_s", float("nan")))
        return

    work = load_workloads(a.groups.split(","))
    if a.only:
        keep = set(a.only.split(","))
        work = [w for w in work if w[1] in keep]
    RESULTS.mkdir(parents=True, exist_ok=True)
    db = Database(a.db)
    rows = []
    t_start = time.perf_counter()
    with Measurer() as m:
        threads = m.options.threads
        for group, name, op, shape in work:
            if a.blocked:
                from tensortune.models.layout import blocked_workload
                from tensortune.target import host_target_json

                op, shape = blocked_workload(op, shape, host_target_json())
            task = Task.from_op(op, shape)
            bar = ProgressBar(a.trials, desc=f"{name} {a.tuner}")
            t0 = time.perf_counter()
            res = get_tuner(a.tuner, task, seed=a.seed).tune(a.trials, m, early_stopping=a.early_stopping,
                                                             time_budget=a.time_budget, callbacks=[bar], database=db)
            bar.close()
            tune_s = time.perf_counter() - t0
            best = db.best(task.workload_key)
            if best is None:
                print(f"{name}: no valid config found", flush=True)
                continue
            cfg = task.space.get(best.config_index)
            ours, lib = [], []
            for _ in range(a.rounds):  # interleaved so drift of the machine hits both alike
                r = m.measure([MeasureInput(task, cfg)])[0]
                if r.ok:
                    ours.append(r.cost)
                lib_name, s = library_latency(task, threads)
                lib.append(s)
            if not ours:
                print(f"{name}: best config failed on re-measurement", flush=True)
                continue
            o, l = statistics.median(ours), statistics.median(lib)
            row = {"group": group, "name": name, "op": op, "shape": shape, "trials": db.count(task.workload_key),
                   "tune_s": tune_s, "stop": res.stop_reason, "ours_ms": o * 1e3, "ours_gflops": task.flops / o / 1e9,
                   "library": lib_name, "lib_ms": l * 1e3, "lib_gflops": task.flops / l / 1e9, "ratio": l / o,
                   "best_config": best.config}
            rows.append(row)
            print(f"{name:7} {op:17} ours {row['ours_gflops']:7.1f} GFLOPS  {lib_name} {row['lib_gflops']:7.1f} GFLOPS  "
                  f"ratio {row['ratio']:.2f}  ({row['trials']} trials, {tune_s:.0f} s, {res.stop_reason})", flush=True)
            save_json(a.name, {"machine": machine_info(), "args": vars(a), "rows": rows,
                               "total_s": time.perf_counter() - t_start})
    db.close()
    report(rows, a, time.perf_counter() - t_start)


def report(rows: list[dict], a: argparse.Namespace, total_s: float) -> None:
    """Print the summary and write the Markdown table and the plot."""
    target = [r["ratio"] for r in rows if r["group"] in TARGET_GROUPS]
    over = "ResNet-18 C1-C12 and square matmuls (target >= 0.8)"
    if not target:  # a run of other groups only (odd shapes, say): the median over what it ran
        target, over = [r["ratio"] for r in rows], "the workloads of this run"
    med = statistics.median(target) if target else float("nan")
    lines = [f"# Ceiling of the search spaces ({a.tuner}, up to {a.trials} trials per workload)", "",
             f"Median ratio tensortune/library GFLOP/s (library time / tensortune time) over {over}: "
             f"**{med:.2f}** ({len(target)} workloads). Total wall time {total_s / 60:.0f} min.", "",
             "| workload | op | tensortune GFLOPS | library | library GFLOPS | ratio | trials |",
             "|---|---|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['op']} | {r['ours_gflops']:.1f} | {r['library']} | {r['lib_gflops']:.1f} | "
                     f"{r['ratio']:.2f} | {r['trials']} |")
    md = "\n".join(lines) + "\n"
    write_text(RESULTS / f"{a.name}.md", md)
    print("\n" + md)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.45), 4))
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r["ours_gflops"] for r in rows], 0.4, label="tensortune (best found)")
        ax.bar([i + 0.2 for i in x], [r["lib_gflops"] for r in rows], 0.4, label="numpy / PyTorch")
        ax.set_xticks(list(x), [r["name"] for r in rows], rotation=60)
        ax.set_ylabel("GFLOPS")
        ax.set_title(f"Search-space ceiling; median ratio tensortune/library = {med:.2f}")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, frameon=False)
        fig.tight_layout()
        save_figure(fig, RESULTS / f"{a.name}.png", dpi=110)
    except ImportError:
        print("matplotlib not installed: no plot")


if __name__ == "__main__":
    main()
