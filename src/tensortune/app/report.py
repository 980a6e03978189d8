"""What a tuning database says about a user's run: per task the tuning curve (best over trials
and over wall time), errors by kind, where the time went (building, running, the rest), and,
for a model, its estimated latency over the run and the choices ``compile`` makes.

The figures are read from the database alone (each task's trials of the measurement context it
has most trials in); only the compile choices build the model. :mod:`.report_html` draws it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database, TaskRecord
    from ..models.compile import FuncChoice

#: Characters of an error message kept as the example of its kind.
EXAMPLE_CHARS = 160


@dataclass(frozen=True)
class TrialPoint:
    """One search trial of a task: its number (1-based, confirmations not counted), seconds since
    the task's first trial, its cost in seconds (None: it failed) and its error kind."""

    n: int
    t_s: float
    cost_s: float | None
    error: str


@dataclass
class TaskReport:
    """One task of the database, as measured in one context."""

    workload_key: str
    name: str
    kernel_class: str
    flops: float
    context: str  # where and how its trials were timed, in words
    machine: str  # the CPU model of that context
    points: list[TrialPoint]
    confirmations: int
    best_ms: float | None  # the database's best (a confirmed median where there is one)
    best_confirmed: bool
    errors: dict[str, int]
    error_examples: dict[str, str]
    build_s: float  # summed over trials (builds run in parallel)
    run_s: float
    span_s: float  # wall time from its first trial to its last
    tuners: list[str]
    weight: int | None = None  # calls per inference, for a model's task
    first_ts: float = 0.0

    @property
    def trials(self) -> int:
        return len(self.points)

    @property
    def best_gflops(self) -> float | None:
        return self.flops / (self.best_ms / 1e3) / 1e9 if self.best_ms else None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "points"}
        out["trials"] = self.trials
        return out


