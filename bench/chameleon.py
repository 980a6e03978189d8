"""Chameleon's evidence from an operator-suite run: ``python -m bench run --study chameleon RESULTS``.

The run itself is the suite's (one run, every tuner on every workload, the order rotated):

    python -m bench run --suite ops --workloads resnet18_conv2d --blocked --budget 1000 \\
        --tuners autotvm:objective=reg,metaschedule,chameleon,chameleon:variant=sa-adaptive,\\
chameleon:variant=ppo-greedy,chameleon:variant=sa-greedy,chameleon:variant=sa-diversity --out RESULTS

(``autotvm:objective=reg`` is the paper's Table 8 baseline: plan 64, XGBoost regression, 128 SA
chains of at most 500 steps.) This script reads ``RESULTS/ops_batches.csv`` and
``ops_summary.json`` and writes ``RESULTS/chameleon.md``, ``chameleon.json`` and
``chameleon.png``:

* per workload and tuner: hardware measurements and wall time until the best stopped improving
  (the batch of the last improvement of the search's best), the final GFLOP/s (the suite's
  re-measured, checked median), the explorer's search steps (per search: the steps a chain or
  episode walked, averaged over walkers; and in all), the adaptive batches' k, and the share of
  the wall time spent on the tuner's own search (explorer, k-means, model fits) against
  building and running;
* the paper's comparisons, as geometric means over the workloads where both sides have data:
  search steps per search, SA over PPO (Fig. 7a: 2.88x); measurements for the same final
  latency, diversity-aware or greedy sampling over adaptive sampling (Fig. 7b: 1.98x with SA,
  2.33x with RL), each side counted to the first batch reaching the worse of the two finals;
  and the wall time ``chameleon`` needs to reach the baseline's final latency against the
  baseline's own time to it (target: 3x less; the paper: 4.45x), from the search curves and,
  since a curve's best is one timing exposed to the host's state at its moment, from the
  re-measured kernels too: the whole wall times over the workloads where chameleon's kernel is
  within 2% of the baseline's, compared round by round;
* each tuner's re-measured kernel over its search's best timing (the best of many noisy timings
  lies below the kernel's typical one, the more so the more it measured).

With ``--suite MODELS`` (a whole-model suite folder holding ``autotvm`` and ``chameleon`` systems of a
model, e.g. ``--models resnet18 --model-tuners chameleon`` added to a folder that has ``autotvm``)
the report gains a whole-model section: per system, its trials, tuning wall time and CPU-seconds,
where the time went (search, building, running), the explorer's steps per search, the model's
latency from the folder's last interleaved benchmark (outputs checked), the baseline's latency
and tuning wall time over chameleon's, and from the databases each run's estimated model latency
(the tasks' weighted search bests) and the tasks where chameleon's search best is within 2% of
the baseline's. (A time to reach the baseline's latency, as for the operators, has no curve
here: the model's schedulers tune the tasks in turn, so an estimate over all tasks exists only
near a run's end.) A longer interleaved benchmark kept beside the folder as
``paired-MODEL-*.json`` (``bench.modelruns.paired_latency`` with more rounds) is reported under
the model's table.

The whole run is about 45 min a workload. Sessions land on different kinds of machine, so it
can be spread over several folders, one per kind (``chameleon-ops-znver4-DATE``, ...), each
holding whole workloads that no other folder holds (``--workloads C3,C4``): ``python -m
bench.chameleon F1 F2 ... --out DIR`` then reports them together. Every workload's tuners still
come from one folder, on one kind of machine, and its section names that machine and the
invocations; the comparisons are ratios taken within a workload before they are averaged over
workloads, so no latency of one machine is ever set against another's.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from .common import fmt as _f, geomean, gflops, machine_line, save_figure, write_text
from .suite.provenance import ops_measured_on
from .suite.remeasure import paired_ratio, rounds_line, states
from .suite.report import curves, first_reaching, settled
from .suite.store import RunDir

BASELINE = "autotvm:objective=reg"
#: chameleon "reaches" the baseline's final latency when its re-measured kernel is at most this
#: much slower, paired round by round
FINAL_WITHIN = 0.02
CHAMELEON = "chameleon"
#: (label, the side that should need more, the side that should need less)
STEP_PAIRS = (("SA / PPO, adaptive sampling", "chameleon:variant=sa-adaptive", CHAMELEON),
              ("SA / PPO, greedy sampling", "chameleon:variant=sa-greedy", "chameleon:variant=ppo-greedy"))
MEASURE_PAIRS = (("SA: diversity / adaptive", "chameleon:variant=sa-diversity", "chameleon:variant=sa-adaptive"),
                 ("SA: greedy / adaptive", "chameleon:variant=sa-greedy", "chameleon:variant=sa-adaptive"),
                 ("PPO: greedy / adaptive", "chameleon:variant=ppo-greedy", CHAMELEON))


#: the tensortune system a whole model's chameleon is compared with (the models suite's autotvm:
#: XGBoost with its default objective, 128 SA chains, plans of 64)
MODEL_BASELINE = "autotvm"


#: a task counts as matched when chameleon's search best is at most this much slower than the baseline's
TASK_WITHIN = 0.02


def search_bests(db_path: Path, keys: set[str]) -> dict[str, float]:
    """Each task's best search timing in ms (of ``keys``' tasks with a successful trial).
    Confirmations and the in-model check's timings are left out: they re-time configs the search
    already found."""
    from tensortune.database import Database

    best: dict[str, float] = {}
    with Database(db_path, readonly=True) as db:
        for t in db.trials(ok_only=True):
            if t.workload_key in keys and t.confirmation is None and t.tuner != "in-model":
                best[t.workload_key] = min(best.get(t.workload_key, float("inf")), 1e3 * t.cost)
    return best


def model_systems(folder: Path, model: str, tuners: tuple[str, ...]) -> dict[str, Any]:
    """Per tuner of ``model`` in the whole-model suite folder: its cost, where its time went, its
    explorer's steps, its benchmarked and estimated latency; then the baseline over chameleon.
    Raises SystemExit (from ``suite_system``) where a system is missing or was not benchmarked."""
    from .modelruns import suite_system

    meta = json.loads((folder / "meta.json").read_text())
    entry = json.loads((folder / "models.json").read_text())[model]
    runs = meta.get("runs", [])
    rows: dict[str, Any] = {}
    weights: dict[str, dict[str, int]] = {}
    for tuner in tuners:
        run, db, lat, budget = suite_system(folder, model, tuner)
        tasks = run.get("tasks", [])
        weights[tuner] = {t["workload_key"]: int(t.get("weight", 1)) for t in tasks if t.get("trials")}
        cost = run.get("cost", {})
        wall = cost.get("wall_s") or run.get("wall_s")
        stats = [(t.get("search") or {}).get("explorer_stats") or {} for t in tasks]
        calls = sum(s.get("calls", 0) for s in stats)
        system = entry["systems"][tuner]
        rows[tuner] = {"trials": sum(t.get("trials", 0) for t in tasks), "tasks": len(tasks),
                       "wall_s": wall, "cpu_s": cost.get("cpu_s"), "budget_s": budget,
                       **{f"{part}_share": (cost.get(f"{part}_s") or 0.0) / wall if wall else None
                          for part in ("search", "build", "run")},
                       "steps_per_search": sum(s.get("steps", 0) for s in stats) / calls if calls else None,
                       "stops": sorted({t.get("stop_reason", "") for t in tasks} - {""}),
                       "tuned_ms": lat["tuned_ms"], "untuned_ms": lat["untuned_ms"], "db": db,
                       "tuned_on": (runs[system["run"]].get("date") if isinstance(system.get("run"), int)
                                    and system["run"] < len(runs) else None)}
    base, cham = rows.get(MODEL_BASELINE), rows.get(CHAMELEON)
    if base and cham:
        both = {k: w for k, w in weights[MODEL_BASELINE].items() if k in weights[CHAMELEON]}
        bests = {t: search_bests(rows[t]["db"], set(both)) for t in (MODEL_BASELINE, CHAMELEON)}
        common = [k for k in both if k in bests[MODEL_BASELINE] and k in bests[CHAMELEON]]
        for t in (MODEL_BASELINE, CHAMELEON):
            rows[t]["estimate_ms"] = sum(both[k] * bests[t][k] for k in common) if common else None
        cham["baseline_over"] = base["tuned_ms"] / cham["tuned_ms"] if base["tuned_ms"] and cham["tuned_ms"] else None
        cham["baseline_wall_over"] = base["wall_s"] / cham["wall_s"] if base["wall_s"] and cham["wall_s"] else None
        cham["estimated_tasks"] = len(common)
        cham["tasks_within"] = sum(bests[CHAMELEON][k] <= (1 + TASK_WITHIN) * bests[MODEL_BASELINE][k] for k in common)
    paired = sorted(folder.glob(f"paired-{model}-*.json"))  # a longer interleaved benchmark of the model, if any
    extra = json.loads(paired[-1].read_text()) if paired else None
    if extra:
        for tuner, r in rows.items():
            r["paired_ms"] = extra["medians_ms"].get(tuner)
        if base and cham and base.get("paired_ms") and cham.get("paired_ms"):
            cham["baseline_over_paired"] = base["paired_ms"] / cham["paired_ms"]
    for r in rows.values():
        r["db"] = str(r["db"])
    return {"folder": str(folder), "machine": machine_line(meta.get("machine")),
            "paired": {"file": paired[-1].name, "rounds": extra.get("rounds"),
                       "untuned_ms": extra["medians_ms"].get("untuned")} if extra else None,
            "bench_rounds": next((r["latency"].get("samples") for r in entry["bench"]["rows"] if r.get("latency")), None),
            "systems": rows}


def model_lines(models: dict[str, Any]) -> list[str]:
    """The whole-model section of the report."""
    lines = ["## Whole models", "",
             f"Each model's systems from one whole-model suite folder, on one machine. Latency: the median of the "
             f"folder's last interleaved benchmark of the model (every system's outputs checked against PyTorch's). "
             f"{MODEL_BASELINE} here is the models suite's (XGBoost with its default objective, 128 SA chains, "
             f"plans of 64). Estimated ms: the sum over the tasks both tuned of weight x the task's best search "
             f"timing (each task timed alone); tasks within {TASK_WITHIN:.0%}: those where chameleon's search best "
             f"is at most {TASK_WITHIN:.0%} slower than {MODEL_BASELINE}'s. A search's best is the least of its "
             f"noisy timings, so the tuner that measured more is favoured there; the benchmark is the comparison.",
             ""]
    for model, m in models.items():
        lines += [f"### {model}", "", f"From `{m['folder']}`, {m['machine']}; the benchmark's rounds: "
                  f"{m['bench_rounds'] or '-'}.", "",
                  "| tuner | tuned on | trials | tasks | stopped by | tuning wall s | CPU-s | search / build / run share | "
                  f"steps per search | estimated ms | tasks within {TASK_WITHIN:.0%} of the baseline | untuned ms | "
                  "tuned ms | "
                  "baseline / tuner latency | baseline / tuner wall time |",
                  "|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for tuner, r in m["systems"].items():
            within = f"{r['tasks_within']} of {r['estimated_tasks']}" if "tasks_within" in r else "-"
            lines.append(
                f"| {tuner} | {r.get('tuned_on') or '-'} | {r['trials']} | {r['tasks']} | {', '.join(r['stops']) or '-'} | "
                f"{_f(r['wall_s'], '.0f')} | {_f(r['cpu_s'], '.0f')} | {_f(r['search_share'], '.0%')} / "
                f"{_f(r['build_share'], '.0%')} / {_f(r['run_share'], '.0%')} | {_f(r['steps_per_search'])} | "
                f"{_f(r.get('estimate_ms'), '.2f')} | {within} | "
                f"{_f(r['untuned_ms'], '.2f')} | {_f(r['tuned_ms'], '.2f')} | {_f(r.get('baseline_over'), '.3f')} | "
                f"{_f(r.get('baseline_wall_over'), '.2f')} |")
        lines.append("")
        if m.get("paired"):
            lines += [f"A longer interleaved benchmark of the same databases (`{m['paired']['file']}`, "
                      f"{m['paired']['rounds']} rounds, outputs checked): untuned "
                      f"{_f(m['paired']['untuned_ms'], '.2f')} ms; "
                      + "; ".join(f"{t} {_f(r.get('paired_ms'), '.2f')} ms" for t, r in m["systems"].items())
                      + f"; baseline / chameleon {_f(m['systems'].get(CHAMELEON, {}).get('baseline_over_paired'), '.3f')}.",
                      ""]
    return lines


def per_search_steps(summary: dict[str, Any]) -> float | None:
    stats = (summary.get("search") or {}).get("explorer_stats") or {}
    return stats["steps"] / stats["calls"] if stats.get("calls") else None


def workload_table(name: str, summary: dict[str, Any], work: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per tuner: settled trials/seconds, final GFLOP/s, the baseline's final latency over the
    tuner's (paired rounds, and per state of the host when the rounds fell in two), search
    steps, k, search share."""
    out = {}
    two = 1 in states(summary)
    for tuner, s in summary["tuners"].items():
        paired = paired_ratio(summary, BASELINE, tuner)
        rows = work.get(tuner, [])
        st = settled(rows)
        search = s.get("search") or {}
        stats = search.get("explorer_stats") or {}
        wall = s.get("wall_s") or 0.0
        split = s.get("split") or {}
        own = sum((search.get("timings") or {}).values())
        out[tuner] = {"settled_trials": st["trials"], "settled_s": st["seconds"], "search_best_ms": st["best_ms"],
                      "final_ms": s.get("median_ms"),
                      "final_over_search": s["median_ms"] / st["best_ms"] if s.get("median_ms") and st["best_ms"]
                      else None,
                      "final_gflops": gflops(summary["flops"], s.get("median_ms")),
                      "trials": s.get("trials"), "wall_s": wall,
                      "steps_per_search": per_search_steps(s), "steps": stats.get("steps"),
                      "scored": stats.get("scored"), "searches": stats.get("calls"),
                      "k": search.get("k"), "plan_sizes": search.get("plan_sizes"),
                      "tuner_s": own or None, "search_share": (own / wall) if own and wall else
                      ((split.get("search_s") or 0.0) / wall if wall else None),
                      "build_share": (split.get("build_s") or 0.0) / wall if wall else None,
                      "run_share": (split.get("run_s") or 0.0) / wall if wall else None,
                      "stop": search.get("stop_reason"), "check": s.get("check"),
                      "baseline_over": paired["ratio"] if paired else None,
                      "baseline_over_by_state": [(p or {}).get("ratio") for p in
                                                 (paired_ratio(summary, BASELINE, tuner, k) for k in (0, 1))]
                      if two else None}
    return out


