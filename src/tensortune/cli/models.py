"""The deploy flow on a model: ``tune``, ``tasks``, ``compile``, ``bench``, ``profile``, ``check``
and ``demo`` (the main job on defaults), each a client of :mod:`tensortune.app`."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import app
from ..app.checks import check_precision, target_of
from ..app.tuning import DEFAULT_MODEL_BUDGET, DEFAULT_SCHEDULER, DEFAULT_TUNER
from ..budget import Budget
from ..errors import UsageError
from .args import (check_db, check_output, load_model, model_args, positive_float, positive_int, precision_arg, seed,
                   speedup, target_arg, threads as threads_arg, tuner_option_arg)

#: The main job on defaults: tune this built-in model for a few minutes, then compare.
DEMO_MODEL, DEMO_DB = "resnet18", "tensortune_demo.db"


def add_parsers(sub: Any) -> None:
    """The sub-commands of this group."""
    from ..scheduler import SCHEDULERS
    from ..tuners import TUNERS

    SCHEDULER_NAMES = list(SCHEDULERS)
    tm = sub.add_parser("tune", help="tune every task of a model")
    model_args(tm)
    tm.add_argument("--tuner", default=DEFAULT_TUNER, help=f"one of {', '.join(TUNERS)} (default {DEFAULT_TUNER})")
    tm.add_argument("--trials", type=positive_int, default=None, help="trials per task (stored ones count)")
    tm.add_argument("--rpc", default=None, metavar="HOST:PORT:KEY",
                    help="time candidates on a device of this TVM RPC tracker (built here)")
    tm.add_argument("--rpc-workers", type=positive_int, default=1, metavar="N",
                    help="with --rpc: candidates timed at once, each on a device of its own (default 1)")
    target_arg(tm)
    tm.add_argument("--ray-address", default=None, metavar="ADDR",
                    help="tune tasks at once on the nodes of this Ray cluster (auto: the one this machine is in; "
                         "HOST:PORT); the nodes build and time, this process writes --db (needs the ray extra)")
    tm.add_argument("--slots-per-node", type=positive_int, default=1, metavar="N",
                    help="with --ray-address: tasks tuned at once on each node, each on --threads cores (default 1)")
    tm.add_argument("--cpu-budget", type=positive_float, default=None,
                    help="CPU-seconds for the whole model (on top of --trials / --time-budget)")
    tm.add_argument("--energy-budget", type=positive_float, default=None,
                    help="joules for the whole model (needs a readable RAPL counter; refused without one)")
    tm.add_argument("--time-budget", type=positive_float, default=None, help="seconds for the whole model")
    tm.add_argument("--scheduler", default=DEFAULT_SCHEDULER, help=f"one of {', '.join(SCHEDULER_NAMES)}")
    tm.add_argument("--latency-goal", type=positive_float, default=None, metavar="MS",
                    help="survey: stop once the model runs this fast (never above its untuned latency)")
    tm.add_argument("--speedup-goal", type=speedup, default=None, metavar="X",
                    help="survey: stop once the model runs X times as fast as untuned (at least 1), the two timed "
                         "side by side in this process")
    tm.add_argument("--trials-per-round", type=positive_int, default=None,
                    help="survey: measurements per task and round (64)")
    tm.add_argument("--db", required=True, help="SQLite database file (created if missing)")
    tm.add_argument("--batch-size", type=positive_int, default=None,
                    help="candidates the tuner proposes per measurement batch (default: the tuner's own)")
    tm.add_argument("--threads", type=threads_arg, default=None,
                    help="threads for timing the candidates and the model (default: all cores)")
    tm.add_argument("--seed", type=seed, default=0, help="seed of the tuners' randomness (default 0)")
    tm.add_argument("--json", action="store_true", help="print one JSON object")
    tm.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    tm.add_argument("--no-check", action="store_true",
                    help="skip the in-model check at the end (each tuned task's best, default and runner-up "
                         "timed inside the model; see `tensortune check`)")
    tuner_option_arg(tm)

    ts = sub.add_parser("tasks", help="list the tasks of a model")
    model_args(ts)
    target_arg(ts, "the model is fused for")
    ts.add_argument("--json", action="store_true", help="print one JSON list")

    c = sub.add_parser("compile", help="build a model with the best stored schedules")
    model_args(c)
    c.add_argument("--db", default=None, help="database of tuning records (none: template defaults)")
    target_arg(c, "the library is built for (its records are used)")
    c.add_argument("-o", "--output", required=True, help="shared library to write (a .json description goes beside it)")
    c.add_argument("--force", action="store_true", help="overwrite existing output files")
    c.add_argument("--json", action="store_true", help="print one JSON object")

    bm = sub.add_parser("bench", help="check and time a compiled model against PyTorch and ONNX Runtime")
    model_args(bm)
    bm.add_argument("--db", default=None, help="database of tuning records (none: the tuned row equals the untuned one)")
    bm.add_argument("--threads", type=threads_arg, default=None, help="threads for every system (default: all cores)")
    bm.add_argument("--no-onnxruntime", action="store_true", help="leave ONNX Runtime out of the comparison")
    bm.add_argument("--json", action="store_true", help="print one JSON object")

    pr = sub.add_parser("profile", help="time every fused function inside the compiled model")
    model_args(pr)
    pr.add_argument("--db", default=None, help="database of tuning records (none: template defaults)")
    pr.add_argument("--threads", type=threads_arg, default=None, help="threads (default: all cores)")
    pr.add_argument("--runs", type=positive_int, default=10, help="inferences profiled (medians over them)")
    pr.add_argument("--top", type=positive_int, default=None, help="show only the N heaviest functions")
    pr.add_argument("--no-peak", action="store_true", help="skip measuring the machine's peak (no %%peak column)")
    pr.add_argument("--layout", default=None, help="layout mode: blocked (default) or nchw")
    pr.add_argument("--json", action="store_true", help="print one JSON object")

    cf = sub.add_parser("check", help="time each tuned task's best, default and runner-up inside the model; "
                                        "keep the fastest (tune ends with it)")
    model_args(cf)
    cf.add_argument("--db", required=True, help="database of tuning records (the verdict is stored in it)")
    cf.add_argument("--threads", type=threads_arg, default=None, help="threads (default: all cores)")
    cf.add_argument("--rounds", type=positive_int, default=None, help="interleaved rounds (default 5)")
    cf.add_argument("--runs", type=positive_int, default=None, help="inferences per variant and round (default 5)")
    cf.add_argument("--alternatives", type=int, default=None,
                    help="runners-up per task timed beside its best and its default (default 1)")
    cf.add_argument("--json", action="store_true", help="print one JSON object")

    d = sub.add_parser("demo", help=f"the main job on defaults: tune {DEMO_MODEL} for a few minutes, then compare")
    d.add_argument("--model", default=DEMO_MODEL, help=f"the model to tune (default {DEMO_MODEL}; as for tune)")
    d.add_argument("--time-budget", type=positive_float, default=DEFAULT_MODEL_BUDGET.wall_s,
                   help=f"seconds of tuning (default {DEFAULT_MODEL_BUDGET.wall_s:.0f})")
    d.add_argument("--tuner", default=DEFAULT_TUNER, help=f"one of {', '.join(TUNERS)} (default {DEFAULT_TUNER})")
    d.add_argument("--db", default=DEMO_DB, help=f"SQLite database file (default {DEMO_DB}; a second run resumes)")
    d.add_argument("--seed", type=seed, default=0, help="seed of the tuner's randomness (default 0)")
    precision_arg(d)
    tuner_option_arg(d)



def _say(line: str) -> None:
    """Progress of the in-model check, on stderr."""
    print(line, file=sys.stderr, flush=True)


def _print_outcomes(tuned: app.TunedModel) -> None:
    """The table of a model's tasks after tuning, and the estimated total."""
    rows = [o.to_json() for o in tuned.outcomes]
    print(f"{'task':58} {'weight':>6} {'trials':>7} {'best':>11} {'x weight':>11}")
    for r in rows:
        best = f"{r['best_latency_ms']:8.3f} ms" if r["best_latency_ms"] is not None else "-"
        wt = f"{r['weighted_ms']:8.3f} ms" if r["weighted_ms"] is not None else "-"
        print(f"{r['task'][:58]:58} {r['weight']:6d} {r['trials']:7d} {best:>11} {wt:>11}")
    total_ms, measured = tuned.estimate()
    print(f"estimated total {total_ms:.2f} ms over {measured}/{len(rows)} tasks with a "
          f"measured schedule; tuning wall time {tuned.wall_s:.0f} s")


