"""``python -m bench report RESULTS``: plots and a Markdown summary from a results folder.

Figures written beside the data: ``curves_time.png`` and ``curves_trials.png`` (best GFLOP/s so
far against tuning wall time and against trials, one panel per workload), ``ttq.png`` (time to
quality per workload and tuner), ``breakdown.png`` (where each tuner's wall time went),
``roofline.png`` (each best kernel against the machine's measured roofline) and ``models.png``
(whole-model latency against tuning wall time). ``report.md`` has the tables.

Provenance: each table and figure comes with a ``Measured on ...`` line naming the machine
(CPU model, LLVM cpu, cores) and the commit of the invocations that measured its numbers (from
the ``run`` index each stored result carries; see ``provenance.py``).

Time to quality: the quality target of a workload is ``quality`` (0.95) x the best GFLOP/s any
tuner's search measured on it; a tuner's time to quality is the wall time of the first batch
after which its own best reached that target (blank: never within the budget).
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..common import fmt as _fmt, gflops, save_figure, write_text
from .config import METASCHEDULE
from tensortune.measure.peak import roofline
from .provenance import commit_text, machine_of, measured_on
from .remeasure import rounds_line
from .store import RunDir

COLORS = {"random": "tab:gray", "genetic": "tab:olive", "autotvm": "tab:blue", METASCHEDULE: "tab:red",
          "grid": "tab:brown"}
SPLIT = (("search_s", "search/model"), ("build_s", "building"), ("run_s", "running"), ("other_s", "other"))


def _has_split(v: dict[str, Any]) -> bool:
    """Whether a model system's entry says where its tuning time went."""
    return bool(v.get("ok") and v.get("tune_wall_s") and "build_s" in v and "run_s" in v)


def _times(ratio: float | None) -> str:
    """A ratio as ``1.23x``; "-" where it is missing."""
    return "-" if ratio is None else f"{ratio:.2f}x"


def _split(v: dict[str, Any]) -> tuple[float, float]:
    """A system's tuning seconds as (measurement: building + running, search/model: the rest)."""
    measure = v["build_s"] + v["run_s"]
    return measure, v.get("search_s", max(0.0, v["tune_wall_s"] - measure - v.get("confirm_s", 0.0)))


def in_model_check(models: dict[str, Any]) -> list[str]:
    """Markdown: each system's in-model check (``tensortune check``): its time, the tasks it
    switched to another config, its own timing of the model before and after, and, where the
    model was benchmarked before the check too, both benchmarks' medians. Empty without any."""
    rows = []
    for m, entry in models.items():
        lat = {r["name"]: r["latency"]["median_ms"] for r in (entry.get("bench") or {}).get("rows", [])
               if r.get("latency")}
        before = {r["name"]: r["latency"]["median_ms"] for b in entry.get("benches_before_confirm", [])[:1]
                  for r in b.get("rows", []) if r.get("latency")}
        for name, v in entry.get("systems", {}).items():
            c = v.get("confirm")
            if not c:
                continue
            own = c.get("latency_ms", {})
            row = f"tensortune {name}"
            rows.append(f"| {m} | {name} | {_fmt(v.get('confirm_s'), '.0f')} | {c.get('changed')}/{c.get('tasks')} | "
                        f"{_fmt(own.get('untuned'), '.2f')} | {_fmt(own.get('tuned'), '.2f')} | "
                        f"{_fmt(own.get('confirmed'), '.2f')} | {c.get('kept')} | "
                        f"{_fmt(before.get(row), '.2f')} | {_fmt(lat.get(row), '.2f')} |")
    if not rows:
        return []
    return ["### In-model check", "",
            "Each tuned task's best, default and runner-up timed inside the model (`tensortune check`); its time "
            "is part of the system's tuning wall. `switched`: tasks whose model config is no longer their best "
            "measured alone. Then its own timing of the whole model (interleaved medians) untuned, tuned (best "
            "alone) and confirmed, which configs stand (`confirmed`, or a whole variant when the confirmed model "
            "was slower than it by more than 2%), and the suite's benchmark of the system before the check and "
            "after it (ms).", "",
            "| model | system | check (s) | switched | untuned | tuned | confirmed | kept | bench before | bench after |",
            "|---|---|---:|---:|---:|---:|---:|---|---:|---:|", *rows, ""]


