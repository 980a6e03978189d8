"""The ``tensortune`` command line."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any, Sequence

#: The main job's built-in workload: ResNet-18 layer C6 (AutoTVM paper, Table 1).
DEMO_OP, DEMO_SHAPE = "conv2d", (28, 28, 128, 128, 3, 1, 1)
DEMO_TIME_BUDGET, DEMO_TRIALS, DEMO_TUNER = 180.0, 400, "genetic"


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(message)


def _positive(cast: type) -> Any:
    """An argparse type: ``cast(text)``, which must be > 0."""

    def parse(s: str) -> Any:
        try:
            v = cast(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not a{'n integer' if cast is int else ' number'}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{s} must be positive")
        return v

    return parse


_positive_int, _positive_float = _positive(int), _positive(float)


def _parse_shape(text: str) -> list[int]:
    vals = []
    for part in text.split(","):
        part = part.strip()
        try:
            vals.append(int(part))
        except ValueError:
            raise UsageError(f"--shape: {part!r} is not an integer (expected comma-separated integers)") from None
    return vals


def _check_db_path(path: str, must_exist: bool) -> None:
    """Reject an unusable database path before anything is written."""
    if os.path.isdir(path):
        raise UsageError(f"--db {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--db {path}: folder {parent} does not exist")
    if must_exist and not os.path.exists(path):
        raise UsageError(f"--db {path}: no such database")
    if os.path.exists(path) and not os.access(path, os.R_OK):
        raise UsageError(f"--db {path}: not readable")
    if not must_exist and not os.access(parent if not os.path.exists(path) else path, os.W_OK):
        raise UsageError(f"--db {path}: not writable")


def _open_db(path: str, readonly: bool = False) -> Any:
    from .database import Database, DatabaseError

    try:
        return Database(path, readonly=readonly)
    except DatabaseError as e:
        raise UsageError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    from .task.ops import OPS
    from .costmodel import COST_MODELS
    from .features import FEATURES
    from .tuners import TUNERS

    FEATURE_NAMES = list(FEATURES)

    p = _Parser(prog="tensortune", description="Auto-tune tensor programs on Apache TVM.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    t = sub.add_parser("tune-op", help="tune one operator")
    t.add_argument("op", help=f"one of {', '.join(OPS)}")
    t.add_argument("--shape", required=True, help="comma-separated shape values, e.g. matmul M,N,K; conv2d H,W,IC,OC,K,S,P")
    t.add_argument("--tuner", default="random", help=f"one of {', '.join(TUNERS)}")
    t.add_argument("--trials", type=_positive_int, required=True, help="trial budget for this task and tuner")
    t.add_argument("--time-budget", type=_positive_float, default=None, help="stop after this many seconds")
    t.add_argument("--early-stopping", type=_positive_int, default=None, help="stop after N trials without improvement")
    t.add_argument("--batch-size", type=_positive_int, default=None)
    t.add_argument("--db", required=True, help="SQLite database file (created if missing)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.add_argument("--no-progress", action="store_true")
    m = t.add_argument_group("model-based tuners (autotvm)")
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
    e.add_argument("-o", "--output", default="-", help="file (default: standard output)")

    i = sub.add_parser("import", help="import JSON-lines records")
    i.add_argument("--db", required=True)
    i.add_argument("input", help="JSON-lines file")

    d = sub.add_parser("demo", help="the main job on defaults: tune ResNet-18 C6 and compare with PyTorch")
    d.add_argument("--time-budget", type=_positive_float, default=DEMO_TIME_BUDGET)
    d.add_argument("--trials", type=_positive_int, default=DEMO_TRIALS)
    d.add_argument("--tuner", default=DEMO_TUNER)
    d.add_argument("--db", default="tensortune_demo.db")
    d.add_argument("--seed", type=int, default=0)
    return p


# ---------------------------------------------------------------- commands
def _tune(op: str, shape: Sequence[int], tuner_name: str, trials: int, db_path: str, seed: int,
          time_budget: float | None, early_stopping: int | None, batch_size: int | None,
          progress: bool, model_options: dict[str, Any] | None = None) -> Any:
    from .measure import Measurer
    from .task import OpError, Task
    from .tuners import DEFAULT_BATCH_SIZE, MODEL_TUNERS, TUNERS, get_tuner
    from .utils.progress import ProgressBar

    if tuner_name not in TUNERS:
        raise UsageError(f"unknown tuner {tuner_name!r}; known tuners: {', '.join(TUNERS)}")
    try:
        task = Task.from_op(op, shape)
    except OpError as e:
        raise UsageError(str(e)) from None
    options = {k: v for k, v in (model_options or {}).items() if v is not None}
    if options and tuner_name not in MODEL_TUNERS:
        raise UsageError(f"--{next(iter(options)).replace('_', '-')} applies to model-based tuners "
                         f"({', '.join(MODEL_TUNERS)}), not {tuner_name!r}")
    try:
        tuner = get_tuner(tuner_name, task, seed=seed, batch_size=batch_size or DEFAULT_BATCH_SIZE, **options)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_db_path(db_path, must_exist=False)
    db = _open_db(db_path)
    bar = ProgressBar(trials, desc=f"{tuner_name} {task.name}", disable=not progress)
    try:
        with Measurer() as m:
            res = tuner.tune(trials, m, early_stopping=early_stopping, time_budget=time_budget,
                             callbacks=[bar], database=db)
    finally:
        bar.close()
        db.close()
    return res


def cmd_tune_op(a: argparse.Namespace) -> int:
    """``tensortune tune-op``."""
    model_options = {"cost_model": a.cost_model, "objective": a.objective, "feature": a.feature,
                     "acquisition": a.acquisition, "transfer": a.transfer}
    res = _tune(a.op, _parse_shape(a.shape), a.tuner, a.trials, a.db, a.seed, a.time_budget,
                a.early_stopping, a.batch_size, progress=not (a.no_progress or a.json), model_options=model_options)
    out = res.to_json()
    if res.tuner_status:
        out["tuner_status"] = res.tuner_status
    if a.json:
        print(json.dumps(out))
    else:
        lat = f"{out['best_latency_ms']:.4f} ms" if out["best_latency_ms"] is not None else "none"
        spread = f" (spread {100 * out['best_spread']:.1f}%)" if out["best_latency_ms"] is not None else ""
        print(f"{out['task']}: best {lat}{spread}, {out['best_gflops']:.1f} GFLOPS after {out['trials_measured']} trials "
              f"this run (stopped: {out['stop_reason']}); errors {out['errors'] or 'none'}")
        if out["best_config"] is not None:
            print(f"best config: {json.dumps(out['best_config'])}")
        if res.tuner_status:
            print(f"model: {res.tuner_status}")
    return 0


def cmd_best(a: argparse.Namespace) -> int:
    """``tensortune best``."""
    _check_db_path(a.db, must_exist=True)
    db = _open_db(a.db, readonly=True)
    from .task import Task

    rows = []
    for task, trial in db.best_all():
        rows.append({"workload_key": task.workload_key, "task": Task.from_json(json.loads(task.task_json)).name,
                     "best_config": trial.config, "best_latency_ms": trial.cost * 1e3,
                     "best_gflops": task.flops / trial.cost / 1e9, "tuner": trial.tuner, "trials": db.count(task.workload_key)})
    db.close()
    if a.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['task']:<55} {r['best_latency_ms']:10.4f} ms {r['best_gflops']:8.1f} GFLOPS  ({r['trials']} trials, {r['tuner']})")
        if not rows:
            print("no verified trials stored")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    """``tensortune export``."""
    from .database import export_jsonl

    _check_db_path(a.db, must_exist=True)
    db = _open_db(a.db, readonly=True)
    try:
        n = export_jsonl(db, sys.stdout if a.output == "-" else a.output)
    finally:
        db.close()
    print(f"exported {n} records", file=sys.stderr)
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    """``tensortune import``."""
    from .database import DatabaseError, import_records, read_jsonl

    if not os.path.isfile(a.input):
        raise UsageError(f"{a.input}: no such file")
    _check_db_path(a.db, must_exist=False)
    try:
        records = read_jsonl(a.input)  # validate everything before the database is touched
    except DatabaseError as e:
        raise UsageError(str(e)) from None
    db = _open_db(a.db)
    try:
        tasks, trials = import_records(db, *records)
    finally:
        db.close()
    print(f"imported {tasks} tasks and {trials} trials")
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    """The main job: tune ResNet-18 C6 for a few minutes; GFLOPS before/after next to PyTorch."""
    from .measure import MeasureInput, Measurer
    from .task import Task
    from .utils.libs import library_latency

    task = Task.from_op(DEMO_OP, DEMO_SHAPE)
    print(f"tensortune demo: {task.name} (ResNet-18 C6), {a.tuner} tuner, up to {a.trials} trials "
          f"or {a.time_budget:.0f} s, database {a.db}")
    res = _tune(DEMO_OP, DEMO_SHAPE, a.tuner, a.trials, a.db, a.seed, a.time_budget, None, None, progress=True)
    rounds = 3  # interleaved, so drift of the machine hits every row alike; medians reported
    runs: dict[str, list[float]] = {"default": [], "tuned": [], "lib": []}
    with Measurer() as m:
        threads = m.options.threads
        naive_task = Task.from_op(DEMO_OP, DEMO_SHAPE, template="none")
        naive = m.measure([MeasureInput(naive_task, naive_task.default_config())])[0]
        for _ in range(rounds):
            for key, cfg in (("default", task.default_config()), ("tuned", res.best_config)):
                r = m.measure([MeasureInput(task, cfg)])[0] if cfg is not None else None
                if r is not None and r.ok:
                    runs[key].append(r.cost)
            lib, lib_s = library_latency(task, threads)
            runs["lib"].append(lib_s)
    med = {k: statistics.median(v) if v else float("inf") for k, v in runs.items()}
    lib_s = med["lib"]
    gf = lambda s: task.flops / s / 1e9  # noqa: E731
    rows = [("TVM, no schedule (naive loops)", naive.cost if naive.ok else float("inf")),
            ("tensortune template default (untuned)", med["default"]),
            (f"tensortune tuned ({res.trials_measured} trials this run)", med["tuned"]),
            (f"{lib} ({threads} threads)", lib_s)]
    print(f"\nmedians of {rounds} interleaved rounds (naive loops: one)")
    print(f"{'':44} {'latency':>12} {'GFLOPS':>9} {'vs ' + lib:>10}")
    for name, s in rows:
        if s == float("inf"):
            print(f"{name:44} {'failed':>12}")
            continue
        print(f"{name:44} {s * 1e3:9.3f} ms {gf(s):9.1f} {lib_s / s:9.2f}x")
    return 0


COMMANDS = {"tune-op": cmd_tune_op, "best": cmd_best, "export": cmd_export, "import": cmd_import, "demo": cmd_demo}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensortune`` console script."""
    from .measure import WorkerStartError

    try:
        a = build_parser().parse_args(argv)
        return COMMANDS[a.cmd](a)
    except UsageError as e:
        print(f"tensortune: error: {e}", file=sys.stderr)
        return 2
    except WorkerStartError as e:
        print(f"tensortune: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tensortune: interrupted; measured trials are in the database, rerun to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
