"""Operator tuning curves: every tuner on every workload with the same trial budget.

For each workload, the tuners run one after the other (the order rotated from one workload
to the next, so no tuner always runs first or last), each from a cold start: a fresh
tensortune measurer (worker processes included) or a fresh MetaSchedule ``tune_tir``. After
every batch a row records trials, wall time, best latency so far and the batch's split into
search/model, building and running. Then every tuner's best kernel is built again and timed
in ``rounds`` interleaved rounds by tensortune's runner, with its output checked against the
reference: the final figures are those medians, so drift of the machine cannot favour the
tuner that ran at a quiet moment, and a MetaSchedule kernel (which MetaSchedule never checks)
counts only if it computes the right answer. That re-measurement runs in a fresh process, each
round checked for a change of the host's state (``remeasure.py``), and the best kernels are kept
in the summary, so that ``python -m bench remeasure`` can time them again.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tensortune.budget import Budget
from tensortune.measure import MeasureOptions, Measurer
from tensortune.task import Task
from tensortune.utils.progress import ProgressBar

from . import metaschedule as msa
from .config import METASCHEDULE
from .deadline import Deadline
from .remeasure import (LIBRARY, ROUNDS, final_line, kernel_from_json, kernel_to_json,  # noqa: F401 - interface
                        remeasure, remeasure_isolated)
from .store import RunDir



@dataclass
class Curve:
    """Per-batch rows of one tuner on one workload, and its best kernel."""

    tuner: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    best_s: float = float("inf")
    best: Any = None  # a Config (tensortune) or a scheduled IRModule (MetaSchedule)
    errors: int = 0
    note: str = ""
    search: dict[str, Any] = field(default_factory=dict)  # the tuner's search_report() ({}: none)

    def add(self, trials: int, elapsed: float, batch_best: float | None, ok: int, errors: int,
            build_s: float, run_s: float, last: dict[str, float]) -> None:
        """Append one batch; ``last`` holds the running totals at the previous batch."""
        if batch_best is not None and batch_best < self.best_s:
            self.best_s = batch_best
        self.errors += errors
        wall = elapsed - last["elapsed"]
        d_build, d_run = build_s - last["build"], run_s - last["run"]
        self.rows.append({"tuner": self.tuner, "batch": len(self.rows) + 1, "trials": trials, "elapsed_s": elapsed,
                          "best_ms": self.best_s * 1e3 if self.best_s < float("inf") else None,
                          "batch_ok": ok, "batch_errors": errors, "search_s": max(0.0, wall - d_build - d_run),
                          "build_s": d_build, "run_s": d_run})
        last.update(elapsed=elapsed, build=build_s, run=run_s)

    @property
    def trials(self) -> int:
        """Trials measured so far (the last row's running count)."""
        return self.rows[-1]["trials"] if self.rows else 0

    def totals(self) -> dict[str, float]:
        """Wall time split: search/model, building, running, and other (start-up, final check)."""
        out = {k: sum(r[k] for r in self.rows) for k in ("search_s", "build_s", "run_s")}
        out["other_s"] = max(0.0, self.wall_s - sum(out.values()))
        return out

    def to_json(self) -> dict[str, Any]:
        """The curve as JSON, its best kernel included: a tensortune config as its knob values, a
        MetaSchedule module as TVM's JSON of the IRModule (never pickled)."""
        return {"tuner": self.tuner, "rows": self.rows, "wall_s": self.wall_s,
                "best_s": self.best_s if self.best_s < float("inf") else None, "best": kernel_to_json(self.best),
                "errors": self.errors, "note": self.note, "search": self.search}

    @classmethod
    def from_json(cls, d: dict[str, Any], task: Task) -> "Curve":
        """The curve :meth:`to_json` wrote, its best kernel rebuilt against ``task``."""
        return cls(d["tuner"], list(d["rows"]), float(d["wall_s"]),
                   float("inf") if d.get("best_s") is None else float(d["best_s"]), kernel_from_json(d.get("best"), task),
                   int(d["errors"]), d.get("note", ""), dict(d.get("search") or {}))


def run_tensortune(spec: str, task: Task, budget: int, seed: int, options: MeasureOptions,
                   progress: bool = True, start_from_default: bool = True, early_stopping: int | None = None,
                   database: Any = None) -> Curve:
    """One tensortune tuner (a spec: ``NAME[:KEY=VALUE...]``) from a cold start (its measurer's
    processes included); with ``database`` its history is there and its trials go there."""
    from tensortune.tuners import get_tuner

    from .specs import parse

    tuner_name, tuner_options = parse(spec)
    curve = Curve(spec)
    t0 = time.perf_counter()
    last = {"elapsed": 0.0, "build": 0.0, "run": 0.0}
    with Measurer(options) as m:
        bar = ProgressBar(budget, desc=f"{task.name[:24]} {spec}", disable=not progress)

        def on_batch(tuner: Any, inputs: Any, results: Any) -> None:
            bar(tuner, inputs, results)
            ok = [r.cost for r in results if r.ok]
            trials = curve.trials + len(results)
            curve.add(trials, time.perf_counter() - t0, min(ok) if ok else None, len(ok), len(results) - len(ok),
                      m.build_s, m.run_s, last)

        tuner = get_tuner(tuner_name, task, seed=seed, start_from_default=start_from_default, options=tuner_options)
        res = tuner.tune(Budget(trials=budget, early_stopping=early_stopping), m, callbacks=[on_batch], database=database)
        bar.close()
        report = tuner.search_report()
        if report:
            curve.search = {**report, "stop_reason": res.stop_reason}
    curve.wall_s = time.perf_counter() - t0
    if res.best_config is not None and res.verified:
        curve.best = res.best_config
    else:
        curve.note = "no verified config"
    return curve


def run_metaschedule(task: Task, budget: int, seed: int, options: MeasureOptions, progress: bool = True,
                     ms_batch: int = msa.MS_BATCH) -> Curve:
    """MetaSchedule ``tune_tir`` from a cold start on the task's PrimFunc."""
    from tensortune.target import make_target

    curve = Curve(METASCHEDULE)
    last = {"elapsed": 0.0, "build": 0.0, "run": 0.0}
    t0 = time.perf_counter()
    bar = ProgressBar(budget, desc=f"{task.name[:24]} {METASCHEDULE}", disable=not progress)
    session: msa.MSSession

    def on_batch(task_id: int, costs: list[float], errors: int) -> None:
        n = len(costs) + errors
        trials = curve.trials + n
        curve.add(trials, time.perf_counter() - t0, min(costs) if costs else None, len(costs), errors,
                  session.clock.build_s, session.clock.run_s, last)
        gf = (lambda s: task.flops / s / 1e9 if s and s < float("inf") else 0.0)
        bar.step(n, gf(min(costs) if costs else None), gf(curve.best_s), errors)

    session = msa.MSSession(options, on_batch)
    try:
        curve.best = msa.tune_primfunc(task.prim_func(), make_target(task.target_json), budget, seed, session,
                                       batch=ms_batch)
    except Exception as e:  # noqa: BLE001 - a failed peer run is a result, recorded
        curve.note = f"MetaSchedule failed: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__}"
    bar.close()
    curve.wall_s = time.perf_counter() - t0
    if curve.best is None and not curve.note:
        curve.note = "no candidate built"
    return curve


def run_ops(run: RunDir, workloads: list[tuple[str, str, str, dict[str, int]]], tuners: list[str], budget: int,
            seed: int, options: MeasureOptions, rounds: int, progress: bool = True, ms_batch: int = msa.MS_BATCH,
            on_step: Callable[[], None] = lambda: None, start_from_default: bool = True, library: bool = True,
            blocked: bool = False, early_stopping: int | None = None, deadline: Deadline | None = None) -> None:
    """The operator suite; workloads already complete in ``run`` are skipped (resume).

    ``on_step`` is called after each workload's results are stored. A tuner spec with
    ``transfer=true`` tunes with its own database in ``RESULTS/history/``, which keeps the
    trials of the run's earlier workloads (resumed with the folder); the others start empty.
    With ``blocked`` convolution workloads are tuned in their blocked (NCHWc) form. With a
    ``deadline`` a tuner does not start on a workload unless 1.5x its longest earlier wall time
    in this folder is left (the final re-measurement: 2 minutes).
    """
    from tensortune.database import Database

    from .specs import keeps_history, slug

    deadline = deadline or Deadline(None)
    walls: dict[str, list[float]] = {}  # tuner -> wall seconds of its finished workloads here
    for v in run.ops_summary().values():
        for t, r in v.get("tuners", {}).items():
            walls.setdefault(t, []).append(r["wall_s"])
    done = run.ops_done()
    for i, (group, name, op, shape) in enumerate(workloads):
        if name in done:
            print(f"{name}: done already, skipped", flush=True)
            continue
        if blocked:
            from tensortune.models.layout import blocked_workload
            from tensortune.target import host_target_json

            op, shape = blocked_workload(op, shape, host_target_json())
        task = Task.from_op(op, shape)
        order = tuners[i % len(tuners):] + tuners[:i % len(tuners)]
        curves = []
        for tuner in order:
            kept = run.tuner_done(name, tuner)
            if kept is not None:  # finished by an earlier invocation that stopped within this workload
                c = Curve.from_json(kept, task)
                curves.append(c)
                walls.setdefault(tuner, []).append(c.wall_s)
                print(f"{name} {tuner:12} done already ({c.trials} trials), kept", flush=True)
                continue
            if not deadline.allows(f"{name} {tuner}", 1.5 * max(walls[tuner]) if tuner in walls else None):
                return
            if tuner == METASCHEDULE:
                c = run_metaschedule(task, budget, seed, options, progress, ms_batch)
            elif keeps_history(tuner):
                (run.path / "history").mkdir(parents=True, exist_ok=True)
                with Database(run.path / "history" / f"{slug(tuner)}.db") as db:
                    c = run_tensortune(tuner, task, budget, seed, options, progress, start_from_default,
                                       early_stopping, database=db)
            else:
                c = run_tensortune(tuner, task, budget, seed, options, progress, start_from_default, early_stopping)
            curves.append(c)
            walls.setdefault(tuner, []).append(c.wall_s)
            run.keep_tuner(name, tuner, c.to_json())
            best = f"{task.flops / c.best_s / 1e9:.1f} GFLOPS" if c.best_s < float("inf") else "-"
            print(f"{name} {tuner:12} {c.trials:4d} trials {c.wall_s:7.1f} s  "
                  f"best {best} {c.note}", flush=True)
        if not deadline.allows(f"{name}'s final measurements", 120.0):
            return
        final = remeasure_isolated(task, [(c.tuner, c.best, c.note) for c in curves], rounds, options, library)
        lib = final.pop(LIBRARY, None)
        log = final.pop(ROUNDS)
        print(final_line(name, rounds, final, log, lib), flush=True)
        rows = []
        for c in curves:
            for r in c.rows:
                rows.append({"workload": name, "group": group, "op": op, "seed": seed, "flops": task.flops, **r})
        summary = {"group": group, "op": op, "shape": shape, "flops": task.flops, "order": order,
                   "bytes": task_bytes(task), "library": lib, "remeasure": log,
                   "tuners": {c.tuner: {"trials": c.trials, "wall_s": c.wall_s,
                                        "search_best_ms": c.best_s * 1e3 if c.best_s < float("inf") else None,
                                        "errors": c.errors, "note": c.note, "split": c.totals(),
                                        **({"search": c.search} if c.search else {}),
                                        "best": kernel_to_json(c.best), **final[c.tuner]}
                              for c in curves}}
        run.add_ops(name, rows, summary)
        run.drop_tuners(name)
        on_step()


def task_bytes(task: Task) -> int:
    """Bytes a kernel must move at least: every buffer (inputs and output) once."""
    import numpy as np

    return sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in zip(task.arg_shapes, task.arg_dtypes))
