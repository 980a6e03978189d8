"""The ``tensortune`` command line."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from .errors import TensortuneError
from .limits import INT64_MAX, LimitError, check_seed

#: The main job on defaults: tune this built-in model for a few minutes, then compare.
DEMO_MODEL, DEMO_TUNER, DEMO_TIME_BUDGET, DEMO_DB = "resnet18", "autotvm", 300.0, "tensortune_demo.db"
DEMO_SCHEDULER = "sequential"


class UsageError(TensortuneError):
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
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"{s} must be a positive finite number")
        if cast is int and v > INT64_MAX:  # counts of trials, tasks, rounds are stored as SQLite INTEGERs
            raise argparse.ArgumentTypeError(f"{s} is too large (at most {INT64_MAX})")
        return v

    return parse


_positive_int, _positive_float = _positive(int), _positive(float)


def _int_in(lo: int, hi: int) -> Any:
    """An argparse type: an integer from ``lo`` to ``hi``."""

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{s} is out of range ({lo} to {hi})")
        return v

    return parse


def _seed(s: str) -> int:
    """An argparse type: a seed, 0 to :data:`~tensortune.limits.MAX_SEED`."""
    try:
        return check_seed(int(s))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e) if isinstance(e, LimitError) else f"{s!r} is not an integer") from None


def _threads(s: str) -> int:
    """An argparse type: a thread count, 1 to this machine's cores (TVM's thread pool joins every
    thread at exit: a thousand of them made ``bench`` hang after printing its results)."""
    from .target import cpu_count

    v = _positive_int(s)
    if v > cpu_count():
        raise argparse.ArgumentTypeError(f"{v} threads: this machine has {cpu_count()} cores")
    return v


def _speedup(s: str) -> float:
    """An argparse type: a speed-up (untuned / tuned latency), at least 1."""
    v = _positive_float(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s}: a speed-up goal is untuned / tuned latency, at least 1")
    return v


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
    try:
        Path(path).resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop (RuntimeError on Python 3.11, OSError later)
        raise UsageError(f"--db {path}: {e}") from None
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


def command_line(*subcommand: str) -> str:
    """This process's command line as ``tensortune ...`` when it runs ``subcommand`` (kept in a
    trained model's schema so it can be remade), else "" (called from code, not the CLI)."""
    return "tensortune " + " ".join(sys.argv[1:]) if sys.argv[1:1 + len(subcommand)] == list(subcommand) else ""


def _check_output(path: str, force: bool, db: str | None = None, option: str = "-o") -> None:
    """UsageError unless ``path`` may be written: never the database or any SQLite file, and an
    existing file only with ``--force``."""
    from .utils.atomic import OutputError, check_output_path

    try:
        check_output_path(path, overwrite=force, protect=[db] if db else [], what=option)
    except OutputError as e:
        raise UsageError(str(e)) from None


def _open_db(path: str, readonly: bool = False) -> Any:
    from .database import Database, DatabaseError

    try:
        return Database(path, readonly=readonly)
    except DatabaseError as e:
        raise UsageError(str(e)) from None


def tuner_option_arg(q: argparse.ArgumentParser) -> None:
    """``--tuner-option KEY=VALUE`` (repeatable)."""
    q.add_argument("--tuner-option", "-O", action="append", default=[], metavar="KEY=VALUE", dest="tuner_options",
                   help="a setting of the tuner (repeatable), e.g. plan_size=32, epsilon=0.1, explorer=random, "
                        "explorer.n_chains=64; unknown keys are refused with the known ones listed")