@dataclass
class RunReport:
    """The report of one database (and one model, when given)."""

    database: str
    tasks: list[TaskReport]
    machines: list[str]
    model: str | None = None
    # the model's estimate over the run: (seconds since the first trial, ms, tasks with a measurement)
    timeline: list[tuple[float, float, int]] = field(default_factory=list)
    model_tasks: int = 0  # tunable tasks of the model
    choices: list[FuncChoice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def errors(self) -> Counter[str]:
        """Error kinds over every task."""
        total: Counter[str] = Counter()
        for t in self.tasks:
            total.update(t.errors)
        return total

    def to_json(self) -> dict[str, Any]:
        return {"database": self.database, "model": self.model, "machines": self.machines,
                "tasks": [t.to_json() for t in self.tasks], "timeline": self.timeline,
                "model_tasks": self.model_tasks, "choices": [c.to_json() for c in self.choices],
                "errors": dict(self.errors()), "notes": self.notes}


def task_report(db: Database, task: TaskRecord) -> TaskReport | None:
    """The report of one task, in the context it has most trials in (None when it has no trial
    outside in-model checks, which only rank a model's candidates)."""
    from ..database.trials import task_name

    stored = [t for t in db.trials(task.workload_key) if not t.context.in_model]
    if not stored:
        return None
    context = Counter(t.context for t in stored).most_common(1)[0][0]
    trials = [t for t in stored if t.context == context]
    search = [t for t in trials if t.confirmation is None]
    first = min(t.timestamp for t in trials)
    points = [TrialPoint(k + 1, t.timestamp - first, t.cost if t.ok and t.verified else None,
                         t.error if not t.ok else ("none" if t.verified else "unverified"))
              for k, t in enumerate(search)]
    errors: Counter[str] = Counter(t.error for t in trials if t.error != "none")
    examples: dict[str, str] = {}
    for t in trials:
        if t.error != "none" and t.error not in examples:
            examples[t.error] = " ".join(t.error_msg.split())[:EXAMPLE_CHARS]
    best = db.best(task.workload_key, context)
    return TaskReport(
        workload_key=task.workload_key, name=task_name(task), kernel_class=task.kernel_class, flops=task.flops,
        context=context.describe(), machine=context.cpu_model or "CPU not recorded", points=points, confirmations=len(trials) - len(search),
        best_ms=best.cost * 1e3 if best is not None else None,
        best_confirmed=best is not None and best.confirmation is not None, errors=dict(errors),
        error_examples=examples, build_s=sum(t.build_time for t in trials), run_s=sum(t.run_time for t in trials),
        span_s=max(t.timestamp for t in trials) - first,
        tuners=sorted({t.tuner for t in trials if t.tuner}), first_ts=first)


def estimate_timeline(tasks: list[TaskReport]) -> list[tuple[float, float, int]]:
    """The model's estimated latency (sum of weight x best so far) after each successful trial,
    over the tasks measured by then: (seconds since the run's first trial, ms, tasks counted); the
    last point sums the tasks' stored bests, the confirmed medians a run ends with (which the
    fastest single trials before it underestimate)."""
    weighted = [t for t in tasks if t.weight]
    if not weighted:
        return []
    start = min(t.first_ts for t in weighted)
    events = sorted((t.first_ts + p.t_s, t.workload_key, p.cost_s, t.weight or 0)
                    for t in weighted for p in t.points if p.cost_s is not None)
    best: dict[str, float] = {}  # weight x best cost so far, by task
    total = 0.0
    out: list[tuple[float, float, int]] = []
    for ts, key, cost, weight in events:
        if key in best and best[key] <= cost * weight:
            continue
        total += cost * weight - best.get(key, 0.0)
        best[key] = cost * weight
        out.append((ts - start, total * 1e3, len(best)))
    settled = [t for t in weighted if t.best_ms is not None]
    if out and settled:  # the end: each task's stored best (a confirmed median), as tune reports it
        end = max(t.first_ts + t.span_s for t in weighted) - start
        out.append((max(end, out[-1][0]), sum(t.best_ms * (t.weight or 0) for t in settled), len(settled)))
    return out


def write_report(database: str, model: Any = None, output: str = "report.html", compile_choices: bool = True
                 ) -> RunReport:
    """Read the tuning database file ``database`` (and ``model``, a loaded model, for its tasks'
    weights and compile choices) and write the HTML page ``output`` with its PNGs beside it."""
    from pathlib import Path

    from ..database import Database
    from .report_html import write_html

    with Database(database, readonly=True) as db:
        rep = build_report(db, database, model, compile_choices)
    write_html(rep, Path(output))
    return rep


def build_report(db: Database, path: str, model: Any = None, compile_choices: bool = True) -> RunReport:
    """The report of database ``db`` (its file ``path``); with ``model`` (a loaded model), only its
    tasks, weighted, with its estimated latency over time and, with ``compile_choices``, what
    compile chooses for each of its functions (the model is compiled for that)."""
    records = {t.workload_key: t for t in db.tasks()}
    notes: list[str] = []
    weights: dict[str, int] = {}
    n_model = 0
    choices: list[FuncChoice] = []
    if model is not None:
        from ..models.compile import compile_model, model_tasks

        mts = model_tasks(model)
        tunable = [mt for mt in mts if mt.tunable]
        n_model = len(tunable)
        for mt in tunable:
            weights[mt.task.workload_key] = weights.get(mt.task.workload_key, 0) + mt.weight
        missing = [k for k in weights if k not in records]
        if missing:
            notes.append(f"{len(missing)} of the model's {len(weights)} tasks have no trial in the database")
        if compile_choices:
            choices = compile_model(model, db).choices
    reports = []
    for key, rec in records.items():
        if weights and key not in weights:
            continue
        rep = task_report(db, rec)
        if rep is None:
            continue
        rep.weight = weights.get(key)
        reports.append(rep)
    reports.sort(key=lambda r: -(r.weight or 1) * (r.best_ms or 0.0))
    machines = sorted({r.machine for r in reports})
    timeline = estimate_timeline(reports) if model is not None else []
    if model is not None and timeline and timeline[-1][2] < len(weights):
        notes.append(f"the estimate counts the {timeline[-1][2]} of {len(weights)} tasks with a measurement")
    return RunReport(path, reports, machines, getattr(model, "name", None) if model is not None else None,
                     timeline, n_model, choices, notes)