def against_metaschedule(models: dict[str, Any]) -> list[str]:
    """Markdown: each tuned system against MetaSchedule on the same model (Fasor's Table 6 split
    and its latency / time ratios); empty where no model has a benchmarked MetaSchedule with a split."""
    rows = []
    for m, entry in models.items():
        systems, bench = entry.get("systems", {}), entry.get("bench") or {}
        lat = {r["name"]: r["latency"]["median_ms"] for r in bench.get("rows", []) if r.get("latency")}
        ms = systems.get(METASCHEDULE, {})
        if not _has_split(ms):
            continue
        ms_measure, ms_search = _split(ms)
        for name, v in systems.items():
            if name == METASCHEDULE or not _has_split(v):
                continue
            measure, search = _split(v)
            mine, theirs = lat.get(f"tensortune {name}"), lat.get(METASCHEDULE)
            rows.append(f"| {m} | {name} | {_fmt(measure / ms_measure - 1 if ms_measure else None, '+.1%')} | "
                        f"{_fmt(search / ms_search - 1 if ms_search else None, '+.1%')} | "
                        f"{_times(theirs / mine if mine and theirs else None)} | "
                        f"{_times(ms['tune_wall_s'] / v['tune_wall_s'])} |")
    if not rows:
        return []
    return ["### Against MetaSchedule on the same model", "",
            "Each system's measurement time (building + running) and search/model time as a change from "
            "MetaSchedule's on the same model, and its latency and tuning wall as MetaSchedule's over its own "
            "(above 1x: faster, or less time). Fasor's paper, on an i9-9900K against Ansor: measurement time "
            "-81.1% and search time -72.9% (its Table 6); 1.20x latency and 6.12x less time.", "",
            "| model | system | measurement time | search/model time | latency: MetaSchedule / system | "
            "tuning wall: MetaSchedule / system |", "|---|---|---:|---:|---:|---:|", *rows, ""]


