"""``tensortune tune-op``: one operator, tuned into a database (``tensortune db`` reads it)."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ..app.checks import tuner_options
from ..app.tuning import DEFAULT_TUNER
from .args import check_db, int_in, parse_shape, positive_float, precision_arg, positive_int, seed, target_arg, tuner_option_arg


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
    precision_arg(t)
    t.add_argument("--tuner", default=DEFAULT_TUNER, help=f"one of {', '.join(TUNERS)} (default {DEFAULT_TUNER})")
    t.add_argument("--trials", type=positive_int, required=True, help="trial budget for this task and tuner")
    t.add_argument("--time-budget", type=positive_float, default=None, help="stop after this many seconds")
    t.add_argument("--cpu-budget", type=positive_float, default=None,
                   help="stop after this many CPU-seconds (the tuner's own, building and running)")
    t.add_argument("--energy-budget", type=positive_float, default=None,
                   help="stop after this many joules (needs a readable RAPL counter; refused without one)")
    t.add_argument("--early-stopping", type=positive_int, default=None, help="stop after N trials without improvement")
    t.add_argument("--batch-size", type=positive_int, default=None, help="candidates the tuner proposes per measurement batch (default: the tuner's own)")
    t.add_argument("--rpc", default=None, metavar="HOST:PORT:KEY",
                   help="time candidates on a device of this TVM RPC tracker (built here)")
    t.add_argument("--rpc-workers", type=positive_int, default=1, metavar="N",
                    help="with --rpc: candidates timed at once, each on a device of its own (default 1)")
    target_arg(t)
    t.add_argument("--db", required=True, help="SQLite database file (created if missing)")
    t.add_argument("--seed", type=seed, default=0, help="seed of the randomness (default 0)")
    t.add_argument("--repeat", type=int_in(1, 1000), default=None,
                   help=f"timings of each candidate, the median is its cost (default {MeasureOptions.repeat})")
    t.add_argument("--min-repeat-ms", type=int_in(0, 60_000), default=None,
                   help=f"runs of a timing are repeated until it lasts this long (default {MeasureOptions.min_repeat_ms})")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    tuner_option_arg(t)
    m = t.add_argument_group("model-based tuners (autotvm, model-based): shortcuts of --option")
    m.add_argument("--cost-model", default=None, help=f"one of {', '.join(COST_MODELS)} (default xgb)")
    m.add_argument("--objective", default=None, choices=("rank", "reg"), help="XGBoost/TreeGRU loss (default rank)")
    m.add_argument("--feature", default=None, help=f"cost-model features: one of {', '.join(FEATURE_NAMES)} (default itervar)")
    m.add_argument("--acquisition", default=None, choices=("mean", "ei", "ucb"),
                   help="use a bootstrap ensemble with this acquisition")
    m.add_argument("--transfer", dest="transfer", action="store_true", default=None,
                   help="learn from other tasks' records in --db (the default when there are enough)")
    m.add_argument("--no-transfer", dest="transfer", action="store_false", help="never use other tasks' records")


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
                  options=options, rpc=a.rpc, rpc_workers=a.rpc_workers, repeat=a.repeat,
                  min_repeat_ms=a.min_repeat_ms, target=a.target,
                  progress=not (a.no_progress or a.json), precision=a.precision)
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


COMMANDS = {"tune-op": cmd_tune_op}
