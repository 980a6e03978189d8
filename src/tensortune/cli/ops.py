"""``tensortune tune-op`` and the database commands: ``best``, ``export``, ``import``, ``upgrade-db``."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

from ..app.checks import config_check, tuner_options
from ..app.tuning import DEFAULT_OP_TUNER
from ..errors import UsageError
from .args import (check_db, check_output, int_in, open_db, parse_shape, positive_float, positive_int, seed,
                   tuner_option_arg)


def add_parsers(sub: Any) -> None:
    """The sub-commands of this group."""
    from ..costmodel import COST_MODELS
    from ..features import FEATURES
    from ..measure import MeasureOptions
    from ..task.ops import OPS
    from ..tuners import TUNERS

    FEATURE_NAMES = list(FEATURES)
    t = sub.add_parser("tune-op", help="tune one operator")
    t.add_argument("op", help=f"one of {', '.join(OPS)}")
    t.add_argument("--shape", required=True, help="comma-separated shape values, e.g. matmul M,N,K; conv2d H,W,IC,OC,K,S,P")
    t.add_argument("--tuner", default=DEFAULT_OP_TUNER, help=f"one of {', '.join(TUNERS)} (default {DEFAULT_OP_TUNER})")
    t.add_argument("--trials", type=positive_int, required=True, help="trial budget for this task and tuner")
    t.add_argument("--time-budget", type=positive_float, default=None, help="stop after this many seconds")
    t.add_argument("--cpu-budget", type=positive_float, default=None,
                   help="stop after this many CPU-seconds (the tuner's own, building and running)")
    t.add_argument("--energy-budget", type=positive_float, default=None,
                   help="stop after this many joules (needs a readable RAPL counter; refused without one)")
    t.add_argument("--early-stopping", type=positive_int, default=None, help="stop after N trials without improvement")
    t.add_argument("--batch-size", type=positive_int, default=None)
    t.add_argument("--rpc", default=None, metavar="HOST:PORT:KEY",
                   help="time candidates on a device of this TVM RPC tracker (built here)")
    t.add_argument("--db", required=True, help="SQLite database file (created if missing)")
    t.add_argument("--seed", type=seed, default=0)
    t.add_argument("--repeat", type=int_in(1, 1000), default=None,
                   help=f"timings of each candidate, the median is its cost (default {MeasureOptions.repeat})")
    t.add_argument("--min-repeat-ms", type=int_in(0, 60_000), default=None,
                   help=f"runs of a timing are repeated until it lasts this long (default {MeasureOptions.min_repeat_ms})")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.add_argument("--no-progress", action="store_true")
    tuner_option_arg(t)
    m = t.add_argument_group("model-based tuners (autotvm, model-based): shortcuts of --tuner-option")
    m.add_argument("--cost-model", default=None, help=f"one of {', '.join(COST_MODELS)} (default xgb)")
    m.add_argument("--objective", default=None, choices=("rank", "reg"), help="XGBoost/TreeGRU loss (default rank)")
    m.add_argument("--feature", default=None, help=f"cost-model features: one of {', '.join(FEATURE_NAMES)} (default itervar)")
    m.add_argument("--acquisition", default=None, choices=("mean", "ei", "ucb"),
                   help="use a bootstrap ensemble with this acquisition")
    m.add_argument("--transfer", dest="transfer", action="store_true", default=None,
                   help="learn from other tasks' records in --db (the default when there are enough)")
    m.add_argument("--no-transfer", dest="transfer", action="store_false", help="never use other tasks' records")

    b = sub.add_parser("best", help="best stored config of each task")
    b.add_argument("--db", required=True)
    b.add_argument("--json", action="store_true")

    e = sub.add_parser("export", help="export records as JSON lines")
    e.add_argument("--db", required=True)
    e.add_argument("-o", "--output", default="-", help="file (default: standard output); written atomically, "
                   "never over a database")
    e.add_argument("--force", action="store_true", help="overwrite an existing (non-database) output file")

    i = sub.add_parser("import", help="import JSON-lines records (all validated before anything is written)")
    i.add_argument("--db", required=True)
    i.add_argument("input", help="JSON-lines file")

    u = sub.add_parser("upgrade-db", help="upgrade a database written by an older tensortune, in place")
    u.add_argument("--db", required=True)

def cmd_tune_op(a: argparse.Namespace) -> int:
    """``tensortune tune-op``."""
    from ..app import Budget, tune_op

    model_options = {"cost_model": a.cost_model, "objective": a.objective, "feature": a.feature,
                     "acquisition": a.acquisition, "transfer": a.transfer}
    options = tuner_options(a.tuner, a.tuner_options, model_options)
    budget = Budget(trials=a.trials, wall_s=a.time_budget, cpu_s=a.cpu_budget, energy_j=a.energy_budget,
                    early_stopping=a.early_stopping)
    check_db(a.db, must_exist=False)
    res = tune_op(a.op, parse_shape(a.shape), a.tuner, budget, a.db, seed=a.seed, batch_size=a.batch_size,
                  options=options, rpc=a.rpc, repeat=a.repeat, min_repeat_ms=a.min_repeat_ms,
                  progress=not (a.no_progress or a.json))
    out = res.to_json()
    if res.tuner_status:
        out["tuner_status"] = res.tuner_status
    if a.json:
        print(json.dumps(out))
        return 0
    lat = f"{out['best_latency_ms']:.4f} ms" if out["best_latency_ms"] is not None else "none"
    spread = f" (spread {100 * out['best_spread']:.1f}%)" if out["best_latency_ms"] is not None else ""
    print(f"{out['task']}: best {lat}{spread}, {out['best_gflops']:.1f} GFLOPS after {out['trials_measured']} trials "
          f"this run (stopped: {out['stop_reason']}); errors {out['errors'] or 'none'}")
    if out["best_config"] is not None:
        print(f"best config: {json.dumps(out['best_config'])}")
        print(f"best from: {res.describe_source()}")
    if res.tuner_status:
        print(f"model: {res.tuner_status}")
    if res.describe_noise():
        print(res.describe_noise())
    cost = out["cost"]
    energy = f"{cost['energy_j']:.1f} J" if cost["energy_j"] is not None else f"energy {cost.get('energy', 'not available')}"
    print(f"cost: {cost['wall_s']:.1f} s wall, {cost['cpu_s']:.1f} CPU-s (tuner {cost['cpu_split_s']['tuner']:.1f}, "
          f"build {cost['cpu_split_s']['build']:.1f}, run {cost['cpu_split_s']['run']:.1f}), {energy}")
    return 0


def cmd_best(a: argparse.Namespace) -> int:
    """``tensortune best``."""
    check_db(a.db, must_exist=True)
    db = open_db(a.db, readonly=True)
    from ..task import Task

    rows = []
    contexts = []
    try:
        for task, trial in db.best_all():
            try:
                name = Task.from_json(json.loads(task.task_json)).name
            except Exception:  # noqa: BLE001 - a task this version cannot rebuild: still report it
                name = f"{task.op}[{task.workload_key[:8]}]"
            contexts.append(trial.context)
            rows.append({"workload_key": task.workload_key, "task": name,
                         "best_config": trial.config, "best_latency_ms": trial.cost * 1e3,
                         "best_gflops": task.flops / trial.cost / 1e9, "tuner": trial.tuner,
                         "trial_id": trial.id, "trials": db.count(task.workload_key),
                         "measured": trial.context.to_json()})
    finally:
        db.close()
    if a.json:
        print(json.dumps(rows))
    else:
        for r, ctx in zip(rows, contexts):
            print(f"{r['task']:<55} {r['best_latency_ms']:10.4f} ms {r['best_gflops']:8.1f} GFLOPS  "
                  f"({r['trials']} trials, {r['tuner']}; {ctx.describe()})")
        if not rows:
            print("no verified trials stored")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    """``tensortune export``."""
    from ..database import export_jsonl

    check_db(a.db, must_exist=True)
    if a.output != "-":
        check_output(a.output, a.force, db=a.db)
    db = open_db(a.db, readonly=True)
    try:
        n = export_jsonl(db, sys.stdout if a.output == "-" else a.output)
    finally:
        db.close()
    print(f"exported {n} records" + (f" to {a.output}" if a.output != "-" else ""), file=sys.stderr)
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    """``tensortune import``."""
    from ..database import DatabaseError, import_jsonl, parse_jsonl

    if not os.path.isfile(a.input):
        raise UsageError(f"{a.input}: no such file")
    check_db(a.db, must_exist=False)
    try:
        parsed = parse_jsonl(a.input)  # every line checked before the database is touched
    except DatabaseError as e:
        raise UsageError(str(e)) from None
    existed = os.path.exists(a.db)
    db = open_db(a.db)
    try:
        tasks, trials = import_jsonl(db, parsed, check=config_check())
    except DatabaseError as e:
        db.close()
        if not existed:  # all or nothing: a refused import leaves no new database behind
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(OSError):
                    os.remove(a.db + suffix)
        raise UsageError(str(e)) from None
    finally:
        db.close()
    print(f"imported {tasks} tasks and {trials} trials")
    return 0


def cmd_upgrade_db(a: argparse.Namespace) -> int:
    """``tensortune upgrade-db``: open for writing, which upgrades an older schema in one transaction."""
    from ..database import Database

    check_db(a.db, must_exist=True)
    db = open_db(a.db)
    try:
        n = db.count()
    finally:
        db.close()
    print(f"{a.db}: schema version {Database.SCHEMA_VERSION}, {n} trials")
    return 0


COMMANDS = {"tune-op": cmd_tune_op, "best": cmd_best, "export": cmd_export, "import": cmd_import,
            "upgrade-db": cmd_upgrade_db}
