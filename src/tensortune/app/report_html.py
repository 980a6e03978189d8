"""One HTML page (with PNGs beside it) from a :class:`~.report.RunReport`: the model's estimated
latency over the run, what compile chose, where the time went, errors by kind, and per task its
tuning curve over trials and over wall time (Optuna's optimization-history plot is the model).

Needs matplotlib (the ``report`` extra); the page itself is plain HTML with no scripts.
"""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from .report import RunReport, TaskReport

#: Tasks drawn one by one at most (the heaviest first); the rest are listed in the tables.
MAX_TASK_PLOTS = 80
DPI = 90
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1em; margin-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; font-size: 0.9em; } img { max-width: 100%; }
"""


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return f"{path.parent.name}/{path.name}"


def _gflops(task: TaskReport, cost_s: float) -> float:
    return task.flops / cost_s / 1e9


def plot_task(task: TaskReport, path: Path) -> str:
    """The tuning curve of one task: every trial's GFLOPS and the best so far, over trials and over
    wall time; failed trials as red marks on the axis."""
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    ok = [(p.n, _gflops(task, p.cost_s)) for p in task.points if p.cost_s is not None]
    bad = [p.n for p in task.points if p.cost_s is None]
    best, bests = 0.0, []
    for p in task.points:
        if p.cost_s is not None:
            best = max(best, _gflops(task, p.cost_s))
        bests.append(best)
    ax1.scatter([n for n, _ in ok], [g for _, g in ok], s=9, alpha=0.5, label="trial")
    ax1.step([p.n for p in task.points], bests, where="post", color="C1", label="best so far")
    if bad:
        ax1.scatter(bad, [0.0] * len(bad), marker="x", color="red", s=14, label="failed")
    if task.best_gflops:
        ax1.axhline(task.best_gflops, color="C2", ls="--", lw=1,
                    label="best (confirmed median)" if task.best_confirmed else "best")
    ax1.set_xlabel("trial")
    ax1.set_ylabel("GFLOPS")
    ax1.legend(fontsize=7, loc="lower right")
    ax2.step([p.t_s for p in task.points], bests, where="post", color="C1")
    ax2.set_xlabel("seconds since the task's first trial")
    ax2.set_ylabel("best GFLOPS")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(task.name[:110], fontsize=9)
    return _save(fig, path)


def plot_timeline(report: RunReport, path: Path) -> str:
    """The model's estimated latency over the run (dashed while some tasks had no measurement), and
    where it ends once the best configs were re-measured (the confirmed medians)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    weighted = sum(1 for x in report.tasks if x.weight)
    full = [(t, ms) for t, ms, n in report.timeline if n >= weighted]
    ax.step([t for t, _, _ in report.timeline], [ms for _, ms, _ in report.timeline], where="post", ls="--",
            color="C0", alpha=0.6, label="tasks measured so far")
    if full:
        ax.step([t for t, _ in full], [ms for _, ms in full], where="post", color="C0", label="every tuned task")
    end_t, end_ms, _ = report.timeline[-1]
    ax.plot([end_t], [end_ms], "o", color="C3", label=f"after confirmation: {end_ms:.2f} ms")
    ax.set_xlabel("seconds since the first trial")
    ax.set_ylabel("estimated latency (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_time(report: RunReport, path: Path) -> str:
    """Where each task's time went: timing runs, builds (summed over parallel workers), the rest."""
    plt = _plt()
    tasks = report.tasks[:40]
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.28 * len(tasks)))
    names = [t.name if len(t.name) <= 44 else t.name[:43] + "…" for t in tasks]
    run = [t.run_s for t in tasks]
    build = [t.build_s for t in tasks]
    rest = [max(0.0, t.span_s - t.run_s - t.build_s) for t in tasks]
    ax.barh(names, run, label="running (timing)")
    ax.barh(names, build, left=run, label="building (worker-seconds)")
    ax.barh(names, rest, left=[a + b for a, b in zip(run, build)], label="search and the rest of the wall time")
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def _e(x: object) -> str:
    return html.escape(str(x))