def _tuner_options(tuner: str, items: Sequence[str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tuner's options from ``--tuner-option`` items (and ``extra``: option flags given),
    checked now (one-line UsageError), before anything is imported or measured."""
    from .tuners import TUNERS
    from .utils.options import OptionError, parse_assignments

    if tuner not in TUNERS:
        raise UsageError(f"unknown tuner {tuner!r}; known tuners: {', '.join(TUNERS)}")
    try:
        values: dict[str, Any] = {**parse_assignments(items), **{k: v for k, v in (extra or {}).items() if v is not None}}
        TUNERS.get(tuner).check_options(values)
    except OptionError as e:
        raise UsageError(str(e)) from None
    return values


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    from .costmodel import COST_MODELS
    from .measure import MeasureOptions
    from .task.ops import OPS
    from .features import FEATURES
    from .scheduler import SCHEDULERS
    from .tuners import TUNERS

    FEATURE_NAMES = list(FEATURES)
    SCHEDULER_NAMES = list(SCHEDULERS)

    p = _Parser(prog="tensortune", description="Auto-tune tensor programs on Apache TVM.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    t = sub.add_parser("tune-op", help="tune one operator")
    t.add_argument("op", help=f"one of {', '.join(OPS)}")
    t.add_argument("--shape", required=True, help="comma-separated shape values, e.g. matmul M,N,K; conv2d H,W,IC,OC,K,S,P")
    t.add_argument("--tuner", default="random", help=f"one of {', '.join(TUNERS)}")
    t.add_argument("--trials", type=_positive_int, required=True, help="trial budget for this task and tuner")
    t.add_argument("--time-budget", type=_positive_float, default=None, help="stop after this many seconds")
    t.add_argument("--cpu-budget", type=_positive_float, default=None,
                   help="stop after this many CPU-seconds (the tuner's own, building and running)")
    t.add_argument("--energy-budget", type=_positive_float, default=None,
                   help="stop after this many joules (needs a readable RAPL counter; refused without one)")
    t.add_argument("--early-stopping", type=_positive_int, default=None, help="stop after N trials without improvement")
    t.add_argument("--batch-size", type=_positive_int, default=None)
    t.add_argument("--rpc", default=None, metavar="HOST:PORT:KEY",
                   help="time candidates on a device of this TVM RPC tracker (built here)")
    t.add_argument("--db", required=True, help="SQLite database file (created if missing)")
    t.add_argument("--seed", type=_seed, default=0)
    t.add_argument("--repeat", type=_int_in(1, 1000), default=None,
                   help=f"timings of each candidate, the median is its cost (default {MeasureOptions.repeat})")
    t.add_argument("--min-repeat-ms", type=_int_in(0, 60_000), default=None,
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

    def model_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("model", help="a built-in model name, a path to an ONNX file, a Hugging Face "
                       "hf:MODEL_TYPE[:key=value,...] spec (random weights; needs the hf extra) or a "
                       "save_pretrained folder")
        q.add_argument("--batch", type=_positive_int, default=1, help="batch size of a built-in model (default 1)")
        q.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                       help="fix an ONNX input's shape (repeatable)")

    tm = sub.add_parser("tune", help="tune every task of a model")
    model_args(tm)
    tm.add_argument("--tuner", default="autotvm", help=f"one of {', '.join(TUNERS)} (default autotvm)")
    tm.add_argument("--trials-per-task", type=_positive_int, default=None, help="trials per task (stored ones count)")
    tm.add_argument("--rpc", default=None, metavar="HOST:PORT:KEY",
                    help="time candidates on a device of this TVM RPC tracker (built here)")
    tm.add_argument("--cpu-budget", type=_positive_float, default=None,
                    help="CPU-seconds for the whole model (on top of --trials-per-task / --time-budget)")
    tm.add_argument("--energy-budget", type=_positive_float, default=None,
                    help="joules for the whole model (needs a readable RAPL counter; refused without one)")
    tm.add_argument("--time-budget", type=_positive_float, default=None, help="seconds for the whole model")
    tm.add_argument("--scheduler", default="sequential", help=f"one of {', '.join(SCHEDULER_NAMES)}")
    tm.add_argument("--latency-goal", type=_positive_float, default=None, metavar="MS",
                    help="survey: stop once the model runs this fast (never above its untuned latency)")
    tm.add_argument("--speedup-goal", type=_speedup, default=None, metavar="X",
                    help="survey: stop once the model runs X times as fast as untuned (at least 1), the two timed "
                         "side by side in this process")
    tm.add_argument("--survey-batch", type=_positive_int, default=None, help="survey: measurements per task and round (64)")
    tm.add_argument("--db", required=True, help="SQLite database file (created if missing)")
    tm.add_argument("--batch-size", type=_positive_int, default=None)
    tm.add_argument("--seed", type=_seed, default=0)
    tm.add_argument("--json", action="store_true", help="print one JSON object")
    tm.add_argument("--no-progress", action="store_true")
    tm.add_argument("--no-confirm", action="store_true",
                    help="skip the in-model check at the end (each tuned task's best, default and runner-up "
                         "timed inside the model; see `tensortune confirm`)")
    tuner_option_arg(tm)

    ts = sub.add_parser("tasks", help="list the tasks of a model")
    model_args(ts)
    ts.add_argument("--json", action="store_true")

    c = sub.add_parser("compile", help="build a model with the best stored schedules")
    model_args(c)
    c.add_argument("--db", default=None, help="database of tuning records (none: template defaults)")
    c.add_argument("-o", "--output", required=True, help="shared library to write (a .json description goes beside it)")
    c.add_argument("--force", action="store_true", help="overwrite existing output files")
    c.add_argument("--json", action="store_true")

    bm = sub.add_parser("bench", help="check and time a compiled model against PyTorch and ONNX Runtime")
    model_args(bm)
    bm.add_argument("--db", default=None, help="database of tuning records (none: the tuned row equals the untuned one)")
    bm.add_argument("--threads", type=_threads, default=None, help="threads for every system (default: all cores)")
    bm.add_argument("--no-onnxruntime", action="store_true")
    bm.add_argument("--json", action="store_true")

    pr = sub.add_parser("profile", help="time every fused function inside the compiled model")
    model_args(pr)
    pr.add_argument("--db", default=None, help="database of tuning records (none: template defaults)")
    pr.add_argument("--threads", type=_threads, default=None, help="threads (default: all cores)")
    pr.add_argument("--runs", type=_positive_int, default=10, help="inferences profiled (medians over them)")
    pr.add_argument("--top", type=_positive_int, default=None, help="show only the N heaviest functions")
    pr.add_argument("--no-peak", action="store_true", help="skip measuring the machine's peak (no %%peak column)")
    pr.add_argument("--layout", default=None, help="layout mode: blocked (default) or nchw")
    pr.add_argument("--json", action="store_true")

    cf = sub.add_parser("confirm", help="time each tuned task's best, default and runner-up inside the model "
                                        "and keep the fastest there (tune runs this at its end)")
    model_args(cf)
    cf.add_argument("--db", required=True, help="database of tuning records (the verdict is stored in it)")
    cf.add_argument("--threads", type=_threads, default=None, help="threads (default: all cores)")
    cf.add_argument("--rounds", type=_positive_int, default=None, help="interleaved rounds (default 5)")
    cf.add_argument("--runs", type=_positive_int, default=None, help="inferences per variant and round (default 5)")
    cf.add_argument("--alternatives", type=int, default=None,
                    help="runners-up per task timed beside its best and its default (default 1)")
    cf.add_argument("--json", action="store_true")

    d = sub.add_parser("demo", help=f"the main job on defaults: tune {DEMO_MODEL} for a few minutes, then compare")
    d.add_argument("--model", default=DEMO_MODEL)
    d.add_argument("--time-budget", type=_positive_float, default=DEMO_TIME_BUDGET)
    d.add_argument("--tuner", default=DEMO_TUNER)
    d.add_argument("--db", default=DEMO_DB)
    d.add_argument("--seed", type=_seed, default=0)
    tuner_option_arg(d)

    ds = sub.add_parser("dataset", help="tuning-dataset parts: layer statistics and task samplers")
    dsub = ds.add_subparsers(dest="dataset_cmd", required=True, parser_class=_Parser)
    dl = dsub.add_parser("layers", help="collect the layer statistics of zoo models (the task prior)")
    dl.add_argument("--models", default=None, help="comma-separated zoo models (default: all)")
    dl.add_argument("-o", "--output", required=True, help="JSON file (the package ships zoo_layers.json)")
    dl.add_argument("--force", action="store_true", help="overwrite an existing file")
    dt = dsub.add_parser("tasks", help="sample synthetic tasks from the layer statistics")
    dt.add_argument("--sampler", default="pgs", help="pgs (prior-guided), random or modelzoo")
    dt.add_argument("--op", default="conv2d", help="conv2d, depthwise_conv2d or dense")
    dt.add_argument("-n", type=_positive_int, default=150, help="distinct tasks wanted")
    dt.add_argument("--seed", type=_seed, default=0)
    dt.add_argument("--layers", default=None, help="statistics file (default: the shipped zoo statistics)")
    dt.add_argument("--json", action="store_true")
    dg = dsub.add_parser("generate", help="measure a tuning dataset into a database (resumes; runs for hours)")
    dg.add_argument("--db", required=True, help="SQLite database of the dataset (created if missing; resumed)")
    dg.add_argument("--op", default="conv2d", help="conv2d, depthwise_conv2d or dense")
    dg.add_argument("--tasks", type=_positive_int, default=150, help="tasks (default 150)")
    dg.add_argument("--samples", type=_positive_int, default=200, help="measured configs per task (default 200)")
    dg.add_argument("--sampler", default="pgs", help="task sampler: pgs, random or modelzoo")
    dg.add_argument("--code", default="ebs", help="code sampler: ebs (autotvm's trajectory) or random")
    dg.add_argument("--seed", type=_seed, default=0)
    dg.add_argument("--time-budget", type=_positive_float, default=None, help="stop after this many seconds")
    dg.add_argument("--repeat", type=_positive_int, default=5, help="timed repeats per sample (default 5)")
    dg.add_argument("--min-repeat-ms", type=int, default=40, help="shortest repeat in ms (default 40)")
    dg.add_argument("--unblocked", action="store_true",
                    help="measure the plain NCHW/GEMM ops instead of the forms a compiled model runs "
                         "(conv2d_nchwc, depthwise_conv2d_nchwc, dense_pack)")
    dg.add_argument("--no-progress", action="store_true")
    shards_help = ("folder of per-task shard files kept under version control (e.g. datasets/conv2d): "
                   "restored into --db first, and each task's shard written again as it is measured")
    dg.add_argument("--shards", default=None, help=shards_help)
    dst = dsub.add_parser("status", help="how far a dataset is: tasks complete, samples, measuring hours")
    dst.add_argument("--db", required=True)
    dst.add_argument("--shards", default=None, help="restore this shard folder into --db first")
    dst.add_argument("--json", action="store_true")
    de = dsub.add_parser("export", help="features and labels of a dataset database, for training")
    de.add_argument("--db", required=True)
    de.add_argument("--op", default="conv2d_nchwc",
                    help="the tasks' op as stored (conv2d_nchwc, depthwise_conv2d_nchwc, dense_pack, conv2d, ...)")
    de.add_argument("-o", "--output", required=True, help=".npz file (a .json summary goes beside it)")
    de.add_argument("--force", action="store_true")
    de.add_argument("--shards", default=None, help="restore this shard folder into --db first")
    de.add_argument("--max-tasks", type=_positive_int, default=None,
                    help="only the first N tasks (in the generator's order, kept beside the database)")
    de.add_argument("--max-samples", type=_positive_int, default=None,
                    help="only the first N samples measured of each task (a shorter trajectory, as if generated so)")
    pr = sub.add_parser("predictor", help="pre-trained cost models: train, evaluate, show")
    psub = pr.add_subparsers(dest="predictor_cmd", required=True, parser_class=_Parser)
    pt = psub.add_parser("train", help="train a predictor on exported datasets (tensortune dataset export)")
    pt.add_argument("--data", action="append", required=True, help="training file .npz (repeatable: same op)")
    pt.add_argument("--kind", default="transformer", help="transformer (One-Shot Tuner), mlp, lstm or xgb")
    pt.add_argument("-o", "--output", required=True, help="predictor folder to write")
    pt.add_argument("--holdout", type=float, default=0.0,
                    help="share of the tasks kept out of training and evaluated at the end (default 0)")
    pt.add_argument("--epochs", type=_positive_int, default=None, help="most passes over the data")
    pt.add_argument("--lr", type=_positive_float, default=None, help="learning rate (default 1e-4)")
    pt.add_argument("--batch-size", type=_positive_int, default=None, help="rows per step (default 512)")
    pt.add_argument("--time-budget", type=_positive_float, default=None, help="stop training after this many seconds")
    pt.add_argument("--seed", type=_seed, default=0)
    pt.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="any other training option (patience, val_fraction, oversample, net.d_model, ...)")
    pt.add_argument("--force", action="store_true", help="replace an existing predictor folder's files")
    pe = psub.add_parser("eval", help="R^2, Spearman and top-k recall of a predictor on a training file")
    pe.add_argument("predictor", help="predictor folder")
    pe.add_argument("--data", action="append", required=True, help="training file .npz (repeatable)")
    pe.add_argument("--json", action="store_true")
    ps = psub.add_parser("show", help="what a predictor was trained on (default: the packaged ones)")
    ps.add_argument("predictor", nargs="?", default=None, help="predictor folder")

    rc = sub.add_parser("race", help="race tuners on models as Ray actors, suspending the worst (Trimmer)")
    rc.add_argument("models", nargs="+", help="built-in model names or ONNX files")
    rc.add_argument("--tuners", required=True, help="comma-separated tuner specs NAME[:KEY=VALUE...], "
                    "e.g. trimmer,autotvm,chameleon,chameleon:variant=ppo-greedy")
    rc.add_argument("--db-dir", required=True, help="one database per model and tuner goes here")
    rc.add_argument("--time-budget", type=_positive_float, default=None, help="seconds for the whole race")
    rc.add_argument("--energy-budget", type=_positive_float, default=None,
                    help="joules for the whole race (needs a readable RAPL counter; refused without one)")
    rc.add_argument("--rounds", type=_positive_int, default=None, help="rounds per tuner at most")
    rc.add_argument("--batch", type=_positive_int, default=64, help="measurements per task and round (64)")
    rc.add_argument("--no-suspend", action="store_true", help="run every tuner to the end (the comparison)")
    rc.add_argument("--ray-address", default=None, help="join this Ray cluster (default: start a local one)")
    rc.add_argument("--seed", type=_seed, default=0)
    rc.add_argument("--json", action="store_true")
    from .cli_fasor import add_parsers

    add_parsers(sub)
    return p


# ---------------------------------------------------------------- commands
def _tune(op: str, shape: Sequence[int], tuner_name: str, trials: int, db_path: str, seed: int,
          time_budget: float | None, early_stopping: int | None, batch_size: int | None,
          progress: bool, model_options: dict[str, Any] | None = None, tuner_options: Sequence[str] = (),
          cpu_budget: float | None = None, energy_budget: float | None = None, rpc: str | None = None,
          timing: dict[str, int] | None = None) -> Any:
    """Tune one operator; ``timing`` overrides the measurement's ``repeat`` and ``min_repeat_ms``."""
    from .measure import MeasureOptions
    from .measure.energy import EnergyUnavailable, require
    from .task import OpError, Task
    from .tuners import DEFAULT_BATCH_SIZE, get_tuner
    from .utils.progress import ProgressBar

    if energy_budget is not None:
        try:
            require()
        except EnergyUnavailable as e:
            raise UsageError(str(e)) from None
    options = _tuner_options(tuner_name, tuner_options, model_options)
    try:
        task = Task.from_op(op, shape)
    except OpError as e:
        raise UsageError(str(e)) from None
    try:
        tuner = get_tuner(tuner_name, task, seed=seed, batch_size=batch_size or DEFAULT_BATCH_SIZE, options=options)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_db_path(db_path, must_exist=False)
    measurer = _measurer(MeasureOptions(**(timing or {})), rpc)
    try:
        db = _open_db(db_path)
    except BaseException:
        measurer.close()
        raise
    bar = ProgressBar(trials, desc=f"{tuner_name} {task.name}", disable=not progress)
    try:
        with measurer as m:
            res = tuner.tune(trials, m, early_stopping=early_stopping, time_budget=time_budget,
                             callbacks=[bar], database=db, cpu_budget=cpu_budget, energy_budget=energy_budget)
    finally:
        bar.close()
        db.close()
    return res


def _measurer(options: Any, rpc: str | None) -> Any:
    """A Measurer; with ``rpc`` its runner times on that tracker's device (UsageError in one line
    when the text is malformed or no such device answers)."""
    from .measure import DeviceUnavailable, Measurer
    from .measure.measure import parse_rpc

    if rpc is None:
        return Measurer(options)
    try:
        parse_rpc(rpc)
        options.rpc = rpc
        return Measurer(options)
    except (ValueError, DeviceUnavailable) as e:
        raise UsageError(str(e)) from None


def cmd_tune_op(a: argparse.Namespace) -> int:
    """``tensortune tune-op``."""
    model_options = {"cost_model": a.cost_model, "objective": a.objective, "feature": a.feature,
                     "acquisition": a.acquisition, "transfer": a.transfer}
    res = _tune(a.op, _parse_shape(a.shape), a.tuner, a.trials, a.db, a.seed, a.time_budget,
                a.early_stopping, a.batch_size, progress=not (a.no_progress or a.json), model_options=model_options,
                tuner_options=a.tuner_options, cpu_budget=a.cpu_budget, energy_budget=a.energy_budget, rpc=a.rpc,
                timing={k: v for k, v in (("repeat", a.repeat), ("min_repeat_ms", a.min_repeat_ms)) if v is not None})
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
    _check_db_path(a.db, must_exist=True)
    db = _open_db(a.db, readonly=True)
    from .task import Task

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
    from .database import export_jsonl

    _check_db_path(a.db, must_exist=True)
    if a.output != "-":
        _check_output(a.output, a.force, db=a.db)
    db = _open_db(a.db, readonly=True)
    try:
        n = export_jsonl(db, sys.stdout if a.output == "-" else a.output)
    finally:
        db.close()
    print(f"exported {n} records" + (f" to {a.output}" if a.output != "-" else ""), file=sys.stderr)
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    """``tensortune import``."""
    from .database import DatabaseError, import_jsonl, parse_jsonl

    if not os.path.isfile(a.input):
        raise UsageError(f"{a.input}: no such file")
    _check_db_path(a.db, must_exist=False)
    try:
        parsed = parse_jsonl(a.input)  # every line checked before the database is touched
    except DatabaseError as e:
        raise UsageError(str(e)) from None
    existed = os.path.exists(a.db)
    db = _open_db(a.db)
    try:
        tasks, trials = import_jsonl(db, parsed, check=_config_check())
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


def _config_check() -> Any:
    """A check of an imported trial against its task: the task must be one this version can
    rebuild, and the config index must lie in its space and name the trial's knob values."""
    from .task import Task

    spaces: dict[str, Any] = {}

    def check(task: Any, trial: Any) -> None:
        if task.workload_key not in spaces:
            try:
                t = Task.from_json(json.loads(task.task_json))
                spaces[task.workload_key] = (t.space, t.workload_key)
            except Exception as e:  # noqa: BLE001 - any failure to rebuild is a bad record
                spaces[task.workload_key] = (None, f"task {task.workload_key} cannot be rebuilt here "
                                                   f"({str(e).splitlines()[0][:120] if str(e) else type(e).__name__})")
        space, key = spaces[task.workload_key]
        if space is None:
            raise ValueError(key)
        if key != task.workload_key:
            raise ValueError(f"task {task.workload_key} was stored by another template version (now {key})")
        if not 0 <= trial.config_index < len(space):
            raise ValueError(f"config_index {trial.config_index} outside the task's space (0..{len(space) - 1})")
        knobs = space.get(trial.config_index).to_json()["knobs"]
        if json.loads(json.dumps(trial.config)) != json.loads(json.dumps(knobs)):
            raise ValueError(f"config does not match config_index {trial.config_index} of the task's space")

    return check


def cmd_upgrade_db(a: argparse.Namespace) -> int:
    """``tensortune upgrade-db``: open for writing, which upgrades an older schema in one transaction."""
    from .database import Database

    _check_db_path(a.db, must_exist=True)
    db = _open_db(a.db)
    try:
        n = db.count()
    finally:
        db.close()
    print(f"{a.db}: schema version {Database.SCHEMA_VERSION}, {n} trials")
    return 0


def _load(a: argparse.Namespace) -> Any:
    """The model named on the command line (UsageError on bad input)."""
    from .models.importer import ModelError, load_model

    shapes: dict[str, list[int]] = {}
    for spec in getattr(a, "input_shape", []) or []:
        name, sep, dims = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"--input-shape {spec!r}: expected NAME=D0,D1,...")
        shapes[name] = _parse_shape(dims)
    try:
        return load_model(a.model, batch=getattr(a, "batch", 1), input_shapes=shapes or None)
    except ModelError as e:
        raise UsageError(str(e)) from None


def _check_tune_args(tuner: str, scheduler: str, trials_per_task: int | None, time_budget: float | None,
                     db_path: str, tuner_options: Sequence[str] = ()) -> dict[str, Any]:
    """The tuner's options; UsageError for a bad model-tuning argument (nothing measured or written)."""
    from .scheduler import SCHEDULERS

    options = _tuner_options(tuner, tuner_options)
    if scheduler not in SCHEDULERS:
        raise UsageError(f"unknown scheduler {scheduler!r}; known: {', '.join(SCHEDULERS)}")
    if trials_per_task is None and time_budget is None and scheduler != "survey":
        raise UsageError("give --trials-per-task N, --time-budget SECONDS, or both (or --scheduler survey)")
    _check_db_path(db_path, must_exist=False)
    return options


def _model_measure_options() -> Any:
    """How model tuning times candidates: cold, since a model's weights come from memory, not the caches."""
    from .measure import MeasureOptions

    return MeasureOptions.cold()


def _tune_model(model: Any, tuner_name: str, db_path: str, trials_per_task: int | None, time_budget: float | None,
                scheduler: str, seed: int, batch_size: int | None, progress: bool,
                tuner_options: Sequence[str] = (), cpu_budget: float | None = None,
                energy_budget: float | None = None, cost: dict[str, Any] | None = None,
                rpc: str | None = None, survey: dict[str, Any] | None = None,
                noise: dict[str, Any] | None = None) -> tuple[list[Any], Any, float]:
    """Tune every task of ``model``; returns (outcomes, tasks, wall seconds). ``cost``, when
    given, is filled with the run's cost (wall time, CPU-seconds, energy); ``noise`` with the
    contention its timings met (:class:`~.measure.noise.NoiseLog`: ``summary`` one line); ``survey``, for the
    survey scheduler, holds its options (``goal_ms``, ``speedup_goal``, ``batch``) and is filled with its
    report."""
    import time

    from .models.compile import model_tasks
    from .scheduler import SCHEDULERS
    from .tuners import DEFAULT_BATCH_SIZE, get_tuner
    from .utils.progress import ModelProgress

    options = _check_tune_args(tuner_name, scheduler, trials_per_task, time_budget, db_path, tuner_options)
    sched_cls = SCHEDULERS[scheduler]
    tasks = model_tasks(model)
    bs = batch_size or DEFAULT_BATCH_SIZE
    measurer = _measurer(_model_measure_options(), rpc)  # a bad --rpc fails before the database is made
    try:
        db = _open_db(db_path)
    except BaseException:
        measurer.close()
        raise

    def make_tuner(task: Any, round_: int) -> Any:
        return get_tuner(tuner_name, task, seed=seed + round_, batch_size=bs, options=options)

    t0 = time.perf_counter()
    try:
        with measurer as m:
            bar = ModelProgress(model.name, tasks, trials_per_task, time_budget, disable=not progress)
            extra: dict[str, Any] = {}
            if scheduler == "survey":
                from .scheduler.survey import SurveyOptions

                given = survey or {}
                s_opts = SurveyOptions(**{k: v for k, v in (("batch", given.get("batch")),
                                                             ("goal_s", (given.get("goal_ms") or 0) / 1e3 or None),
                                                             ("speedup_goal", given.get("speedup_goal")))
                                          if v is not None})
                extra = {"model_latency": _model_latency_fn(model, db), "options": s_opts}
            sched = sched_cls(tasks, make_tuner, m, db, trials_per_task, time_budget, callbacks=[bar], batch_size=bs,
                              cpu_budget=cpu_budget, energy_budget=energy_budget, **extra)
            try:
                outcomes = sched.run()
            finally:
                bar.close()
                if cost is not None:
                    cost.update(sched.cost())
                if noise is not None:
                    noise.update(m.noise.to_json(), summary=m.noise.describe())
                if survey is not None and hasattr(sched, "report"):
                    survey["report"] = sched.report()
    finally:
        db.close()
    return outcomes, tasks, time.perf_counter() - t0


def _model_latency_fn(model: Any, db: Any) -> Any:
    """``f(tuned) -> Timed(seconds, change, vs_first)``: the model compiled with ``db``'s bests (or
    untuned), timed beside the build timed before it and the first (the untuned one, which the
    survey times first: :class:`~.models.reference.PairedTiming`; compiled once)."""
    from .models.compile import compile_model
    from .models.reference import PairedTiming, set_threads
    from .target import cpu_count

    untuned: list[Any] = []
    timing = PairedTiming()

    def latency(tuned: bool) -> Any:
        set_threads(cpu_count())
        if tuned:
            cm = compile_model(model, db)
        else:
            if not untuned:
                untuned.append(compile_model(model, None))
            cm = untuned[0]
        return timing.time(cm.callable(model.example_inputs))

    return latency


def _print_outcomes(model: Any, outcomes: list[Any], wall: float) -> dict[str, Any]:
    from .scheduler import estimated_total

    total, n = estimated_total(outcomes)
    rows = [o.to_json() for o in outcomes]
    print(f"{'task':58} {'weight':>6} {'trials':>7} {'best':>11} {'x weight':>11}")
    for r in rows:
        best = f"{r['best_latency_ms']:8.3f} ms" if r["best_latency_ms"] is not None else "-"
        wt = f"{r['weighted_ms']:8.3f} ms" if r["weighted_ms"] is not None else "-"
        print(f"{r['task'][:58]:58} {r['weight']:6d} {r['trials']:7d} {best:>11} {wt:>11}")
    print(f"estimated total {total * 1e3:.2f} ms over {n}/{len(rows)} tasks with a measured schedule; "
          f"tuning wall time {wall:.0f} s")
    return {"model": model.name, "tasks": rows, "estimated_total_ms": total * 1e3, "tasks_measured": n,
            "wall_s": wall}


def cmd_tune(a: argparse.Namespace) -> int:
    """``tensortune tune``."""
    _check_tune_args(a.tuner, a.scheduler, a.trials_per_task, a.time_budget, a.db, a.tuner_options)  # before importing a model
    if a.energy_budget is not None:
        from .measure.energy import EnergyUnavailable, require

        try:
            require()
        except EnergyUnavailable as e:
            raise UsageError(str(e)) from None
    model = _load(a)
    _threads_env(None)  # the in-model check at the end times the model in this process
    cost: dict[str, Any] = {}
    noise: dict[str, Any] = {}
    survey = ({"goal_ms": a.latency_goal, "speedup_goal": a.speedup_goal, "batch": a.survey_batch}
              if a.scheduler == "survey" else None)
    outcomes, _, wall = _tune_model(model, a.tuner, a.db, a.trials_per_task, a.time_budget, a.scheduler, a.seed,
                                    a.batch_size, progress=not (a.no_progress or a.json), tuner_options=a.tuner_options,
                                    cpu_budget=a.cpu_budget, energy_budget=a.energy_budget, cost=cost, rpc=a.rpc,
                                    survey=survey, noise=noise)
    confirm: dict[str, Any] | None = None
    if a.rpc:
        confirm = {"skipped": "candidates were timed on an RPC device, not on this machine"}
    elif a.no_confirm:
        confirm = {"skipped": "--no-confirm"}
    elif any(o.best_s < float("inf") for o in outcomes):
        confirm = _check_after_tuning(model, a.db, progress=not (a.no_progress or a.json))
        wall += confirm["wall_s"]
        cost["wall_s"] = cost.get("wall_s", 0.0) + confirm["wall_s"]
        cost["confirm_s"] = confirm["wall_s"]
    if a.json:
        from .scheduler import estimated_total

        total, n = estimated_total(outcomes)
        print(json.dumps({"model": model.name, "tuner": a.tuner, "scheduler": a.scheduler,
                          "tasks": [o.to_json() for o in outcomes], "estimated_total_ms": total * 1e3,
                          "tasks_measured": n, "wall_s": wall, "cost": cost, "noise": noise or None,
                          **({"survey": survey["report"]} if survey and "report" in survey else {}),
                          **({"confirm": confirm} if confirm is not None else {}),
                          "measure": _model_measure_options().timing()}))
    else:
        _print_outcomes(model, outcomes, wall)
        if confirm is not None and "skipped" not in confirm:
            print(f"in-model check: {confirm['changed']} of {len(confirm['tasks'])} tuned tasks switched; "
                  + ", ".join(f"{k} {v:.2f} ms" for k, v in confirm["latency_ms"].items())
                  + (f"; kept the {confirm['kept']} configs" if confirm["kept"] != "confirmed" else "")
                  + f" ({confirm['wall_s']:.0f} s, in the wall time above)")
        energy = f"{cost['energy_j']:.1f} J" if cost.get("energy_j") is not None else \
            f"energy {cost.get('energy', 'not available')}"
        print(f"cost: {cost.get('cpu_s', 0.0):.1f} CPU-s, {energy}"
              + (f"; stopped by the {cost['stopped_by'].replace('_', ' ')}" if cost.get("stopped_by") else ""))
        if noise.get("summary"):
            print(noise["summary"])
        if survey and "report" in survey:
            rep = survey["report"]
            print(f"survey: untuned {rep['untuned_ms']:.2f} ms; rounds " + ", ".join(
                f"{r['latency_ms']:.2f}" + (f" ({r['speedup']:.3f}x)" if r.get("speedup") else "")
                for r in rep["rounds"]) + f" ms; stopped: {rep['stop']}")
    return 0


def _confirm(model: Any, db_path: str, progress: bool = False, **options: Any) -> Any:
    """The in-model check of ``model`` on the database at ``db_path`` (opened for writing)."""
    from .models.confirm import confirm_in_model

    db = _open_db(db_path)
    try:
        log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else None
        return confirm_in_model(model, db, log=log, **{k: v for k, v in options.items() if v is not None})
    finally:
        db.close()


def _check_after_tuning(model: Any, db_path: str, progress: bool, **options: Any) -> dict[str, Any]:
    """The in-model check at the end of ``tune`` and ``demo``, as JSON (with its one-line
    ``summary``); a failure is reported and returned as ``{"skipped": "failed: ...", "wall_s"}``:
    the tuning is stored, and its records stand as measured alone."""
    from .models.importer import _first_line

    t0 = time.perf_counter()
    try:
        report = _confirm(model, db_path, progress=progress, **options)
    except Exception as e:  # noqa: BLE001 - the check failing is reported, not fatal
        print(f"tensortune: the in-model check failed ({_first_line(e)}); the tuned records stand as measured alone",
              file=sys.stderr)
        return {"skipped": f"failed: {_first_line(e)}", "wall_s": time.perf_counter() - t0}
    return {**report.to_json(), "summary": report.summary()}


def cmd_confirm(a: argparse.Namespace) -> int:
    """``tensortune confirm``."""
    _check_db_path(a.db, must_exist=True)
    if a.alternatives is not None and a.alternatives < 0:
        raise UsageError("--alternatives must be >= 0")
    threads = _threads_env(a.threads)
    model = _load(a)
    report = _confirm(model, a.db, progress=not a.json, threads=threads, rounds=a.rounds, runs=a.runs,
                      alternatives=a.alternatives)
    print(json.dumps(report.to_json()) if a.json else report.table())
    return 1 if any(not v["ok"] for v in report.variants[:1]) else 0


def cmd_tasks(a: argparse.Namespace) -> int:
    """``tensortune tasks``."""
    from .models.compile import model_tasks

    model = _load(a)
    tasks = model_tasks(model)
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
    from .models.compile import compile_model

    for path in (a.output, a.output + ".json"):  # before the (slow) model import
        _check_output(path, a.force, db=a.db)
    model = _load(a)
    with _readonly_db(a.db) as db:
        cm = compile_model(model, db)
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
    return 0


@contextlib.contextmanager
def _readonly_db(path: str | None) -> Iterator[Any]:
    """The database at ``path`` opened read-only (None without a path), closed afterwards."""
    if path is None:
        yield None
        return
    _check_db_path(path, must_exist=True)
    db = _open_db(path, readonly=True)
    try:
        yield db
    finally:
        db.close()


def _threads_env(threads: int | None) -> int:
    from .target import cpu_count

    n = threads or cpu_count()
    os.environ["TVM_NUM_THREADS"] = str(n)  # before TVM's runtime starts its thread pool
    return n


def cmd_bench(a: argparse.Namespace) -> int:
    """``tensortune bench``."""
    from .models.bench import bench_model

    threads = _threads_env(a.threads)
    model = _load(a)
    with _readonly_db(a.db) as db:
        report = bench_model(model, db, threads, with_ort=not a.no_onnxruntime)
    if a.json:
        print(json.dumps(report.to_json()))
    else:
        print(report.table())
        fastest = report.fastest_library()
        if fastest is not None:
            untuned = report.row("tensortune untuned")
            ratio = f"{untuned.latency.median_ms / fastest[1]:.2f}" if untuned and untuned.latency else "-"
            print(f"fastest CPU runtime: {fastest[0]} {fastest[1]:.2f} ms (untuned tensortune / it: {ratio} x)")
    failed = [r.name for r in report.rows if not r.ok]
    return 1 if failed else 0


def cmd_profile(a: argparse.Namespace) -> int:
    """``tensortune profile``."""
    from .models.compile import compile_model
    from .models.layout import MODES
    from .models.profile import profile_compiled

    if a.layout is not None and a.layout not in MODES:
        raise UsageError(f"--layout {a.layout!r}: one of {', '.join(MODES)}")
    threads = _threads_env(a.threads)
    model = _load(a)
    with _readonly_db(a.db) as db:
        cm = compile_model(model, db, layout=a.layout)
    peak: dict[str, Any] = {}
    if not a.no_peak:
        from .measure.peak import measure_peak

        peak = measure_peak(threads)
    prof = profile_compiled(cm, runs=a.runs, threads=threads, peak_gflops=peak.get("peak_gflops"),
                            bandwidth_gbs=peak.get("bandwidth_gbs"))
    print(json.dumps(prof.to_json()) if a.json else prof.table(a.top))
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    """The main job on defaults: tune a built-in model for a few minutes, compile, compare."""
    from .models.bench import bench_model
    from .models.importer import ModelError, load_model

    threads = _threads_env(None)
    print(f"tensortune demo: tune {a.model} with {a.tuner} for {a.time_budget:.0f} s (database {a.db}, resumes), "
          f"then compare with PyTorch and ONNX Runtime")
    try:
        model = load_model(a.model)
    except ModelError as e:
        raise UsageError(str(e)) from None
    outcomes, _, wall = _tune_model(model, a.tuner, a.db, None, a.time_budget, DEMO_SCHEDULER, a.seed, None, True,
                                    tuner_options=a.tuner_options)
    _print_outcomes(model, outcomes, wall)
    if any(o.best_s < float("inf") for o in outcomes):
        check = _check_after_tuning(model, a.db, progress=True, threads=threads)
        if "summary" in check:
            print(check["summary"])
    db = _open_db(a.db, readonly=True)
    try:
        report = bench_model(model, db, threads)
    finally:
        db.close()
    print()
    print(report.table())
    return 1 if any(not r.ok for r in report.rows) else 0


def cmd_dataset(a: argparse.Namespace) -> int:
    """``tensortune dataset layers|tasks``."""
    from .dataset import layers as L

    if a.dataset_cmd == "layers":
        from .models.zoo import model_names

        names = [m.strip() for m in a.models.split(",")] if a.models else model_names()
        unknown = [m for m in names if m not in model_names()]
        if unknown:
            raise UsageError(f"unknown model {unknown[0]!r}; known: {', '.join(model_names())}")
        _check_output(a.output, a.force)
        stats = L.zoo_statistics(names)
        L.save(stats, a.output)
        for st in stats:
            role = "evaluated (kept out of the prior)" if st.model in L.EVALUATED else "prior"
            print(f"{st.model:16} {sum(st.layers.values()):4d} layers, {len(st.layers):3d} distinct, {role}"
                  + (f"; skipped {dict(st.skipped)}" if st.skipped else ""))
        print(f"written: {a.output}")
        return 0
    if a.dataset_cmd in ("generate", "export", "status"):
        return _dataset_db(a)
    from .dataset.tasks import overlap, sample_tasks

    try:
        prior, evaluated = L.load(a.layers or L.ZOO_LAYERS)
        tasks = sample_tasks(a.sampler, prior, a.op, a.n, a.seed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    hits, total = overlap(tasks, evaluated)
    if a.json:
        print(json.dumps({"sampler": a.sampler, "op": a.op, "seed": a.seed, "tasks": [t.shape for t in tasks],
                          "evaluated_layers_contained": hits, "evaluated_layers": total}))
    else:
        for t in tasks:
            print(f"{t.op} {','.join(str(v) for _, v in t.args)}")
        print(f"{len(tasks)} distinct {a.op} tasks ({a.sampler}, seed {a.seed}); {hits} of them are among the "
              f"{total} distinct {a.op} layers of the evaluated models ({', '.join(L.EVALUATED)})")
    return 0


def _dataset_db(a: argparse.Namespace) -> int:
    """``tensortune dataset generate|export``."""
    from .dataset import generate as G

    if a.shards:
        _restore_shards(a)
    if a.dataset_cmd == "export":
        _check_db_path(a.db, must_exist=True)
        _check_output(a.output, a.force, db=a.db)
        try:
            spec = G.read_spec(a.db)  # None for records imported from elsewhere
        except ValueError as e:
            raise UsageError(str(e)) from None
        db = _open_db(a.db, readonly=True)
        try:
            kept = G.tasks_path(a.db)  # the generator's task order, for --max-tasks
            order = json.loads(kept.read_text()) if a.max_tasks and kept.exists() else None
            summary = G.export(db, a.op, a.output, spec=spec, max_tasks=a.max_tasks, max_samples=a.max_samples,
                               order=order)
        except ValueError as e:
            raise UsageError(str(e)) from None
        finally:
            db.close()
        print(f"{summary['samples']} samples of {len(summary['tasks'])} {a.op} tasks on {len(summary['machines'])} "
              f"machine(s) ({summary['dropped']} dropped: failed, unverified or > {summary['max_slowdown']:g}x the best); "
              f"written: {a.output} and {a.output}.json")
        return 0
    if a.dataset_cmd == "status":
        _check_db_path(a.db, must_exist=True)
        try:
            spec = G.read_spec(a.db)
            if spec is None:
                raise ValueError(f"no settings file {G.spec_path(a.db)}")
            tasks = G.frozen_tasks(spec, a.db)
        except (OSError, ValueError, TypeError) as e:
            raise UsageError(f"{a.db}: not a dataset database ({e})") from None
        db = _open_db(a.db, readonly=True)
        try:
            st = G.status(spec, db, tasks)
        finally:
            db.close()
        if a.json:
            print(json.dumps(st))
        else:
            print(f"{a.db}: {spec.op} ({spec.task_sampler}/{spec.code_sampler}); {st['complete']}/{st['tasks']} tasks "
                  f"complete{_exhausted_text(st['exhausted'], spec.samples)}, {st['samples']} samples, "
                  f"{st['measuring_hours']:.2f} h of measuring")
            for name, m in st["machines"].items():
                print(f"  {name}: {m['tasks']} tasks, {m['samples']} samples, {m['seconds'] / 3600:.2f} h")
        return 0
    from .measure import Measurer
    from .utils.progress import ProgressBar

    try:
        spec = G.DatasetSpec(a.op, a.tasks, a.samples, a.sampler, a.code, a.seed, blocked=not a.unblocked,
                             repeat=a.repeat, min_repeat_ms=a.min_repeat_ms)
        _check_db_path(a.db, must_exist=False)
        G.check_spec(spec, a.db)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        kept = G.frozen_tasks(spec, a.db)
        tasks = G.top_up(spec, a.db, kept)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if len(tasks) > len(kept):
        print(f"{a.db}: {len(tasks) - len(kept)} tasks added to the {len(kept)} it kept (today's layer statistics "
              f"give more distinct {a.op} tasks)", flush=True)
    print(f"dataset {a.db}: {len(tasks)} {a.op} tasks ({a.sampler}), {a.samples} {a.code} samples each; "
          "every trial is committed as it completes: rerun the same command to resume", flush=True)
    db = _open_db(a.db)
    bar = ProgressBar(len(tasks) * a.samples, desc=f"dataset {a.op}", disable=a.no_progress)

    if a.shards:
        from .dataset.shards import save_sidecars, save_task

        save_sidecars(a.db, a.shards)

    def done(p: Any) -> None:
        if a.shards and p.measured:
            save_task(db, a.shards, p.workload_key)
        if a.no_progress:
            print(f"{p.name}: {p.stored} samples stored ({p.measured} this run){'; ' + p.note if p.note else ''}",
                  flush=True)

    try:
        with Measurer(spec.measure_options()) as m:
            progress = G.generate(spec, db, m, tasks, a.time_budget, on_task=done, callbacks=[bar])
    finally:
        bar.close()
        db.close()
    exhausted = sum(p.stored < a.samples and p.note == "space_exhausted" for p in progress)
    full = sum(p.stored >= a.samples for p in progress) + exhausted
    print(f"{full}/{len(tasks)} tasks complete{_exhausted_text(exhausted, a.samples)}, "
          f"{sum(p.measured for p in progress)} samples measured this run")
    return 0


def _exhausted_text(exhausted: int, samples: int) -> str:
    """The status line's note on tasks whose whole space was smaller than the samples asked for."""
    return f" ({exhausted} of them with every config of a space smaller than {samples} measured)" if exhausted else ""


def _restore_shards(a: argparse.Namespace) -> None:
    """Fill ``a.db`` from the shard folder ``a.shards`` (see :mod:`tensortune.dataset.shards`)."""
    from .database import DatabaseError
    from .dataset.shards import restore

    if not Path(a.shards).is_dir():
        if a.dataset_cmd != "generate":
            raise UsageError(f"{a.shards}: no such shard folder")
        return
    _check_db_path(a.db, must_exist=False)
    db = _open_db(a.db)
    try:
        shards, trials = restore(a.db, db, a.shards)
    except DatabaseError as e:
        raise UsageError(str(e)) from None
    finally:
        db.close()
    if shards:
        print(f"restored {shards} task shard(s), {trials} samples, from {a.shards} into {a.db}", flush=True)


def cmd_predictor(a: argparse.Namespace) -> int:
    """``tensortune predictor train|eval|show``."""
    from .learn import PredictorError, concat, load_predictor, load_training

    if a.predictor_cmd == "show":
        from .costmodel.pretrained import SHIPPED, available_ops, predictor_folder

        folders = [Path(a.predictor)] if a.predictor else [predictor_folder(op) for op in available_ops()]
        if not folders:
            print(f"no predictors packaged in {SHIPPED}")
        for folder in folders:
            try:
                p = load_predictor(folder)
            except PredictorError as e:
                raise UsageError(str(e)) from None
            d, t = p.schema.get("dataset", {}), p.schema.get("training", {})
            m = p.machine
            print(f"{folder}: {p.kind} predictor of {p.op}; {d.get('samples')} samples of {d.get('tasks')} tasks "
                  f"measured on {m.get('cpu_model', '?')} {m.get('target', '')} ({m.get('threads', '?')} threads)")
            rep = t.get("report", {})
            if rep:
                vm = rep.get("val_metrics", {})
                print(f"  trained {rep.get('epochs')} epochs in {rep.get('seconds', 0):.0f} s ({rep.get('stop_reason')}); "
                      f"validation tasks: R^2 {vm.get('r2', 0):.3f}, Spearman {vm.get('spearman', 0):.3f}")
            if p.schema.get("heldout"):
                h = p.schema["heldout"]
                print(f"  held-out tasks ({h.get('tasks')}): R^2 {h.get('r2', 0):.3f}, Spearman {h.get('spearman', 0):.3f}, "
                      f"top-1 {h.get('top1_recall', 0):.2f}, top-5 {h.get('top5_recall', 0):.2f}")
            if p.schema.get("command"):
                print(f"  made by: {p.schema['command']}")
        return 0
    try:
        data = concat([load_training(f) for f in a.data])
    except ValueError as e:
        raise UsageError(str(e)) from None
    if a.predictor_cmd == "eval":
        from .learn.metrics import ranking_metrics

        try:
            p = load_predictor(a.predictor)
        except PredictorError as e:
            raise UsageError(str(e)) from None
        if data.op and data.op != p.op:
            raise UsageError(f"{a.predictor} predicts {p.op} tasks; the data holds {data.op} tasks")
        m = ranking_metrics(data.label, p.predict_rows(data.inputs()), data.task_index)
        print(json.dumps(m) if a.json else ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                    for k, v in m.items()))
        return 0
    return _predictor_train(a, data)


def _predictor_train(a: argparse.Namespace, data: Any) -> int:
    """``tensortune predictor train``."""
    from .learn.metrics import ranking_metrics
    from .learn.predictor import SCHEMA_FILE
    from .learn.trainer import TrainOptions, train_predictor
    from .utils.options import OptionError, make_options, parse_assignments

    out = Path(a.output)
    if out.exists() and (not out.is_dir() or ((out / SCHEMA_FILE).exists() and not a.force)):
        raise UsageError(f"-o {out}: {'not a folder' if not out.is_dir() else 'holds a predictor; use --force to replace it'}")
    if not 0.0 <= a.holdout < 1.0:
        raise UsageError("--holdout must lie in [0, 1)")
    try:
        extra = parse_assignments(a.option)
        given = {k: v for k, v in (("kind", a.kind), ("max_epochs", a.epochs), ("lr", a.lr),
                                   ("batch_size", a.batch_size), ("time_budget", a.time_budget), ("seed", a.seed))
                 if v is not None}
        options = make_options(TrainOptions, {**extra, **given}, owner="predictor training")
    except (OptionError, ValueError) as e:
        raise UsageError(str(e)) from None
    train, held = data.split(a.holdout, seed=a.seed) if a.holdout > 0 else (data, None)
    print(f"training a {options.kind} predictor of {data.op}: {len(train)} samples of {len(train.tasks())} tasks"
          + (f"; {len(held.tasks())} tasks held out" if held is not None else ""), flush=True)

    def epoch(e: int, tl: float, vl: float) -> None:
        if e == 1 or e % 10 == 0:
            print(f"  epoch {e}: train loss {tl:.5f}, validation loss {vl:.5f}", flush=True)

    predictor, report = train_predictor(train, options, on_epoch=epoch)
    predictor.schema["command"] = command_line("predictor")
    vm = report.val_metrics
    print(f"{report.epochs} epochs in {report.seconds:.0f} s ({report.stop_reason}); validation tasks: "
          f"R^2 {vm['r2']:.3f}, Spearman {vm['spearman']:.3f}, top-1 {vm['top1_recall']:.2f}, top-5 {vm['top5_recall']:.2f}")
    if held is not None and len(held):
        hm = ranking_metrics(held.label, predictor.predict_rows(held.inputs()), held.task_index)
        names = data.summary.get("tasks", [])
        hm["task_names"] = [names[int(t)].get("name") if int(t) < len(names) else str(t) for t in held.tasks()]
        predictor.schema["heldout"] = hm
        print(f"held-out tasks ({hm['tasks']}): R^2 {hm['r2']:.3f}, Spearman {hm['spearman']:.3f}, "
              f"top-1 {hm['top1_recall']:.2f}, top-5 {hm['top5_recall']:.2f}, top-64 quality {hm['top64_quality']:.3f}")
    predictor.save(out)
    print(f"written: {out}")
    return 0


def _say_round(e: Any, row: dict[str, Any]) -> None:
    """One line on stderr per finished round of a race (``--json`` too: a race runs for hours)."""
    lat = f"{row['latency_s'] * 1e3:.3f} ms" if row.get("latency_s") else "no latency"
    if row.get("change") is not None:
        lat += f" ({row['change']:+.1%} against the round before, timed in pairs)"
    print(f"race: {os.path.basename(e.model)} {e.tuner} round {row['round']}: {lat}, {row['trials']} trials, "
          f"{row['cpu_s']:.0f} CPU-s, {row['wall_s']:.0f} s", file=sys.stderr, flush=True)


def _say_status(e: Any) -> None:
    """One line on stderr when a race's actor is suspended (with the change that ranked it), is done
    early (its tuners have stopped) or dies."""
    why = {"suspended": f"last round {e.improvement:+.1%}",
           "done": "its round measured nothing: every task's tuner has stopped"}.get(e.status, e.error)
    print(f"race: {os.path.basename(e.model)} {e.tuner} {e.status} ({why})", file=sys.stderr, flush=True)


def cmd_race(a: argparse.Namespace) -> int:
    """``tensortune race``."""
    from .cluster.race import race
    from .tuners import TUNERS
    from .utils.options import OptionError, parse_assignments

    specs = [t.strip() for t in a.tuners.split(",") if t.strip()]
    for spec in specs:  # every tuner and option checked before Ray starts
        name, *items = spec.split(":")
        if name not in TUNERS:
            raise UsageError(f"unknown tuner {name!r}; known: {', '.join(TUNERS)}")
        try:
            TUNERS.get(name).check_options(parse_assignments(items))
        except OptionError as e:
            raise UsageError(f"tuner {spec!r}: {e}") from None
    if a.time_budget is None and a.energy_budget is None and a.rounds is None:
        raise UsageError("give --time-budget SECONDS, --energy-budget JOULES or --rounds N")
    if a.energy_budget is not None:
        from .measure.energy import EnergyUnavailable, require

        try:
            require()
        except EnergyUnavailable as e:
            raise UsageError(str(e)) from None
    for m in a.models:
        from .models.zoo import MODELS

        if m not in MODELS and not os.path.isfile(m):
            raise UsageError(f"{m}: no such file, and not a built-in model (built-ins: {', '.join(MODELS)})")
    out = race(a.models, specs, a.db_dir, a.time_budget, a.energy_budget, a.rounds, a.batch, not a.no_suspend,
               a.ray_address, a.seed, on_round=_say_round, on_status=_say_status)
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{'model':24} {'tuner':32} {'status':10} {'rounds':>6} {'trials':>7} {'final':>11} {'CPU-s':>8}")
    for e in out["entries"]:
        lat = f"{e['final_latency_ms']:8.3f} ms" if e["final_latency_ms"] is not None else "-"
        print(f"{os.path.basename(e['model'])[:24]:24} {e['tuner'][:32]:32} {e['status']:10} {len(e['rounds']):6d} "
              f"{e['trials']:7d} {lat:>11} {e['cpu_s']:8.0f}")
    energy = f"{out['energy_j']:.0f} J" if out["energy_j"] is not None else "energy not available"
    print(f"race: {out['wall_s']:.0f} s wall, {out['cpu_s']:.0f} CPU-s, {energy}; "
          f"{'the worst suspended each round' if out['suspend'] else 'no suspension'}")
    return 0


COMMANDS = {"tune-op": cmd_tune_op, "best": cmd_best, "export": cmd_export, "import": cmd_import,
            "upgrade-db": cmd_upgrade_db, "demo": cmd_demo,
            "tune": cmd_tune, "tasks": cmd_tasks, "compile": cmd_compile, "bench": cmd_bench, "profile": cmd_profile,
            "confirm": cmd_confirm,
            "dataset": cmd_dataset, "predictor": cmd_predictor, "race": cmd_race,
            "hardware": lambda a: _fasor_cmd("cmd_hardware", a), "fasor": lambda a: _fasor_cmd("cmd_fasor", a)}


def _fasor_cmd(name: str, a: argparse.Namespace) -> int:
    from . import cli_fasor

    return getattr(cli_fasor, name)(a)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensortune`` console script.

    Every fault ends in one line on stderr and a non-zero status: the library's own errors
    (:class:`TensortuneError`) with their exit code, and faults of the environment (a full disk, a
    read-only or corrupt database file, a closed stdout, memory) with status 1."""
    from .utils.logs import log_to_stderr
    from .utils.quiet import quiet_third_party_warnings

    quiet_third_party_warnings()
    log_to_stderr()
    try:
        a = build_parser().parse_args(argv)
        return COMMANDS[a.cmd](a)
    except TensortuneError as e:
        return _fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        print("tensortune: interrupted; measured trials are in the database, rerun to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (`| head`)
        _silence_stdout()
        return 141
    except (OSError, sqlite3.Error, MemoryError, RecursionError) as e:
        return _fail(_environment_fault(e), 1)


def _environment_fault(e: BaseException) -> str:
    """One line for a fault of the machine rather than of the input."""
    if isinstance(e, MemoryError):
        return f"out of memory{': ' + str(e) if str(e) else ''}"
    if isinstance(e, RecursionError):
        return "input nested too deeply to read"
    if isinstance(e, sqlite3.Error):
        return f"database: {e}"
    where = f"{e.filename}: " if getattr(e, "filename", None) else ""
    return f"{where}{e.strerror or e}" if isinstance(e, OSError) else str(e)


def _fail(message: str, code: int) -> int:
    """Print ``tensortune: error: message`` on stderr; stdout is silenced if it cannot be flushed
    (a full or closed stdout would otherwise raise again at exit)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _silence_stdout()
    print(f"tensortune: error: {message.splitlines()[0] if message else 'failed'}", file=sys.stderr)
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