def compare(tables: dict[str, dict[str, Any]], cv: dict[str, Any]) -> dict[str, Any]:
    """The paper's three comparisons (module docstring), per workload and as geometric means."""
    out: dict[str, Any] = {"steps": {}, "measurements": {}, "wall": {}}
    for label, more, less in STEP_PAIRS:
        per = {w: t[more]["steps_per_search"] / t[less]["steps_per_search"] for w, t in tables.items()
               if more in t and less in t and t[more]["steps_per_search"] and t[less]["steps_per_search"]}
        out["steps"][label] = {"per_workload": per, "geomean": geomean(list(per.values()))}
    for label, more, less in MEASURE_PAIRS:
        per = {}
        for w, t in tables.items():
            if more not in t or less not in t or not t[more]["search_best_ms"] or not t[less]["search_best_ms"]:
                continue
            target = max(t[more]["search_best_ms"], t[less]["search_best_ms"])
            a, b = first_reaching(cv[w][more], target), first_reaching(cv[w][less], target)
            if a and b:
                per[w] = {"ratio": a["trials"] / b["trials"], more: a["trials"], less: b["trials"], "target_ms": target}
        out["measurements"][label] = {"per_workload": per, "geomean": geomean([v["ratio"] for v in per.values()])}
    per = {}
    for w, t in tables.items():
        if BASELINE not in t or CHAMELEON not in t or not t[BASELINE]["search_best_ms"]:
            continue
        target = t[BASELINE]["search_best_ms"]
        base = first_reaching(cv[w][BASELINE], target)
        cham = first_reaching(cv[w][CHAMELEON], target)
        per[w] = {"baseline_s": base["seconds"] if base else None, "chameleon_s": cham["seconds"] if cham else None,
                  "speedup": base["seconds"] / cham["seconds"] if base and cham else None,
                  "final_ratio": t[CHAMELEON].get("baseline_over"),
                  "wall_ratio": t[BASELINE]["wall_s"] / t[CHAMELEON]["wall_s"] if t[CHAMELEON]["wall_s"] else None}
    out["wall"] = {"per_workload": per, "reached": sum(1 for v in per.values() if v["speedup"]),
                   "geomean_speedup": geomean([v["speedup"] for v in per.values() if v["speedup"]]),
                   "geomean_final_ratio": geomean([v["final_ratio"] for v in per.values() if v["final_ratio"]]),
                   "geomean_wall_ratio": geomean([v["wall_ratio"] for v in per.values() if v["wall_ratio"]])}
    # the same question from the re-measured kernels: the search curves' bests are single timings,
    # each exposed to the host's state at its moment; the final kernels are compared round by round
    matched = {w: v["wall_ratio"] for w, v in per.items()
               if v["final_ratio"] and v["wall_ratio"] and v["final_ratio"] >= 1 - FINAL_WITHIN}
    out["wall"].update(final_within=FINAL_WITHIN, matched=len(matched),
                       geomean_wall_ratio_matched=geomean(list(matched.values())))
    return out