def _ms(x: float | None) -> str:
    return f"{x:.4f}" if x is not None and math.isfinite(x) else "-"


def _table(head: list[str], rows: list[list[str]], numeric: frozenset[int] | set[int] = frozenset()) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td class='num'>{c}</td>" if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def write_html(report: RunReport, out: Path) -> Path:
    """Write ``out`` (an .html file) and its PNGs into ``<out stem>_files/``; returns ``out``."""
    files = out.with_name(out.stem + "_files")
    files.mkdir(parents=True, exist_ok=True)
    trials = sum(t.trials for t in report.tasks)
    parts = [(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>tensortune report: {_e(report.database)}"
              f"</title><style>{STYLE}</style></head><body>"),
             f"<h1>Tuning report: {_e(report.model or report.database)}</h1>",
             _table(["database", "machines", "tasks", "search trials", "confirmations", "errors"],
                    [[_e(report.database), _e(", ".join(report.machines)), str(len(report.tasks)), str(trials),
                      str(sum(t.confirmations for t in report.tasks)), str(sum(report.errors().values()))]])]
    parts += [f"<p class='note'>{_e(n)}</p>" for n in report.notes]
    if report.model:
        parts.append("<h2>The model's estimated latency</h2><p class='note'>Sum over the tuned tasks of calls per "
                     "inference x the best latency so far (as timed during tuning, not in the model).</p>")
        if report.timeline:
            parts.append(f"<img alt='estimated latency over time' src='{plot_timeline(report, files / 'timeline.png')}'>")
        else:
            parts.append("<p>No successful trial of the model's tasks yet.</p>")
        if report.choices:
            rows = [[_e(c.task[:70]), str(c.weight), _e(c.source), _e(c.reason), _ms(c.best_ms)] for c in report.choices]
            parts += ["<h2>What compile chose</h2><p class='note'>The latency is the record compile chose by: "
                      "a config confirmed inside the model carries the in-model check's figure.</p>",
                      _table(["task", "weight", "schedule", "why", "latency (ms)"], rows, {1, 4})]
    parts += ["<h2>Where the time went</h2>",
              f"<img alt='time per task' src='{plot_time(report, files / 'time.png')}'>"]
    errors = report.errors()
    if errors:
        examples: dict[str, str] = {}
        for t in report.tasks:
            for kind, msg in t.error_examples.items():
                examples.setdefault(kind, msg)
        parts += ["<h2>Errors by kind</h2>",
                  _table(["kind", "trials", "example"], [[_e(k), str(n), _e(examples.get(k, ""))]
                                                         for k, n in errors.most_common()], {1})]
    rows = [[_e(t.name[:70]), _e(t.kernel_class), "" if t.weight is None else str(t.weight), str(t.trials),
             _ms(t.best_ms), f"{t.best_gflops:.1f}" if t.best_gflops else "-",
             "confirmed median" if t.best_confirmed else ("fastest trial" if t.best_ms else "-"),
             _e(", ".join(f"{k} {n}" for k, n in t.errors.items()) or "none"), _e(", ".join(t.tuners))]
            for t in report.tasks]
    parts += ["<h2>Tasks</h2>", _table(["task", "kind", "weight", "trials", "best (ms)", "GFLOPS", "best is",
                                        "errors", "tuners"], rows, {2, 3, 4, 5})]
    for k, t in enumerate(report.tasks[:MAX_TASK_PLOTS]):
        parts.append(f"<h3>{_e(t.name)}</h3><p class='note'>{_e(t.context)}; {t.trials} trials, "
                     f"{t.confirmations} confirmation re-measurements</p>")
        if t.points:
            parts.append(f"<img alt='tuning curve' src='{plot_task(t, files / f'task-{k:03d}.png')}'>")
    if len(report.tasks) > MAX_TASK_PLOTS:
        parts.append(f"<p class='note'>{len(report.tasks) - MAX_TASK_PLOTS} lighter tasks are in the table only.</p>")
    parts.append("</body></html>")
    out.write_text("\n".join(parts), encoding="utf-8")
    return out
