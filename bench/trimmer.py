"""Trimmer's cold-candidate filter on whole models: ``python -m bench run --study trimmer``.

    python -m bench run --study trimmer [--models resnet18,mobilenet_v2] [--tuners autotvm,trimmer]
                            [--time-budget 1800] [--out bench/results/trimmer]

For each model and tuner, ``tensortune tune MODEL --tuner T --time-budget S`` runs into a
database of its own (``OUT/MODEL-T.db``; a finished run is not repeated: its ``tune --json``
output is kept beside it; an interrupted one starts again from an empty database), then the model is compiled with that database's
bests and timed against its untuned build (``tensortune``'s model bench, outputs checked against
PyTorch). From each database, per task and in trial order, the candidates that failed or lie
above the LOESS trend of their task's latencies (:func:`tensortune.select.cold.cold_mask`) are
the cold ones; their share of the tuning time (wall seconds of building and running them, and
CPU-seconds where recorded) is the paper's Table IV figure (26-43% without the filter). The
cost per 1 ms of model improvement (Fig. 13) is the tuning run's wall time and CPU-seconds over
(untuned - tuned latency). Writes ``OUT/trimmer.json`` and ``OUT/trimmer.md``.

With ``--suite RESULTS`` nothing is tuned: the systems come from a whole-model suite folder
(``python -m bench run --suite models --models resnet18,mobilenet_v2 --model-tuners
autotvm,trimmer``, or ``trimmer`` added to a folder that has autotvm), whose interleaved
benchmark timed them all in one run. With ``--race RESULTS`` nothing is tuned either: the systems
are the tuners of a finished race's run to completion (``python -m bench run --study race``: every tuner the
same budget of survey rounds, so the filter's effect is the only difference between ``trimmer``
and ``autotvm`` there), their latencies from the race's final benchmark (after the in-model
check, one interleaved benchmark per model).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import fmt, machine_info, machine_line, write_text
from .modelruns import latency, run_json, suite_system
from .race_study import race_system


def filtered_count(run: dict[str, Any]) -> int | None:
    """Candidates the cold filter dropped over a ``tune --json`` run's tasks, or None where no task
    carries the filter's report (a tuner without the filter: its table cell is "-", not 0)."""
    from tensortune.select.cold import filtered_total

    searches = [t.get("search", {}) for t in run.get("tasks", [])]
    return filtered_total(s["cold_filter"] for s in searches if "cold_filter" in s)


def filtered_per_task(run: dict[str, Any]) -> dict[str, int]:
    """Candidates the cold filter dropped per task (workload key) of a ``tune --json`` run; tasks
    without the filter's report are absent."""
    out: dict[str, int] = {}
    for t in run.get("tasks", []):
        for key, rep in ((t.get("search") or {}).get("cold_filter") or {}).items():
            out[key] = out.get(key, 0) + int(rep["filtered"])
    return out


def cold_shares(db_path: Path) -> dict[str, Any]:
    """Per database: search trials, cold and failed ones, and their share of build + run time; and
    per task (``"tasks"``, by workload key): its trials, cold and failed ones."""
    from tensortune.database import Database
    from tensortune.select.cold import cold_mask

    totals: dict[str, Any] = {"trials": 0, "cold": 0, "failed": 0, "wall_s": 0.0, "cold_wall_s": 0.0, "cpu_s": 0.0,
                              "cold_cpu_s": 0.0, "tasks": {}}
    with Database(db_path, readonly=True) as db:
        for task in db.tasks():
            trials = sorted((t for t in db.trials(task.workload_key) if t.confirmation is None), key=lambda t: t.id)
            if not trials:
                continue
            cold = cold_mask([t.cost for t in trials])
            per = totals["tasks"][task.workload_key] = {"kernel_class": task.kernel_class, "trials": len(trials),
                                                        "cold": 0, "failed": 0}
            for t, c in zip(trials, cold):
                wall = t.build_time + t.run_time
                cpu = sum((t.extra.get("cpu_s") or {}).values())
                per["failed"] += not t.ok
                per["cold"] += bool(c) and t.ok
                totals["wall_s"] += wall
                totals["cpu_s"] += cpu
                if c:
                    totals["cold_wall_s"] += wall
                    totals["cold_cpu_s"] += cpu
    for k in ("trials", "cold", "failed"):  # the per-task counts summed
        totals[k] = sum(per[k] for per in totals["tasks"].values())
    totals["cold_share_wall"] = totals["cold_wall_s"] / totals["wall_s"] if totals["wall_s"] else None
    totals["cold_share_cpu"] = totals["cold_cpu_s"] / totals["cpu_s"] if totals["cpu_s"] else None
    return totals


