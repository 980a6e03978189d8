"""Tune one operator (a 512x512x512 matmul by default) and print where its best came from.

    python examples/tune_operator.py
    python examples/tune_operator.py --op conv2d --shape 56,56,64,64,3,1,1 --tuner autotvm
"""
from __future__ import annotations

import argparse

import tensortune


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="matmul")
    p.add_argument("--shape", default="512,512,512", help="comma-separated shape values of the op")
    p.add_argument("--tuner", default="random", help="random, autotvm, chameleon, oneshot, fasor, trimmer, ...")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--db", default="ops.db")
    a = p.parse_args()

    shape = [int(v) for v in a.shape.split(",")]
    res = tensortune.tune_op(a.op, shape, a.tuner, tensortune.Budget(trials=a.trials), a.db)
    print(f"{res.task.name}: {res.best_cost * 1e3:.4f} ms, {res.best_gflops:.1f} GFLOPS "
          f"after {res.trials_measured} trials ({res.stop_reason})")
    print(f"best from: {res.describe_source()}")


if __name__ == "__main__":
    main()
