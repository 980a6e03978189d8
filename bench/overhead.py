"""Tuning overhead: wall time of 64 trials beyond the candidates' own timed runs.

tensortune's random search against MetaSchedule's ``tune_tir`` (evolutionary search +
XGBoost, all its defaults, ``num_tuning_cores="physical"`` included) on the same 512x512x512 matmul PrimFunc, one after the other,
each from a cold start (worker processes included). Each side's own timed runs (the
timing loops of its runner) are measured and subtracted from its wall time.

    python bench/overhead.py [--trials 64] [--size 512]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, save_json  # noqa: E402

from tensortune.target import cpu_count  # noqa: E402

os.environ.setdefault("TVM_NUM_THREADS", str(cpu_count()))

_TIMING_LOG = os.path.join(tempfile.gettempdir(), f"tensortune-ms-timing-{os.getpid()}.log")


def timed_run_evaluator(rt_mod, device, evaluator_config, repeated_args):  # runs in MetaSchedule's runner worker
    """MetaSchedule's default evaluator, with the duration of its timing loop logged."""
    import time as _t

    from tvm.s_tir.meta_schedule.runner.local_runner import default_run_evaluator

    t0 = _t.perf_counter()
    out = default_run_evaluator(rt_mod, device, evaluator_config, repeated_args)
    with open(_TIMING_LOG, "a") as f:
        f.write(f"{_t.perf_counter() - t0}\n")
    return out


def _seconds(x) -> float:
    return float(getattr(x, "value", x))


def run_tensortune(size: int, trials: int, seed: int) -> dict[str, float]:
    from tensortune.measure import Measurer
    from tensortune.task import Task
    from tensortune.tuners import get_tuner

    task = Task.from_op("matmul", [size, size, size])
    timed = 0.0

    def add(tuner, inputs, results):
        nonlocal timed
        timed += sum(r.extra.get("timed_s", 0.0) for r in results)

    t0 = time.perf_counter()
    with Measurer() as m:
        res = get_tuner("random", task, seed=seed).tune(trials, m, callbacks=[add])
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "timed_runs_s": timed, "overhead_s": wall - timed, "trials": res.trials_measured,
            "best_gflops": res.best_gflops}


def run_metaschedule(size: int, trials: int, seed: int, cores: str) -> dict[str, float]:
    from tvm.s_tir import meta_schedule as ms

    from tensortune.target import make_target
    from tensortune.task import Task

    task = Task.from_op("matmul", [size, size, size])
    target = make_target(task.target_json)
    open(_TIMING_LOG, "w").close()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        db = ms.tune_tir(task.prim_func(), target, work, max_trials_global=trials, num_trials_per_iter=64,
                         runner=ms.runner.LocalRunner(f_run_evaluator=timed_run_evaluator), seed=seed,
                         num_tuning_cores=cpu_count() if cores == "same" else cores)
        wall = time.perf_counter() - t0
        recs = db.get_all_tuning_records()
        costs = [sum(_seconds(x) for x in r.run_secs) / len(r.run_secs) for r in recs if r.run_secs]
        costs = [c for c in costs if c < 1e9]  # MetaSchedule stores failed candidates as 1e10 s
    timed = sum(float(x) for x in open(_TIMING_LOG).read().split())
    os.remove(_TIMING_LOG)
    best = min(costs) if costs else float("inf")
    return {"wall_s": wall, "timed_runs_s": timed, "overhead_s": wall - timed, "trials": len(recs),
            "best_gflops": task.flops / best / 1e9 if costs else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ms-cores", default="physical", choices=["physical", "logical", "same"],
                    help="MetaSchedule's num_tuning_cores: its own default 'physical' (its fastest here), "
                         "or 'same' as tensortune's builder (2 on this machine: 3x slower for it)")
    ap.add_argument("--name", default="overhead")
    a = ap.parse_args()
    print(f"overhead of {a.trials} trials on matmul {a.size}^3 (threads: {os.environ['TVM_NUM_THREADS']})", flush=True)
    ours = run_tensortune(a.size, a.trials, a.seed)
    print(f"tensortune random : {ours}", flush=True)
    ms_res = run_metaschedule(a.size, a.trials, a.seed, a.ms_cores)
    print(f"MetaSchedule      : {ms_res}", flush=True)
    ratio = ours["overhead_s"] / ms_res["overhead_s"]
    print(f"\n{'':20}{'wall s':>10}{'timed runs s':>14}{'overhead s':>12}{'trials':>8}{'best GFLOPS':>13}")
    for name, r in (("tensortune random", ours), ("MetaSchedule", ms_res)):
        print(f"{name:20}{r['wall_s']:10.1f}{r['timed_runs_s']:14.1f}{r['overhead_s']:12.1f}{r['trials']:8d}{r['best_gflops']:13.1f}")
    print(f"overhead ratio tensortune / MetaSchedule = {ratio:.3f} (target <= 0.333)")
    path = save_json(a.name, {"machine": machine_info(), "trials": a.trials, "size": a.size, "ms_cores": a.ms_cores,
                                  "tensortune": ours, "metaschedule": ms_res, "overhead_ratio": ratio})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