def markdown(tables: dict[str, dict[str, Any]], cmp: dict[str, Any], provenance: str,
             where: dict[str, str] | None = None, rounds: dict[str, str] | None = None) -> str:
    """The report; ``where`` (workload -> its folder and machine, for a report over several
    folders) adds a line under each workload's heading, ``rounds`` (workload -> its
    re-measurement in words) another."""
    lines = ["# Chameleon: variants, steps, measurements and wall time", "", provenance, "",
             f"Final GFLOP/s: the medians of the re-measurement's stable rounds (`bench/suite/remeasure.py`). "
             f"Baseline / tuner latency: the median over those rounds of {BASELINE}'s latency over the tuner's in "
             f"the same round (> 1: the tuner's kernel is faster); where the host was in two states, the ratio "
             f"at the lower / higher copy bandwidth follows in brackets.", ""]
    for w, t in tables.items():
        lines += [f"## {w}", ""] + ([where[w], ""] if where and w in where else [])
        lines += [rounds.get(w, ""), ""] if rounds and rounds.get(w) else []
        lines += ["| tuner | final GFLOP/s | baseline / tuner latency | re-measured / search best | trials | "
                  "settled at (trials / s) | wall s | steps per search | searches | k per plan | own search share | "
                  "build / run share |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        for tuner, r in t.items():
            k = r["k"] or []
            by = r.get("baseline_over_by_state")
            over = _f(r.get("baseline_over"), ".3f") + (
                f" ({_f(by[0], '.3f')} / {_f(by[1], '.3f')})" if by else "")
            lines.append(f"| {tuner} | {_f(r['final_gflops'])} | {over} | {_f(r.get('final_over_search'), '.3f')} | "
                         f"{_f(r['trials'], 'd')} | "
                         f"{_f(r['settled_trials'], 'd')} / {_f(r['settled_s'])} | {_f(r['wall_s'])} | "
                         f"{_f(r['steps_per_search'])} | {_f(r['searches'], 'd')} | "
                         f"{(str(min(k)) + '-' + str(max(k))) if k else '-'} | {_f(r['search_share'], '.0%')} | "
                         f"{_f(r['build_share'], '.0%')} / {_f(r['run_share'], '.0%')} |")
        lines.append("")
    lines += ["## The paper's comparisons (geometric means over the workloads)", "",
              "| comparison | ratio | workloads | paper |", "|---|---:|---:|---:|"]
    paper = {"SA / PPO, adaptive sampling": "2.88x", "SA / PPO, greedy sampling": "2.88x",
             "SA: diversity / adaptive": "1.98x", "SA: greedy / adaptive": "1.98x", "PPO: greedy / adaptive": "2.33x"}
    for label, v in cmp["steps"].items():
        lines.append(f"| search steps per search, {label} | {_f(v['geomean'], '.2f')}x | {len(v['per_workload'])} | "
                     f"{paper[label]} |")
    for label, v in cmp["measurements"].items():
        lines.append(f"| measurements to the same final latency, {label} | {_f(v['geomean'], '.2f')}x | "
                     f"{len(v['per_workload'])} | {paper[label]} |")
    wv = cmp["wall"]
    lines += [f"| wall time to {BASELINE}'s final latency, baseline / chameleon | {_f(wv['geomean_speedup'], '.2f')}x | "
              f"{wv['reached']} of {len(wv['per_workload'])} reached | 4.45x |",
              f"| final latency, baseline / chameleon | {_f(wv['geomean_final_ratio'], '.3f')}x | "
              f"{len(wv['per_workload'])} | up to 1.064x |",
              f"| whole tuning wall time, baseline / chameleon | {_f(wv['geomean_wall_ratio'], '.2f')}x | "
              f"{len(wv['per_workload'])} | - |",
              f"| whole tuning wall time, baseline / chameleon, where chameleon's re-measured kernel is within "
              f"{wv.get('final_within', FINAL_WITHIN):.0%} of the baseline's | "
              f"{_f(wv.get('geomean_wall_ratio_matched'), '.2f')}x | {wv.get('matched', 0)} of "
              f"{len(wv['per_workload'])} | 4.45x |", ""]
    lines += selection_lines(tables)
    return "\n".join(lines)


def selection_lines(tables: dict[str, dict[str, Any]]) -> list[str]:
    """Each tuner's kernel re-measured over its search's best timing of it, as a geometric mean over
    the workloads: a search's best is the least of all its timings, so the more it measured, the
    further its best lies below what the kernel takes (the winner's curse), and a time to reach
    another tuner's search best is biased towards the tuner that measured more."""
    tuners = list(dict.fromkeys(t for tab in tables.values() for t in tab))
    rows = []
    for tuner in tuners:
        vals = [tab[tuner]["final_over_search"] for tab in tables.values()
                if tuner in tab and tab[tuner].get("final_over_search")]
        trials = [tab[tuner]["trials"] for tab in tables.values() if tuner in tab and tab[tuner].get("trials")]
        if vals:
            rows.append(f"| {tuner} | {_f(geomean(vals), '.3f')} | {_f(min(vals), '.3f')}-{_f(max(vals), '.3f')} | "
                        f"{len(vals)} | {min(trials) if trials else '-'}-{max(trials) if trials else '-'} |")
    if not rows:
        return []
    return ["## A search's best against its kernel re-measured", "",
            "Re-measured latency over the search curve's best, per tuner (> 1: the search's best timing was "
            "lower than the kernel's re-measured median). The best of many noisy timings lies below the "
            "kernel's typical one, the more so the more timings there were, and the host's state at that "
            "moment adds to it; so the wall time to the baseline's final latency above, read from the curves, "
            "favours the tuner that measured more, and the re-measured, paired finals are the comparison.", "",
            "| tuner | geomean | range | workloads | trials |", "|---|---:|---|---:|---|", *rows, ""]


def plot(tables: dict[str, dict[str, Any]], out: Path) -> Path | None:
    """Settled measurements and final GFLOP/s per tuner, one group per workload."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    tuners = sorted({t for tab in tables.values() for t in tab})
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / max(len(tuners), 1)
    for j, tuner in enumerate(tuners):
        xs = [i + j * width for i in range(len(tables))]
        axes[0].bar(xs, [tab.get(tuner, {}).get("settled_trials") or 0 for tab in tables.values()], width, label=tuner)
        axes[1].bar(xs, [tab.get(tuner, {}).get("final_gflops") or 0 for tab in tables.values()], width, label=tuner)
    for ax, title in zip(axes, ("measurements until the best stopped improving", "final GFLOP/s (re-measured)")):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tables))], list(tables), rotation=45, ha="right")
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    return save_figure(fig, out)


def load(folders: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, str], list[tuple[Any, Any]]]:
    """``(tables, curves, where, runs)`` of every workload in ``folders``: ``where`` gives each
    workload's folder and machine in a line, ``runs`` each folder's ``(RunDir, summary)``.
    Raises ``ValueError`` for a folder without operator-suite results or a workload in two folders."""
    tables: dict[str, Any] = {}
    cv: dict[str, Any] = {}
    where: dict[str, str] = {}
    folder_of: dict[str, str] = {}
    runs = []
    for folder in folders:
        run = RunDir(folder)
        summary = run.ops_summary()
        if not summary:
            raise ValueError(f"{folder}: no operator-suite results")
        c = curves(run.ops_rows())
        for w, s in summary.items():
            if w in folder_of:
                raise ValueError(f"workload {w} is in {folder_of[w]} and in {folder}: report each workload from one folder")
            folder_of[w] = folder
            tables[w] = workload_table(w, s, c.get(w, {}))
            cv[w] = c.get(w, {})
            where[w] = f"From `{folder}`. {ops_measured_on(run, [s])}"
        runs.append((run, summary))
    order = sorted(tables, key=_natural)  # C1, C2, ..., C12 whichever folder each came from
    return ({w: tables[w] for w in order}, {w: cv[w] for w in order}, {w: where[w] for w in order}, runs)


def _natural(name: str) -> list[Any]:
    """Sort key that orders a workload's digits by value: ``C2`` before ``C10``."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name)]


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study chameleon", description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+",
                   help="an operator-suite results folder, or several (one per kind of machine, each workload in one)")
    p.add_argument("--out", help="where chameleon.md/.json/.png go (default: the results folder; needed with several)")
    p.add_argument("--suite", metavar="MODELS", action="append", default=[],
                   help=f"a whole-model suite folder with {MODEL_BASELINE} and {CHAMELEON} systems (repeatable: one "
                        "per kind of machine): adds the whole-model section")
    p.add_argument("--models", help="these models only (default: each model of a --suite folder that has both systems)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if len(a.results) > 1 and not a.out:
        p.error("several results folders need --out DIR")
    try:
        tables, cv, where, runs = load(a.results)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    models: dict[str, Any] = {}
    for folder in map(Path, a.suite):
        if not (folder / "models.json").exists():
            print(f"{folder}: no models.json (not a whole-model suite folder)", file=sys.stderr)
            return 1
        entries = json.loads((folder / "models.json").read_text())
        both = [m for m, e in entries.items()
                if "bench" in e and all((e.get("systems", {}).get(t) or {}).get("ok") for t in (MODEL_BASELINE, CHAMELEON))]
        for model in (m for m in both if not a.models or m in a.models.split(",")):
            if model in models:
                print(f"model {model} is in {models[model]['folder']} and in {folder}: give it from one folder",
                      file=sys.stderr)
                return 1
            models[model] = model_systems(folder, model, (MODEL_BASELINE, CHAMELEON))
    if a.models and (missing := [m for m in a.models.split(",") if m not in models]):
        print(f"no --suite folder has benchmarked {MODEL_BASELINE} and {CHAMELEON} systems of {', '.join(missing)}",
              file=sys.stderr)
        return 1
    cmp = compare(tables, cv)
    if len(runs) == 1:
        run, summary = runs[0]
        provenance, where = ops_measured_on(run, summary.values()), {}
    else:
        provenance = (f"Workloads from {len(runs)} folders. Each workload was measured in one folder, on one kind of "
                      f"machine, named under its heading with its invocations; every comparison is a ratio within a "
                      f"workload, averaged over the workloads only then.")
    out = Path(a.out) if a.out else runs[0][0].path
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(tables, cmp, provenance, where, {w: rounds_line(s) for _, summary in runs for w, s in summary.items()})
    if models:
        md += "\n" + "\n".join(model_lines(models))
    write_text(out / "chameleon.md", md)
    (out / "chameleon.json").write_text(json.dumps({"workloads": tables, "comparisons": cmp, "models": models,
                                                    "folders": a.results, "suites": a.suite,
                                                    "measured_on": where or None}, indent=1))
    plot(tables, out / "chameleon.png")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