def cmd_tune(a: argparse.Namespace) -> int:
    """``tensortune tune``."""
    from ..app.tuning import check_tuning

    budget = Budget(trials=a.trials, wall_s=a.time_budget, cpu_s=a.cpu_budget, energy_j=a.energy_budget)
    if budget.trials is None and budget.wall_s is None and a.scheduler != "survey":
        raise UsageError("give --trials N (per task), --time-budget SECONDS, or both (or --scheduler survey)")
    threads = app.use_threads(a.threads)
    check_db(a.db, must_exist=False)
    check_tuning(a.tuner, a.scheduler, budget, a.db, a.tuner_options)  # before importing a model
    check_precision(a.precision, target_of(a.target))  # before importing a model
    if a.ray_address is not None:
        from ..app.tuning import check_cluster
        from ..cluster.nodes import connect

        check_cluster(a.scheduler, a.rpc, a.slots_per_node, budget)
        connect(a.ray_address)
    model = load_model(a)
    survey = None
    if a.scheduler == "survey":
        from ..scheduler.survey import SurveyOptions

        survey = SurveyOptions(**{k: v for k, v in (("batch", a.trials_per_round),
                                                    ("goal_s", a.latency_goal / 1e3 if a.latency_goal else None),
                                                    ("speedup_goal", a.speedup_goal)) if v is not None})
    quiet = a.no_progress or a.json
    tuned = app.tune_model(model, tuner=a.tuner, budget=budget, database=a.db, scheduler=a.scheduler,
                           options=a.tuner_options, seed=a.seed, batch_size=a.batch_size, rpc=a.rpc,
                           rpc_workers=a.rpc_workers, survey=survey, check=not a.no_check, progress=not quiet,
                           say=None if quiet else _say, threads=threads, ray_address=a.ray_address,
                           slots_per_node=a.slots_per_node, target=a.target)
    if a.no_check and not a.rpc:
        tuned.check = {"skipped": "--no-check"}
    if a.json:
        print(json.dumps(tuned.to_json()))
        return 0
    _print_outcomes(tuned)
    check, cost, noise = tuned.check, tuned.cost, tuned.noise
    if check is not None and "skipped" not in check:
        print(f"in-model check: {check['changed']} of {len(check['tasks'])} tuned tasks switched; "
              + ", ".join(f"{k} {v:.2f} ms" for k, v in check["latency_ms"].items())
              + (f"; kept the {check['kept']} configs" if check["kept"] != "confirmed" else "")
              + f" ({check['wall_s']:.0f} s, in the wall time above)")
    energy = f"{cost['energy_j']:.1f} J" if cost.get("energy_j") is not None else \
        f"energy {cost.get('energy', 'not available')}"
    print(f"cost: {cost.get('cpu_s', 0.0):.1f} CPU-s, {energy}"
          + (f"; stopped by the {cost['stopped_by'].replace('_', ' ')}" if cost.get("stopped_by") else ""))
    if noise.get("summary"):
        print(noise["summary"])
    for lost in cost.get("lost", []):
        print(f"lost: {lost}")
    if tuned.survey:
        rep = tuned.survey
        print(f"survey: untuned {rep['untuned_ms']:.2f} ms; rounds " + ", ".join(
            f"{r['latency_ms']:.2f}" + (f" ({r['speedup']:.3f}x)" if r.get("speedup") else "")
            for r in rep["rounds"]) + f" ms; stopped: {rep['stop']}")
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    """``tensortune check``."""
    check_db(a.db, must_exist=True)
    if a.alternatives is not None and a.alternatives < 0:
        raise UsageError("--alternatives must be >= 0")
    app.use_threads(a.threads)
    model = load_model(a)
    report = app.check_in_model(model, a.db, threads=a.threads, rounds=a.rounds, runs=a.runs, alternatives=a.alternatives,
                         say=None if a.json else _say)
    print(json.dumps(report.to_json()) if a.json else report.table())
    return 1 if any(not v["ok"] for v in report.variants[:1]) else 0