def curves(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """workload -> tuner -> its batch rows in order."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[r["workload"]][r["tuner"]].append(r)
    for w in out.values():
        for rs in w.values():
            rs.sort(key=lambda r: r["batch"])
    return out


def settled(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Trials and seconds at the batch where the search's best last improved, and that best."""
    best, hit = math.inf, None
    for r in rows:
        if r["best_ms"] is not None and r["best_ms"] < best * (1 - 1e-9):
            best, hit = r["best_ms"], r
    return {"trials": hit["trials"] if hit else None, "seconds": hit["elapsed_s"] if hit else None,
            "best_ms": best if hit else None}


def first_reaching(rows: list[dict[str, Any]], target_ms: float) -> dict[str, float] | None:
    """Trials and seconds of the first batch whose best is at most ``target_ms``."""
    hit = next((r for r in rows if r["best_ms"] is not None and r["best_ms"] <= target_ms * (1 + 1e-9)), None)
    return None if hit is None else {"trials": hit["trials"], "seconds": hit["elapsed_s"]}


def time_to_quality(work: dict[str, list[dict[str, Any]]], quality: float) -> tuple[float | None, dict[str, Any]]:
    """(best ms any tuner's search found, tuner -> {seconds, trials} to reach ``quality`` of it)."""
    bests = [r["best_ms"] for rs in work.values() for r in rs if r["best_ms"]]
    if not bests:
        return None, {}
    best = min(bests)
    target = best / quality
    out = {}
    for tuner, rs in work.items():
        hit = next((r for r in rs if r["best_ms"] and r["best_ms"] <= target * (1 + 1e-12)), None)
        out[tuner] = {"seconds": hit["elapsed_s"] if hit else None, "trials": hit["trials"] if hit else None}
    return best, out


def _cell(text: str) -> str:
    """``text`` made safe for a Markdown table cell."""
    return text.replace("|", "\\|")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> Path:
    """Lay out (within ``rect``), write and close a figure."""
    fig.tight_layout(rect=rect)
    save_figure(fig, path, dpi=100)
    _plt().close(fig)
    return path


def _grid(n: int) -> tuple[int, int]:
    cols = min(4, max(1, n))
    return math.ceil(n / cols), cols


def _tasks_tuned(system: dict[str, Any]) -> str:
    """``measured / tasks`` of a whole-model system's summary, ``-`` where it has none."""
    if "tasks_measured" not in system or "tasks" not in system:
        return "-"
    return f"{system['tasks_measured']}/{system['tasks']}"


def plot_curves(cv: dict[str, dict[str, list[dict[str, Any]]]], out: Path, x_key: str, xlabel: str, name: str) -> Path:
    """One panel per workload: best GFLOP/s so far against ``x_key`` for each tuner."""
    plt = _plt()
    rows, cols = _grid(len(cv))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    for ax, (wl, work) in zip(axes.flat, cv.items()):
        for tuner, rs in work.items():
            xs = [r[x_key] for r in rs if r["best_ms"]]
            ys = [r["flops"] / (r["best_ms"] * 1e-3) / 1e9 for r in rs if r["best_ms"]]
            ax.plot(xs, ys, drawstyle="steps-post", marker=".", markersize=3, label=tuner, color=COLORS.get(tuner))
        ax.set_title(wl, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("best GFLOP/s", fontsize=8)
        if x_key == "elapsed_s":
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(cv):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    return _save(fig, out / name, rect=(0, 0.05, 1, 1))


def plot_ttq(ttq: dict[str, dict[str, Any]], tuners: list[str], out: Path, budgets: dict[str, float]) -> Path:
    """Grouped bars: seconds to quality per workload and tuner (an x where it was not reached)."""
    plt = _plt()
    wls = list(ttq)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(wls) * max(1, len(tuners)) / 2), 4))
    w = 0.8 / max(1, len(tuners))
    for k, t in enumerate(tuners):
        xs = [i + (k - (len(tuners) - 1) / 2) * w for i in range(len(wls))]
        ys = [ttq[wl].get(t, {}).get("seconds") for wl in wls]
        ax.bar([x for x, y in zip(xs, ys) if y], [y for y in ys if y], w, label=t, color=COLORS.get(t))
        miss = [(x, budgets.get(wl)) for x, y, wl in zip(xs, ys, wls) if not y and budgets.get(wl)]
        if miss:
            ax.scatter([m[0] for m in miss], [m[1] for m in miss], marker="x", color=COLORS.get(t))
    ax.set_xticks(range(len(wls)), wls)
    ax.set_yscale("log")
    ax.set_ylabel("seconds to 95% of the best (x: not reached)")
    ax.legend(frameon=False, fontsize=8)
    return _save(fig, out / "ttq.png")