def per_task_tables(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per model, each task's search trials, cold (ok) and failed ones under each
    tuner, and the candidates the cold filter dropped ("-" for a tuner without the filter), tasks
    in the first tuner's order."""
    lines: list[str] = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model and r.get("tasks")]
        if not mine:
            continue
        keys = list(dict.fromkeys(k for r in mine for k in r["tasks"]))
        head = "| task | " + " | ".join(f"{r['tuner']}: trials | cold | failed | filtered" for r in mine) + " |"
        lines += ["", f"Per task, {model} (search trials; cold: above the LOESS trend of the task's latencies):", "",
                  head, "|---|" + "---:|" * (4 * len(mine))]
        for key in keys:
            name = next(r["tasks"][key]["task"] for r in mine if key in r["tasks"])
            cells = []
            for r in mine:
                per = r["tasks"].get(key)
                cells += ([str(per["trials"]), str(per["cold"]), str(per["failed"]), fmt(per.get("filtered"), "d")]
                          if per else ["-"] * 4)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def tune(model: str, tuner: str, budget: float, out: Path) -> dict[str, Any]:
    """The tuning run (resumed; a finished one is read back from its JSON)."""
    db = out / f"{model}-{tuner}.db"
    return run_json(["tune", model, "--tuner", tuner, "--time-budget", str(budget), "--db", str(db)],
                    out / f"{model}-{tuner}.tune.json", fresh=[db])


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study trimmer", description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--tuners", default="autotvm,trimmer")
    p.add_argument("--time-budget", type=float, default=1800.0, help="tuning seconds per model and tuner")
    p.add_argument("--suite", metavar="RESULTS", default=None,
                   help="tune nothing: read each (model, tuner) from a whole-model suite folder (its databases, "
                        "kept tune outputs and interleaved latencies; --time-budget is the folder's)")
    p.add_argument("--race", metavar="RESULTS", default=None,
                   help="tune nothing: read each (model, tuner) from a finished race folder's run to completion "
                        "(its databases, costs and final benchmark; every tuner the race's rounds)")
    p.add_argument("--out", default="bench/results/trimmer")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if a.suite and a.race:
        p.error("--suite and --race are two sources of the systems: give one")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    machine = machine_info()
    budget = f"{a.time_budget:.0f} s of tuning per model and tuner"
    if a.suite:
        meta = json.loads((Path(a.suite) / "meta.json").read_text())
        machine = meta["machine"]  # where the suite measured
    elif a.race:
        machine = {"machine_id": json.loads((Path(a.race) / "meta.json").read_text())["machine"]}
    for model in a.models.split(","):
        for tuner in a.tuners.split(","):
            if a.suite:
                run, db, lat, a.time_budget = suite_system(Path(a.suite), model, tuner)
                budget = f"{a.time_budget:.0f} s of tuning per model and tuner"
            elif a.race:
                run, db, lat, budget = race_system(Path(a.race), model, tuner)
            else:
                run = tune(model, tuner, a.time_budget, out)
                db = out / f"{model}-{tuner}.db"
                lat = latency(model, db)
            shares = cold_shares(db)
            cost = run.get("cost", {})
            gain = (lat["untuned_ms"] - lat["tuned_ms"]) if lat["tuned_ms"] and lat["untuned_ms"] else None
            filtered = run["filtered"] if "filtered" in run else filtered_count(run)
            names = {t["workload_key"]: t["task"] for t in run.get("tasks", []) if "workload_key" in t}
            for key, n in filtered_per_task(run).items():
                if key in shares["tasks"]:
                    shares["tasks"][key]["filtered"] = n
            for key, per in shares["tasks"].items():
                per["task"] = names.get(key, f"{per['kernel_class']}[{key[:8]}]")
            row = {"model": model, "tuner": tuner, **lat, **shares, "filtered": filtered,
                   "tune_wall_s": cost.get("wall_s", run.get("wall_s")), "tune_cpu_s": cost.get("cpu_s"),
                   "gain_ms": gain,
                   "wall_s_per_ms": cost.get("wall_s", run.get("wall_s")) / gain if gain and gain > 0 else None,
                   "cpu_s_per_ms": cost["cpu_s"] / gain if gain and gain > 0 and cost.get("cpu_s") else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    (out / "trimmer.json").write_text(json.dumps({"machine": machine, "suite": a.suite, "race": a.race, "rows": rows},
                                                 indent=1))
    lines = ["# Trimmer's cold-candidate filter on whole models", "",
             f"{machine_line(machine)}; {budget}"
             + (f" (the systems of the suite folder {a.suite}, latencies from its interleaved benchmark)" if a.suite
                else f" (the race to completion in {a.race}, latencies from its final benchmark after the in-model "
                     "check)" if a.race else "") + ".", "",
             "| model | tuner | trials | failed | cold (ok) | cold + failed share of build+run time | filtered | "
             "untuned ms | tuned ms | tuning wall s | CPU-s | wall s per ms gained | CPU-s per ms gained |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['tuner']} | {r['trials']} | {r['failed']} | {r['cold']} | "
                     f"{fmt(r['cold_share_wall'], '.1%')} | {fmt(r['filtered'], 'd')} | {fmt(r['untuned_ms'], '.2f')} | "
                     f"{fmt(r['tuned_ms'], '.2f')} | {fmt(r['tune_wall_s'], '.0f')} | {fmt(r['tune_cpu_s'], '.0f')} | "
                     f"{fmt(r['wall_s_per_ms'])} | {fmt(r['cpu_s_per_ms'])} |")
    lines += per_task_tables(rows)
    write_text(out / "trimmer.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
