"""Survey tuning against sequential tuning: ``python -m bench run --study survey``.

    python -m bench run --study survey [--models resnet18,mobilenet_v2] [--tuner autotvm] [--time-budget 3600]
                           [--out bench/results/survey]

For each model: ``tensortune tune MODEL --scheduler sequential --time-budget B`` (the full-budget
reference, its database ``OUT/MODEL-sequential.db``), the model timed with its bests; then
``--scheduler survey --speedup-goal S`` with the same tuner and at most the same budget
(``OUT/MODEL-survey.db``), S being the sequential model's speed-up over untuned (timed together)
less 2%: survey tuning stops when its model, timed beside the untuned one, is that much faster (or
when its rounds stop paying). Then both models and the untuned one are timed in one
interleaved benchmark, and the survey reached the target where its model is within 2% of the
sequential one there (the goal the run used was timed minutes before, in another benchmark).
Reported: each run's wall time, CPU-seconds and final latency, and survey's rounds. A finished
run is not repeated (its ``tune --json`` is kept); an interrupted one starts again from an empty
database. With ``--suite RESULTS`` the sequential run is the suite folder's system of the same
tuner (same machine kind; its budget).
Writes ``OUT/survey.json`` and ``OUT/survey.md``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import fmt, machine_info, machine_line, write_text
from .modelruns import latency, paired_latency, run_json as run, suite_system

#: The survey's target: within 2% of the sequential result (issue 19).
WITHIN = 1.02


def goal_cell(row: dict) -> str:
    """The goal a survey run was given: a speed-up over untuned, or (older runs) a latency."""
    if row.get("goal_speedup"):
        return f"{row['goal_speedup']:.3f}x untuned"
    return f"{fmt(row.get('goal_ms'), '.2f')} ms"


def ratios(row: dict) -> str:
    """``wall ratio | CPU ratio`` cells (sequential over survey); "-" where the goal was not reached."""
    if not row["reached"]:
        return "- | -"
    cpu = row["sequential_cpu_s"] / row["survey_cpu_s"] if row["sequential_cpu_s"] and row["survey_cpu_s"] else None
    return f"{row['sequential_wall_s'] / row['survey_wall_s']:.2f}x | {fmt(cpu, '.2f')}x"


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study survey", description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--tuner", default="autotvm")
    p.add_argument("--time-budget", type=float, default=3600.0)
    p.add_argument("--suite", metavar="RESULTS", default=None,
                   help="take the sequential reference from a whole-model suite folder (its TUNER system: "
                        "database and kept tune output; --time-budget is the folder's) instead of tuning it")
    p.add_argument("--out", default="bench/results/survey")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in a.models.split(","):
        if a.suite:
            seq, seq_db, _, a.time_budget = suite_system(Path(a.suite), model, a.tuner)
        else:
            seq_db = out / f"{model}-sequential.db"
            seq = run(["tune", model, "--tuner", a.tuner, "--scheduler", "sequential", "--time-budget",
                       str(a.time_budget), "--db", str(seq_db)], out / f"{model}-sequential.tune.json", fresh=[seq_db])
        sur_db, sur_keep = out / f"{model}-survey.db", out / f"{model}-survey.tune.json"
        goal_args = []  # a finished run is read back (with the goal it ran with) and needs none
        if not sur_keep.exists():  # the goal: the sequential model's speed-up over untuned (one benchmark), less 2%
            seq_lat = latency(model, seq_db)
            goal_args = ["--speedup-goal", f"{max(1.0, seq_lat['untuned_ms'] / seq_lat['tuned_ms'] / WITHIN):.6f}"]
        sur = run(["tune", model, "--tuner", a.tuner, "--scheduler", "survey", "--time-budget", str(a.time_budget),
                   *goal_args, "--db", str(sur_db)], sur_keep, fresh=[sur_db])
        final = paired_latency(model, {"sequential": seq_db, "survey": sur_db})  # one benchmark: paired
        rep = sur.get("survey", {})
        goal = {"goal_ms": rep.get("goal_ms"), "goal_speedup": rep.get("speedup_goal")}
        ratio = final["survey"] / final["sequential"] if final["survey"] and final["sequential"] else None
        row = {"model": model, "tuner": a.tuner, "untuned_ms": final["untuned"],
               "sequential_ms": final["sequential"], "sequential_wall_s": seq["cost"]["wall_s"],
               "sequential_cpu_s": seq["cost"].get("cpu_s"), **goal, "survey_ms": final["survey"],
               "survey_wall_s": sur["cost"]["wall_s"], "survey_cpu_s": sur["cost"]["cpu_s"],
               "survey_stop": rep.get("stop"), "survey_rounds": [r["latency_ms"] for r in rep.get("rounds", [])],
               "survey_changes": [r.get("roi") for r in rep.get("rounds", [])[1:]],
               "survey_over_sequential": ratio, "reached": ratio is not None and ratio <= WITHIN}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "survey.json").write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=1))
    text = render(rows, a.tuner, a.time_budget)
    write_text(out / "survey.md", text)
    print(text, end="")
    return 0


def render(rows: list[dict], tuner: str, time_budget: float) -> str:
    """``survey.md``: one row per model, then each survey's rounds."""
    lines = ["# Survey tuning against sequential tuning", "",
             f"{machine_line()}; tuner {tuner}; sequential for {time_budget:.0f} s, "
             "survey until within 2% of its result (same budget at most).", "",
             "| model | untuned ms | sequential ms | wall s | CPU-s | goal | survey ms | wall s | CPU-s | stopped | "
             "survey / sequential | reached | wall ratio | CPU ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {fmt(r['untuned_ms'], '.2f')} | {fmt(r['sequential_ms'], '.2f')} | "
                     f"{r['sequential_wall_s']:.0f} | {fmt(r['sequential_cpu_s'], '.0f')} | {goal_cell(r)} | "
                     f"{fmt(r['survey_ms'], '.2f')} | {r['survey_wall_s']:.0f} | {fmt(r['survey_cpu_s'], '.0f')} | "
                     f"{r['survey_stop']} | {fmt(r.get('survey_over_sequential'), '.3f')} | "
                     f"{'yes' if r['reached'] else 'no'} | {ratios(r)} |")
    lines += ["", "The three latencies come from one interleaved benchmark after both runs; the survey reached "
              "the target where its model is within 2% of the sequential one there. The goal is the one the "
              "survey run was given, timed before it: a speed-up over untuned (the survey times the two side "
              "by side) or, before 2026-11-27's second run, a latency. Wall and CPU ratios are sequential over survey, shown "
              "only where the target was reached: a survey that stopped short saved nothing comparable.", "", "Survey rounds (model latency in the tuning process; the change is "
              "each round's model timed beside the round before's):", ""]
    for r in rows:
        changes = [None, *r.get("survey_changes", [])]  # none before 2026-11-27's paired timing
        changes += [None] * (len(r["survey_rounds"]) - len(changes))
        steps = [f"{ms:.2f} ms" + (f" ({c:+.1%})" if c is not None else "")
                 for ms, c in zip(r["survey_rounds"], changes)]
        lines.append(f"- {r['model']}: " + " → ".join(steps))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