def cmd_tasks(a: argparse.Namespace) -> int:
    """``tensortune tasks``."""
    from ..models.compile import model_tasks

    tj = target_of(a.target)
    check_precision(a.precision, tj)
    model = load_model(a)
    tasks = model_tasks(model, tj)
    if a.json:
        print(json.dumps([t.to_json() for t in tasks]))
        return 0
    print(f"{model.name}: {len(tasks)} tasks ({sum(t.weight for t in tasks)} calls)")
    for t in tasks:
        note = f"  [{t.note}]" if t.note else ""
        print(f"{t.weight:3d} x {t.task.name[:70]:70} {t.task.flops / 1e6:10.1f} MFLOP  {t.task.template_name}{note}")
    return 0


def cmd_compile(a: argparse.Namespace) -> int:
    """``tensortune compile``."""
    tj = target_of(a.target)  # all of it before the (slow) model import
    check_precision(a.precision, tj)
    from ..measure.cuda import FATBIN_SUFFIX
    from ..target import is_cuda

    for path in (a.output, a.output + ".json", *([a.output + FATBIN_SUFFIX] if is_cuda(tj) else [])):
        check_output(path, a.force, db=a.db)
    if a.db is not None:
        check_db(a.db, must_exist=True)
    model = load_model(a)
    cm = app.compile(model, a.db, target=a.target)
    lib, meta = cm.export(a.output)
    if a.json:
        print(json.dumps({"model": model.name, "library": lib, "description": meta, "counts": cm.counts(),
                          "tasks": [c.to_json() for c in cm.choices]}))
        return 0
    for c in cm.choices:
        extra = f" best {c.best_ms:.3f} ms" if c.best_ms is not None else ""
        print(f"{c.source:8} {c.weight:3d} x {c.task[:64]:64} {c.reason}{extra}")
    counts = cm.counts()
    print(f"{model.name}: {counts['tuned']} tasks tuned, {counts['default']} template default, "
          f"{counts['generic']} generic default, {counts['tvm']} TVM's default, {counts['naive']} unscheduled; "
          f"wrote {lib} and {meta}")
    if is_cuda(tj):
        print(f"for an NVIDIA GPU of {tj['arch']}: not run here; its kernels compiled by nvcc are in {lib}{FATBIN_SUFFIX}")
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    """``tensortune bench``."""
    if a.db is not None:
        check_db(a.db, must_exist=True)
    app.use_threads(a.threads)
    model = load_model(a)
    report = app.bench(model, a.db, a.threads, with_onnxruntime=not a.no_onnxruntime)
    if a.json:
        print(json.dumps(report.to_json()))
    else:
        print(report.table())
        anchor = report.anchor()  # the faster library in f32; OpenVINO as shipped for a bf16 build
        if anchor is not None:
            ratios = ", ".join(f"{name.removeprefix('tensortune ')} / it: {row.latency.median_ms / anchor[1]:.2f} x"
                               for name in ("tensortune tuned", "tensortune untuned")
                               if (row := report.row(name)) is not None and row.latency is not None)
            what = "compared with" if report.precision == "bf16" else "fastest CPU runtime:"
            print(f"{what} {anchor[0]} {anchor[1]:.2f} ms ({ratios or 'tensortune not timed'})")
    return 1 if any(not r.ok for r in report.rows) else 0