def plot_breakdown(split: dict[str, dict[str, float]], out: Path) -> Path:
    """Stacked bars: each tuner's wall time over all workloads by activity."""
    plt = _plt()
    tuners = list(split)
    fig, ax = plt.subplots(figsize=(1.6 * len(tuners) + 2, 3.6))
    bottom = [0.0] * len(tuners)
    for key, label in SPLIT:
        vals = [split[t].get(key, 0.0) / 60 for t in tuners]
        ax.bar(tuners, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("minutes (all workloads)")
    ax.legend(frameon=False, fontsize=8)
    return _save(fig, out / "breakdown.png")


def plot_roofline(points: list[tuple[str, str, float, float]], peak: dict[str, Any], out: Path) -> Path:
    """Log-log roofline with each (workload, tuner, intensity, GFLOP/s) point."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = [p[2] for p in points] or [1.0]
    ridge = peak["peak_gflops"] / peak["bandwidth_gbs"]
    lo, hi = min(min(xs), ridge) / 4, max(max(xs), ridge) * 2
    grid = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    ax.plot(grid, [min(peak["peak_gflops"], x * peak["bandwidth_gbs"]) for x in grid], color="black",
            label=f"roofline: {peak['peak_gflops']:.0f} GFLOP/s, {peak['bandwidth_gbs']:.0f} GB/s")
    for tuner in dict.fromkeys(p[1] for p in points):
        sel = [p for p in points if p[1] == tuner]
        ax.scatter([p[2] for p in sel], [p[3] for p in sel], label=tuner, color=COLORS.get(tuner), s=18)
    for wl in dict.fromkeys(p[0] for p in points):
        best = max((p for p in points if p[0] == wl), key=lambda p: p[3])
        ax.annotate(wl, (best[2], best[3]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of the buffers)")
    ax.set_ylabel("GFLOP/s (re-measured best)")
    ax.legend(frameon=False, fontsize=7)
    return _save(fig, out / "roofline.png")


def plot_models(models: dict[str, Any], out: Path) -> Path:
    """Per model: latency of each system against its tuning wall time (frameworks at 0 s)."""
    plt = _plt()
    names = [m for m in models if "bench" in models[m]]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(5.2 * max(1, len(names)), 3.8), squeeze=False)
    for ax, m in zip(axes.flat, names):
        entry = models[m]
        for r in entry["bench"]["rows"]:
            if not r["latency"]:
                continue
            sys_name = r["name"].replace("tensortune ", "")
            wall = entry["systems"].get(sys_name, {}).get("tune_wall_s", 0.0) / 60
            ax.scatter([wall], [r["latency"]["median_ms"]], color=COLORS.get(sys_name), s=30)
            ax.annotate(r["name"], (wall, r["latency"]["median_ms"]), fontsize=7, xytext=(4, 2),
                        textcoords="offset points")
        ax.set_title(m)
        ax.set_xlabel("tuning wall time (min)")
        ax.set_ylabel("latency (ms, median)")
        ax.set_ylim(bottom=0)
    return _save(fig, out / "models.png")


def _latest(runs: list[dict[str, Any]], suite: str) -> dict[str, Any]:
    """Settings of the last run that included ``suite`` ({} if none did)."""
    return next((r.get("settings", {}) for r in reversed(runs) if suite in r.get("settings", {}).get("suites", [])),
                {})


def write_report(path: Path) -> Path:
    """Write the plots and ``report.md`` of the results folder ``path``; returns the report's path."""
    run = RunDir(path)
    if not path.is_dir():
        raise SystemExit(f"{path}: no such results folder")
    meta = run.read_json("meta", {}) or {}
    runs = run.runs()
    settings = _latest(runs, "ops") or meta.get("settings", {})
    quality = float(settings.get("quality", 0.95))
    peak = run.read_json("peak")
    summary = run.ops_summary()
    cv = curves(run.ops_rows())
    models = run.read_json("models", {}) or {}
    mach = meta.get("machine", {})
    md = ["# tensortune benchmark report", ""]
    md += [f"Libraries (recorded by the last invocation, {mach.get('date', '?')}): "
           f"Python {mach.get('python', '?')}, TVM {mach.get('tvm', '?')}, PyTorch {mach.get('torch', '?')}, "
           f"XGBoost {mach.get('xgboost', '?')}, ONNX Runtime {mach.get('onnxruntime', '?')}; "
           f"{meta.get('threads', '?')} threads for every kernel and framework; seed {settings.get('seed', '?')}. "
           "The machine and commit of each table and figure are given beside it.", ""]
    md += ["Runs that wrote this folder (a stopped run resumes where it left off):", ""]
    for i, r in enumerate(runs):
        st = r.get("settings", {})
        md.append(f"- {i + 1}. {r.get('date') or '?'} ("
                  + (machine_of(r, meta) or "machine not recorded")
                  + f", {commit_text(r)}): {', '.join(st.get('suites', []))}; "
                  + (f"tuners {', '.join(st.get('tuners', []))}, {st.get('budget')} trials; " if "ops" in
                     st.get("suites", []) else "")
                  + (f"models {', '.join(st.get('models', []))} with {', '.join(st.get('model_tuners', []))} for "
                     f"{st.get('model_budget_s', 0) / 60:.0f} min each; " if "models" in st.get("suites", []) else "")
                  + f"MetaSchedule {st.get('ms_batch', '?')} candidates per round; "
                  + (f"{r['wall_s'] / 60:.0f} min" if r.get("wall_s") is not None
                     else "time not recorded (stopped before runs recorded it)"))
    md.append("")
    energy = meta.get("energy", {})
    md.append("Energy: " + ("RAPL domains " + ", ".join(energy.get("domains", [])) if energy.get("available")
                            else f"not available here ({energy.get('reason', 'not probed')})."))
    md.append("")
    peak_on = measured_on(runs, meta, [peak.get("run")], "peak") if peak else ""
    ops_on = measured_on(runs, meta, [s.get("run") for s in summary.values()], "ops") if summary else ""
    models_on = measured_on(runs, meta, [x.get("run") for e in models.values() if "bench" in e
                                         for x in (e, *e.get("systems", {}).values())], "models")
    captions: dict[str, str] = {}
    if peak:
        md += [f"Ceiling: peak **{peak['peak_gflops']:.1f} GFLOP/s** float32 (TVM-built register-resident FMA kernel), "
               f"memory bandwidth **{peak['bandwidth_gbs']:.1f} GB/s** (parallel copy of {peak['copy_mib']} MiB), "
               f"{peak['threads']} threads.", "", peak_on, ""]
    figures = []
    if summary:
        tuners = list(dict.fromkeys(t for s in summary.values() for t in s["tuners"]))
        has_lib = any(s.get("library") for s in summary.values())
        start = ("tensortune's tuners measured their template's default config first"
                 if settings.get("start_from_default", True) else
                 "tensortune's tuners started without their template's default config (`--no-default-start`)")
        extra = ["blocked (NCHWc) form of the convolutions" if settings.get("blocked") else "",
                 f"early stopping after {settings['early_stopping']} trials without improvement"
                 if settings.get("early_stopping") else ""]
        md += [f"## Operators ({settings.get('budget', '?')} trials per tuner and workload)", "",
               "Final latency: each tuner's best kernel built again, output checked against the reference, timed in "
               f"{settings.get('rounds', '?')} interleaved rounds (median). GFLOP/s and fraction of the roofline "
               "from that median; the order of the tuners rotates from one workload to the next. The time to "
               "quality and wall-time tables below come from the same workloads' runs. "
               f"Start: {start}" + "".join(f"; {e}" for e in extra if e) + "."
               + (" `library`: the same computation in numpy (GEMMs) or PyTorch (convolutions), timed in the same "
                  "rounds; `best / library` is the best tuner's GFLOP/s over the library's." if has_lib else ""),
               "", ops_on, "",
               "| workload | " + " | ".join(f"{t} GFLOP/s" for t in tuners)
               + (" | library GFLOP/s | best / library" if has_lib else "") + " | best / roofline |",
               "|---|" + "---:|" * (len(tuners) + 1 + 2 * has_lib)]
        points = []
        lib_ratios: list[float] = []
        for wl, s in summary.items():
            cells, best_gf = [], 0.0
            for t in tuners:
                v = s["tuners"].get(t)
                ms = v.get("median_ms") if v else None
                gf = gflops(s["flops"], ms)
                cells.append(_fmt(gf) if gf else (f"({v['check'][:40]})" if v else "-"))
                if gf:
                    best_gf = max(best_gf, gf)
                    if peak:
                        points.append((wl, t, s["flops"] / s["bytes"], gf))
            frac = roofline(best_gf, s["flops"] / s["bytes"], peak)["fraction"] if peak and best_gf else None
            if has_lib:
                lib = s.get("library")
                lib_gf = gflops(s["flops"], lib["median_ms"]) if lib else None
                if lib_gf and best_gf:
                    lib_ratios.append(best_gf / lib_gf)
                cells += [f"{_fmt(lib_gf)} ({lib['name']})" if lib_gf else "-",
                          _fmt(best_gf / lib_gf if lib_gf and best_gf else None, ".2f")]
            md.append(f"| {wl} | " + " | ".join(cells) + f" | {_fmt(frac * 100 if frac else None, '.0f')}% |")
        if lib_ratios:
            md += ["", f"Ceiling of the search spaces: median best / library **{statistics.median(lib_ratios):.2f}** "
                       f"over {len(lib_ratios)} workloads."]
        if any(s.get("remeasure") for s in summary.values()):  # the rounds' state check (remeasure.py)
            md += ["", "Re-measurement per workload (medians over the stable rounds; `bench/suite/remeasure.py`):", ""]
            md += [f"- {wl}: {rounds_line(s)}" for wl, s in summary.items()]
        md.append("")
        ttq, budgets = {}, {}
        for wl, work in cv.items():
            best, per = time_to_quality(work, quality)
            ttq[wl] = per
            budgets[wl] = max(rs[-1]["elapsed_s"] for rs in work.values())
        md += [f"### Time to quality ({quality:.0%} of the best GFLOP/s any tuner's search found)", "",
               "Seconds of tuning wall time (from a cold start) until the tuner's best reached the target; "
               "`MS / x` is MetaSchedule's time over this tuner's (> 1: this tuner is faster). "
               "A tuner that never got there has no time; the ratio then uses that tuner's full wall time as a "
               "bound: `>` when MetaSchedule never got there, `<` when only MetaSchedule did.", "",
               "| workload | " + " | ".join(tuners) + " | " +
               " | ".join(f"MS / {t}" for t in tuners if t != METASCHEDULE) + " |",
               "|---|" + "---:|" * (len(tuners) * 2 - (METASCHEDULE in tuners))]
        ratios: dict[str, list[float]] = defaultdict(list)
        for wl, per in ttq.items():
            cells = [_fmt(per.get(t, {}).get("seconds")) for t in tuners]
            ms_t = per.get(METASCHEDULE, {}).get("seconds")
            ms_wall = summary.get(wl, {}).get("tuners", {}).get(METASCHEDULE, {}).get("wall_s")
            for t in tuners:
                if t == METASCHEDULE:
                    continue
                mine = per.get(t, {}).get("seconds")
                my_wall = summary.get(wl, {}).get("tuners", {}).get(t, {}).get("wall_s")
                if METASCHEDULE not in tuners:
                    cells.append("-")
                elif not mine:
                    cells.append(f"<{ms_t / my_wall:.1f}x" if ms_t and my_wall else "-")
                elif ms_t:
                    ratios[t].append(ms_t / mine)
                    cells.append(f"{ms_t / mine:.1f}x")
                elif ms_wall:
                    cells.append(f">{ms_wall / mine:.1f}x")
                else:
                    cells.append("-")
            md.append(f"| {wl} | " + " | ".join(cells) + " |")
        if ratios:
            md += ["", "Median ratio MetaSchedule / tuner where both reached the target: " + ", ".join(
                f"{t} {statistics.median(v):.1f}x ({len(v)} workload{'s' if len(v) != 1 else ''})" for t, v in ratios.items()) + "."]
        split: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        trials: dict[str, int] = defaultdict(int)
        for s in summary.values():
            for t, v in s["tuners"].items():
                for key, _ in SPLIT:
                    split[t][key] += v["split"].get(key, 0.0)
                trials[t] += v["trials"]
        md += ["", "### Where the wall time went (all workloads)", "",
               "| tuner | trials | wall (min) | " + " | ".join(lbl for _, lbl in SPLIT) + " | s per trial |",
               "|---|---:|---:|" + "---:|" * (len(SPLIT) + 1)]
        for t, sp in split.items():
            wall = sum(sp.values())
            md.append(f"| {t} | {trials[t]} | {wall / 60:.1f} | " + " | ".join(
                f"{sp[k] / wall:.0%}" if wall else "-" for k, _ in SPLIT) + f" | {wall / max(1, trials[t]):.2f} |")
        md.append("")
        figures += [plot_curves(cv, path, "elapsed_s", "tuning wall time (s)", "curves_time.png"),
                    plot_curves(cv, path, "trials", "trials", "curves_trials.png"),
                    plot_ttq(ttq, tuners, path, budgets), plot_breakdown(split, path)]
        captions.update({f.name: ops_on for f in figures})
        if peak and points:
            figures.append(plot_roofline(points, peak, path))
            captions["roofline.png"] = f"Roofline: {peak_on} Kernels: {ops_on}"
    if any("bench" in m for m in models.values()):
        md += ["## Whole models", "",
               "Each system tuned for the same wall time, then all outputs checked against the reference on the same "
               "inputs and all timed in interleaved rounds at the same thread count (medians).", "",
               models_on, "",
               "`tasks tuned`: the model's tasks the system measured at least one candidate for (the others run "
               "their template's default schedule, or TVM's unscheduled one for MetaSchedule).", "",
               "| model | system | tuning wall (min) | trials | tasks tuned | latency (ms) | p25-p75 | vs PyTorch | outputs |",
               "|---|---|---:|---:|---:|---:|---|---:|---|"]
        for m, entry in models.items():
            if "bench" not in entry:
                continue
            b = entry["bench"]
            torch_ms = next((r["latency"]["median_ms"] for r in b["rows"] if r["name"] == "pytorch" and r["latency"]),
                            None)
            for r in b["rows"]:
                sysinfo = entry["systems"].get(r["name"].replace("tensortune ", ""), {})
                lat = r["latency"]
                md.append(f"| {m} | {r['name']} | {_fmt(sysinfo.get('tune_wall_s', 0) / 60 if sysinfo else None)} | "
                          f"{sysinfo.get('trials', '-') if sysinfo else '-'} | {_tasks_tuned(sysinfo)} | "
                          f"{_fmt(lat['median_ms'] if lat else None, '.2f')} | "
                          f"{_fmt(lat['p25_ms'] if lat else None, '.2f')}-{_fmt(lat['p75_ms'] if lat else None, '.2f')} | "
                          f"{_fmt(torch_ms / lat['median_ms'] if lat and torch_ms else None, '.2f')}x | "
                          f"{'match' if r['outputs_match'] else 'FAILED'}: {_cell(r['check'])} |")
        md.append("")
        for m, entry in models.items():
            ms = entry["systems"].get(METASCHEDULE, {})
            if ms.get("candidates_per_round"):
                md += [f"{m}: MetaSchedule measured {ms['candidates_per_round']} candidates per search round "
                       f"({ms.get('batches', '?')} rounds over its tasks, {ms.get('errors', 0)} failed candidates); "
                       "its gradient task scheduler gives every task one round before the time budget can cut it "
                       "short." + (f" {len(ms['tasks_without_valid'])} of its {ms.get('tasks_measured')} measured tasks "
                                   "had no candidate that built and ran; `compile_relax` leaves those unscheduled."
                                   if ms.get("tasks_without_valid") else "")
                       + (f" Its compiled model found a tuned schedule for {ms['tasks_applied']} of its {ms['tasks']} "
                          "tasks; `compile_relax` builds the others unscheduled." if "tasks_applied" in ms else ""),
                       ""]
        timed = [(m, name, v) for m, entry in models.items() for name, v in entry["systems"].items()
                 if _has_split(v)]
        if timed:
            md += ["### Where each system's tuning time went", "",
                   "Building and running: wall time in the measurer (MetaSchedule: in its builder and runner); "
                   "search/model: the rest (search, cost-model updates, bookkeeping); in-model check: "
                   "`tensortune check` after tuning.", "",
                   "| model | system | tuning wall (min) | search/model | building | running | in-model check |",
                   "|---|---|---:|---:|---:|---:|---:|"]
            for m, name, v in timed:
                wall, search = v["tune_wall_s"], _split(v)[1]
                md.append(f"| {m} | {name} | {wall / 60:.1f} | "
                          + " | ".join(f"{x / wall:.0%}" for x in (search, v["build_s"], v["run_s"]))
                          + f" | {_fmt(v['confirm_s'] / wall if v.get('confirm_s') else None, '.0%')} |")
            md.append("")
            md += against_metaschedule(models)
        md += in_model_check(models)
        figures.append(plot_models(models, path))
        captions["models.png"] = models_on
    if figures:
        md += ["## Figures", ""]
        for f in figures:
            md += [f"![{f.stem}]({f.name})", "", f"{f.name}: {captions[f.name]}", ""]
    return write_text(path / "report.md", "\n".join(md))