def cmd_profile(a: argparse.Namespace) -> int:
    """``tensortune profile``."""
    from ..models.layout import MODES

    if a.layout is not None and a.layout not in MODES:
        raise UsageError(f"--layout {a.layout!r}: one of {', '.join(MODES)}")
    if a.db is not None:
        check_db(a.db, must_exist=True)
    app.use_threads(a.threads)
    model = load_model(a)
    prof = app.profile(model, a.db, a.threads, runs=a.runs, peak=not a.no_peak, layout=a.layout)
    print(json.dumps(prof.to_json()) if a.json else prof.table(a.top))
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    """The main job on defaults: tune a built-in model for a few minutes, compile, compare."""
    from ..precision import CPU_FLAG, host_flags

    threads = app.use_threads(None)
    print(f"tensortune demo: tune {a.model} in {a.precision} with {a.tuner} for {a.time_budget:.0f} s (database "
          f"{a.db}, resumes), then compare with PyTorch, ONNX Runtime and OpenVINO")
    check_db(a.db, must_exist=False)
    model = app.load(a.model, precision=a.precision)
    tuned = app.tune_model(model, tuner=a.tuner, budget=Budget(wall_s=a.time_budget), database=a.db,
                           options=a.tuner_options, seed=a.seed, progress=True, threads=threads, say=_say)
    _print_outcomes(tuned)
    if tuned.check and "summary" in tuned.check:
        print(tuned.check["summary"])
    # the other precision's build beside it, where this CPU runs bf16 (its own records, else defaults)
    other = "bf16" if model.precision == "f32" else "f32"
    extra = {f"tensortune {other}": app.compile(model, a.db, precision=other)} \
        if other == "f32" or CPU_FLAG in host_flags() else {}
    report = tuned.bench(threads, extra=extra)
    print()
    print(report.table())
    return 1 if any(not r.ok for r in report.rows) else 0


COMMANDS = {"tune": cmd_tune, "tasks": cmd_tasks, "compile": cmd_compile, "bench": cmd_bench,
            "profile": cmd_profile, "check": cmd_check, "demo": cmd_demo}
